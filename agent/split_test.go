package agent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/llamaserver"
)

// A member admits a split's part exactly as a local placement: against its own budget, with
// the arithmetic in a refusal, only from an agent (the admin), only with an rpc-server.
func TestSplitPartAdmission(t *testing.T) {
	rd, err := llamaserver.NewRPC(llamaserver.RPCConfig{Binary: "/nonexistent/ggml-rpc-server", LogDir: t.TempDir()}, nil)
	require.NoError(t, err)
	a := newBareAgent(t, "container-2g", func(c *Config) { c.Drivers = []engines.Driver{rd}; c.Budget = 1 << 30 })
	s := serve(t, a, nil)
	part := func(need int64) api.PlacementRequest {
		return api.PlacementRequest{Source: "/models/x.gguf", Name: "x.part.p-1", Runtime: api.RuntimeRPCServer,
			Part: &api.SplitPart{Parent: "p-1", Main: "main", Member: api.SplitMember{Host: a.Name(), Layers: 4, Weights: need - 64<<20, Overhead: 64 << 20, Need: need}}}
	}

	_, err = s.nsClient(t, "default").Place(t.Context(), part(256<<20))
	assert.Equal(t, api.CodeForbidden, codeOfErr(err), "a namespace token cannot place a part: %v", err)

	_, err = s.admin.Place(t.Context(), part(256<<20))
	assert.Equal(t, api.CodeEngineUnavailable, codeOfErr(err), "no rpc-server here: %v", err)
	assert.ErrorContains(t, err, "ggml-rpc-server not found")

	// The RPC channel is the agents' alone: a namespace token is refused before anything is dialled.
	tok, err := api.NamespaceToken(api.AdminToken(s.secret), "default")
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.url+"/v1/placements/p-1/rpc", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.RPCUpgrade)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func TestSplitPartRefusedOverBudget(t *testing.T) {
	a := newBareAgent(t, "container-2g", func(c *Config) { c.Budget = 1 << 30 })
	a.engines[api.RuntimeRPCServer] = api.Engine{Runtime: api.RuntimeRPCServer, Present: true, Version: "5.0.0"}
	rd, err := llamaserver.NewRPC(llamaserver.RPCConfig{Binary: "/bin/true", LogDir: t.TempDir()}, nil)
	require.NoError(t, err)
	a.drivers[api.RuntimeRPCServer] = rd
	req := api.PlacementRequest{Source: "/models/x.gguf", Name: "x.part.p-1", Runtime: api.RuntimeRPCServer,
		Part: &api.SplitPart{Parent: "p-1", Main: "main", Member: api.SplitMember{Layers: 4, Weights: 2 << 30, Overhead: 64 << 20, Need: 2<<30 + 64<<20}}}
	_, err = a.Place(t.Context(), api.Principal{Admin: true}, req)
	require.Error(t, err)
	assert.Equal(t, api.CodeInsufficientMemory, codeOfErr(err))
	assert.Contains(t, err.Error(), "2.1 GiB", "the arithmetic: %v", err)
	assert.Empty(t, a.Placements(), "nothing reserved")

	req.Part.Member.Need, req.Part.Member.Weights = 128<<20, 64<<20
	p, err := a.Place(t.Context(), api.Principal{Admin: true}, req)
	require.NoError(t, err)
	assert.Equal(t, int64(128<<20), p.Memory.Bytes, "the part reserves its share")
	assert.Equal(t, "-1", p.TTL, "a part never sleeps")
	assert.NotNil(t, p.Part)
	assert.Equal(t, int64(128<<20), a.Host().Memory.Reserved+a.Host().Memory.Committed)
}

// The doctor names a split's member that is gone, and one on another RPC protocol.
func TestSplitFindings(t *testing.T) {
	a := newBareAgent(t, "container-2g", nil)
	plan := &api.SplitPlan{Layers: 8, Protocol: "5.0.0", Members: []api.SplitMember{
		{Host: a.Name(), Main: true, Layers: 2}, {Host: "gone", Layers: 3}, {Host: "old", Layers: 3}}}
	old := &api.Host{Engines: []api.Engine{{Runtime: api.RuntimeRPCServer, Present: true, Version: "4.0.0"}}}
	a.view = func() api.MeshView {
		return api.MeshView{Members: []api.Member{{Name: "gone", Liveness: api.Dead}, {Name: "old", Liveness: api.Alive, Host: old}}}
	}
	fs := a.splitFindings([]api.Placement{{ID: "p-1", Model: "big", Namespace: "default", State: api.StateReady, Split: plan}})
	require.Len(t, fs, 2)
	assert.Contains(t, fs[0].Problem, "missing its member gone (3 of 8 layers): the host is dead")
	assert.Contains(t, fs[1].Problem, `member old runs RPC protocol "4.0.0", the split "5.0.0"`)
	assert.Equal(t, "default", fs[0].Namespace, "only the admin and the namespace see it")
}

