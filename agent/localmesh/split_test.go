package localmesh

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/engines/enginetest"
)

// splitMesh is three hosts with the real llama-server and ggml-rpc-server.
func splitMesh(t *testing.T, ctx context.Context, budget int64) *Mesh {
	t.Helper()
	llama, rpc := enginetest.LlamaServer(t), enginetest.RPCServer(t)
	var hosts []HostSpec
	for _, n := range []string{"h1", "h2", "h3"} {
		hosts = append(hosts, HostSpec{Name: n, Demo: "gpu-server", OS: "linux", Arch: "amd64",
			Runtimes: []api.Runtime{api.RuntimeLlamaServer}, Budget: budget})
	}
	m, err := Start(ctx, Options{Dir: t.TempDir(), LlamaServer: llama, RPCServer: rpc, Fast: true, Hosts: hosts})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	return m
}

// children lists this process's child processes running name (the agents run in-process, so
// their engines are ours).
func children(t *testing.T, name string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read from the last ')'.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && filepath.Base(exe) == name {
			out = append(out, pid)
		}
	}
	return out
}

// models are the names GET /v1/models on host lists.
func models(t *testing.T, ctx context.Context, m *Mesh, host string) []string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.Host(host).URL+"/v1/models", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+m.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	var out []string
	for _, d := range list.Data {
		out = append(out, d.ID)
	}
	return out
}

func partsOf(t *testing.T, ctx context.Context, m *Mesh, host, parent string) []api.Placement {
	t.Helper()
	ps, err := m.Client(host).Placements(ctx)
	require.NoError(t, err)
	var out []api.Placement
	for _, p := range ps {
		if p.Part != nil && p.Part.Parent == parent {
			out = append(out, p)
		}
	}
	return out
}