// One member's refusal fails the whole split with that member's words and releases every part
// already admitted: here this host's own.
func TestSplitRefusalReleasesEveryPart(t *testing.T) {
	a := newBareAgent(t, "container-2g", func(c *Config) { c.Budget = 4 << 30 })
	t.Cleanup(a.wg.Wait) // the release finishes (and saves) in the background
	a.engines[api.RuntimeRPCServer] = api.Engine{Runtime: api.RuntimeRPCServer, Present: true, Version: "5.0.0"}
	rd, err := llamaserver.NewRPC(llamaserver.RPCConfig{Binary: "/bin/true", LogDir: t.TempDir()}, nil)
	require.NoError(t, err)
	a.drivers[api.RuntimeRPCServer] = rd
	var calls []string
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method+" "+r.URL.Path+" as "+r.Header.Get(PrincipalHeader))
		WriteError(w, api.Errorf(api.CodeInsufficientMemory, "needs 3 GiB, 1 GiB free"))
	}))
	t.Cleanup(member.Close)
	a.JoinMesh(func() api.MeshView {
		return api.MeshView{Members: []api.Member{{Name: "w", Role: api.RoleAgent, Liveness: api.Alive,
			Host: &api.Host{Name: "w", APIAddr: strings.TrimPrefix(member.URL, "http://")}}}}
	}, nil)
	pl := &placement{p: api.Placement{ID: "p-main", Model: "big", Source: "/m/big.gguf", Namespace: "default", Context: 256}}
	plan := &api.SplitPlan{Layers: 8, Members: []api.SplitMember{
		{Host: a.Name(), Main: true, Layers: 4, Weights: 1 << 30, Need: 1<<30 + 64<<20},
		{Host: "w", Layers: 4, Weights: 1 << 30, Need: 1<<30 + 64<<20}}}
	err = a.admitParts(t.Context(), pl, plan)
	require.Error(t, err)
	assert.Equal(t, api.CodeInsufficientMemory, codeOfErr(err))
	assert.ErrorContains(t, err, "w refused its share (4 layers, 1.1 GiB): InsufficientMemory: needs 3 GiB, 1 GiB free")
	assert.Equal(t, []string{"POST /v1/placements as admin"}, calls, "the member was asked as an agent, and nothing admitted there")
	assert.Empty(t, a.Placements(), "this host's own part was released")
	assert.Zero(t, a.Host().Memory.Reserved)
	assert.Empty(t, plan.Members[0].Part)
}

// While a split's llama-server starts, its main reports what the channels have sent the members
// of their layers' weights (the long part of a large split's start); the figure goes once the
// split is ready.
func TestSplitStartReportsWhatItSent(t *testing.T) {
	a := newBareAgent(t, "container-2g", nil)
	plan := &api.SplitPlan{Layers: 8, Members: []api.SplitMember{
		{Host: a.Name(), Main: true, Layers: 2, Weights: 1 << 30}, // its own part: loopback, not counted
		{Host: "w1", Layers: 3, Weights: 3 << 30}, {Host: "w2", Layers: 3, Weights: 1 << 30}}}
	pl := put(a, "p-1", "big", api.StateLoading, 1<<30, api.PriorityNormal, func(pl *placement) { pl.p.Split = plan })
	w1, w2 := &tunnel{}, &tunnel{}
	a.tunnels.add("p-1", w1)
	a.tunnels.add("p-1", w2)
	w1.sent.Add(1 << 30)
	w2.sent.Add(1 << 30)
	_, sub := a.Events().Subscribe(0, nil)
	defer sub.Close()
	stop := a.followSending(pl, "p-1", plan)
	defer stop()
	now := func() api.Placement {
		a.mu.RLock()
		defer a.mu.RUnlock()
		return pl.p
	}
	shown := func(sent, total int64, progress float64) func() bool {
		return func() bool {
			p := now()
			return p.PulledBytes == sent && p.TotalBytes == total && p.Progress == progress
		}
	}
	require.Eventually(t, shown(2<<30, 4<<30, 0.5), 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, "sent to the members", now().Moving())
	// An event says it with the rate: the Events view and mesh watch tell the time left.
	select {
	case ev := <-sub.C():
		assert.Regexp(t, `^sending the members their weights: 50% \(2\.0 GiB of 4\.0 GiB, \d+ MB/s\)$`, ev.Message)
	case <-time.After(5 * time.Second):
		t.Fatal("no event said what was sent")
	}

	// More than the weights (llama.cpp's other transfers): the bar stops short of done.
	w1.sent.Add(3 << 30)
	require.Eventually(t, shown(4<<30, 4<<30, 0.99), 5*time.Second, 10*time.Millisecond)
}