// A split of the real tiny model across two hosts over the sealed channel: each member admits
// its part, a chat through the third host streams from the main, the parts are not models, and
// a delete leaves no process anywhere.
func TestSplitRealEngines(t *testing.T) {
	model := enginetest.TinyGGUF(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := splitMesh(t, ctx, 2<<30)

	h, err := m.Client("h2").Host(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, h.RPCProtocol(), "the host advertises its RPC protocol: %+v", h.Engines)

	p, err := m.Client("h1").Place(ctx, api.PlacementRequest{Source: FileSource(model), Name: "tiny", Context: 256,
		Split: &api.SplitAsk{Hosts: []string{"h1", "h2"}}})
	require.NoError(t, err)
	require.NotNil(t, p.Split, "the main shows its plan")
	require.Len(t, p.Split.Members, 2, p.Split.Reason)
	for _, mb := range p.Split.Members {
		assert.NotEmpty(t, mb.Part, "%s admitted its part", mb.Host)
		assert.Positive(t, mb.Layers)
	}
	assert.Less(t, p.Memory.Bytes, p.Split.Members[0].Need+p.Split.Members[0].MainNeed+1, "the main holds llama-server's share, not the layers")

	ready, err := m.Client("h1").WaitPlacement(ctx, p.ID, 100*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, api.StateReady, ready.State, ready.Reason)
	parts := partsOf(t, ctx, m, "h2", p.ID)
	require.Len(t, parts, 1)
	assert.Equal(t, api.RuntimeRPCServer, parts[0].Runtime)
	assert.Equal(t, api.StateReady, parts[0].State)
	assert.Regexp(t, `^127\.0\.0\.1:\d+$`, parts[0].Engine, "the worker listens on loopback only")

	// The start sent the worker its layers' weights over the channel: what the main's progress
	// counts against while it starts, and no figure once ready.
	worker := p.Split.Members[1]
	require.Equal(t, "h2", worker.Host)
	sent := channelBytes(t, m, "h1", "h2", "sent")
	assert.GreaterOrEqual(t, sent, 0.9*float64(worker.Weights), "sent to h2 while starting; its layers' weights are %d bytes", worker.Weights)
	assert.Zero(t, ready.TotalBytes)
	assert.Zero(t, ready.Progress)

	// No host prompt cache on the main: llama-server would save the members' KV there, over the
	// LAN, whenever a new prompt takes the slot.
	assert.Zero(t, ready.Memory.Cache)
	mains := 0
	for _, pid := range children(t, "llama-server") {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "\x00--rpc\x00") {
			continue // gone, or not a split's
		}
		mains++
		assert.Contains(t, string(cmdline), "\x00--cache-ram\x000\x00")
	}
	assert.Equal(t, 1, mains, "the split's llama-server")

	// The main holds the output layer and is llama-server's last device: each token's logits
	// (4 bytes for each of the vocabulary's 32,000 words) stay on it.
	main := p.Split.Members[0]
	require.Equal(t, "h1", main.Host)
	assert.True(t, main.Output, "the main holds the output layer: %s", p.Split.Reason)
	assert.Equal(t, "h1", p.Split.Devices()[len(p.Split.Devices())-1].Host)

	// Chat through a host that is not the main: streamed from the split.
	before := channelBytes(t, m, "h1", "h2", "received")
	var usage apiclient.ChatUsage
	require.Eventually(t, func() bool {
		var text strings.Builder
		err := m.Client("h3").ChatStream(ctx, "tiny", []apiclient.ChatMessage{{Role: "user", Content: "hello"}}, apiclient.ChatOptions{MaxTokens: 8}, func(d apiclient.ChatDelta) error {
			text.WriteString(d.Content)
			if d.Usage != nil {
				usage = *d.Usage
			}
			return nil
		})
		return err == nil && text.Len() > 0
	}, 30*time.Second, 200*time.Millisecond, "a chat through h3")
	// What came back from the worker over the sealed channel: its layers' activations and
	// answers, not a logits vector (128,000 bytes) a token.
	got := channelBytes(t, m, "h1", "h2", "received") - before
	require.Positive(t, usage.CompletionTokens)
	assert.Less(t, got, float64(usage.CompletionTokens*16<<10), "%.0f bytes from the worker for %d tokens", got, usage.CompletionTokens)
	t.Logf("%.0f bytes from the worker for %d tokens", got, usage.CompletionTokens)

	// The parts are not models: no gateway lists them.
	ms := models(t, ctx, m, "h3")
	for _, name := range ms {
		assert.NotContains(t, name, ".part.", "a part is listed as a model")
	}
	assert.Contains(t, ms, "tiny")
	// Neither the split nor its parts are intents: the main re-plans the split, and an intent
	// would place it again on one host, which cannot hold it.
	ins, err := m.Client("h3").Intents(ctx)
	require.NoError(t, err)
	assert.Empty(t, ins, "a split or its parts recorded as intents")

	require.NoError(t, m.Client("h1").Delete(ctx, p.ID))
	require.Eventually(t, func() bool {
		return len(partsOf(t, ctx, m, "h1", p.ID))+len(partsOf(t, ctx, m, "h2", p.ID)) == 0 &&
			len(children(t, "ggml-rpc-server"))+len(children(t, "llama-server")) == 0
	}, 30*time.Second, 100*time.Millisecond, "every part and process is gone")
}

// channelBytes is what host's split channels to member moved in direction, as its metrics
// count.
func channelBytes(t *testing.T, m *Mesh, host, member, direction string) float64 {
	t.Helper()
	mfs, err := m.Host(host).Node.Agent.Metrics().Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "llmkube_split_channel_bytes_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["member"] == member && labels["direction"] == direction {
				return mt.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// waitSplit waits until the split placement id on host is ready on members, or fails.
func waitSplit(t *testing.T, ctx context.Context, m *Mesh, host, id string, done func(api.Placement) bool) api.Placement {
	t.Helper()
	var last api.Placement
	var lastErr error
	got := assert.Eventually(t, func() bool {
		p, err := m.Client(host).Placement(ctx, id)
		if lastErr = err; err != nil {
			return false
		}
		last = p
		return done(p)
	}, time.Minute, 100*time.Millisecond)
	// The message is made after the wait: what the split was last seen as, not its zero value.
	require.True(t, got, "split %s never got there: %s %s (%s), restarts %d, members %v; last error %v",
		id, last.State, last.Code, last.Reason, last.Restarts, hostsOf(last), lastErr)
	return last
}

// readySplit places model split across h1 (the main) and h2, and waits until it is ready.
// readyRTTBound is readySplit's round-trip bound: wider than the default, which loopback never
// reaches anyway; the plan records it, and a re-plan keeps it.
const readyRTTBound = 900

func readySplit(t *testing.T, ctx context.Context, m *Mesh, model string) api.Placement {
	t.Helper()
	p, err := m.Client("h1").Place(ctx, api.PlacementRequest{Source: FileSource(model), Name: "tiny", Context: 256,
		Split: &api.SplitAsk{Hosts: []string{"h1", "h2"}, MaxRTTMillis: readyRTTBound}})
	require.NoError(t, err)
	return waitSplit(t, ctx, m, "h1", p.ID, func(p api.Placement) bool { return p.State == api.StateReady })
}

func hostsOf(p api.Placement) []string {
	var out []string
	if p.Split != nil {
		for _, mb := range p.Split.Members {
			out = append(out, mb.Host)
		}
	}
	return out
}

// A member that goes away aborts the split: the main re-plans onto the hosts left and runs
// again; when no host is left to take the share, the split fails with the reason and nothing of
// it keeps running.
func TestSplitReplansThenFailsWhenMembersGo(t *testing.T) {
	model := enginetest.TinyGGUF(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := splitMesh(t, ctx, 2<<30)
	p := readySplit(t, ctx, m, model)
	before := splitWeights(p)
	assert.Equal(t, float64(readyRTTBound), p.Split.MaxRTTMillis, "the plan records the bound asked for")

	require.NoError(t, m.Host("h2").Node.Close())
	p = waitSplit(t, ctx, m, "h1", p.ID, func(p api.Placement) bool {
		return p.State == api.StateReady && slices.Equal(hostsOf(p), []string{"h1", "h3"})
	})
	assert.Positive(t, p.Restarts, "the split restarted without h2")
	assert.InDelta(t, before, splitWeights(p), float64(p.Split.Layers), "the re-plan sizes the same model: every weight counted once")
	assert.True(t, p.Split.Members[0].Output, "the main still holds the output layer: %s", p.Split.Reason)
	assert.Equal(t, float64(readyRTTBound), p.Split.MaxRTTMillis, "the re-plan keeps the round-trip bound")
	require.Eventually(t, func() bool {
		var text strings.Builder
		err := m.Client("h3").ChatStream(ctx, "tiny", []apiclient.ChatMessage{{Role: "user", Content: "hello"}}, apiclient.ChatOptions{MaxTokens: 4}, func(d apiclient.ChatDelta) error {
			text.WriteString(d.Content)
			return nil
		})
		return err == nil && text.Len() > 0
	}, 30*time.Second, 200*time.Millisecond, "the re-planned split answers")

	require.NoError(t, m.Host("h3").Node.Close())
	p = waitSplit(t, ctx, m, "h1", p.ID, func(p api.Placement) bool { return p.State == api.StateFailed })
	assert.Equal(t, api.CodeInsufficientMemory, p.Code)
	assert.Contains(t, p.Reason, "h3 lost and the hosts left do not hold it")
	require.Eventually(t, func() bool {
		return len(partsOf(t, ctx, m, "h1", p.ID)) == 0 && len(children(t, "ggml-rpc-server"))+len(children(t, "llama-server")) == 0
	}, 30*time.Second, 100*time.Millisecond, "a failed split leaves nothing running")
}

// splitWeights is every weight a split counts: its members' and the token embeddings in the
// main's llama-server.
func splitWeights(p api.Placement) float64 {
	w := p.Memory.Weights
	for _, m := range p.Split.Members {
		w += m.Weights
	}
	return float64(w)
}

// A main that goes away takes its parts with it: each member drops its part once it sees the
// main host leave.
func TestSplitPartsGoWithTheirMain(t *testing.T) {
	model := enginetest.TinyGGUF(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := splitMesh(t, ctx, 2<<30)
	p := readySplit(t, ctx, m, model)
	require.Len(t, partsOf(t, ctx, m, "h2", p.ID), 1)
	require.NoError(t, m.Host("h1").Node.Close())
	require.Eventually(t, func() bool { return len(partsOf(t, ctx, m, "h2", p.ID)) == 0 }, 30*time.Second, 100*time.Millisecond,
		"h2 dropped the part of a split whose main left")
	require.Eventually(t, func() bool { return len(children(t, "ggml-rpc-server")) == 0 }, 30*time.Second, 100*time.Millisecond)
}
