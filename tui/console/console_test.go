package console_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/console"
)

// agents is a mesh of agent APIs on loopback, one HTTP server per host, all serving one mesh
// view in which each host's API address is its own server; each records what it was asked.
// A call marked for another host (api.HostHeader, as a console in agent mode sends them) is
// answered as that host, as a real agent forwarding it would.
type agents struct {
	mu      sync.Mutex
	view    api.MeshView
	calls   map[string][]string // host the call is for: "METHOD path", in order
	reached map[string]int      // host whose server was dialled: how many calls
	// estimate answers POST /v1/estimate on a host (nil: the host fails it); placement answers
	// GET /v1/placements/{id} with the n-th look at it.
	estimate  func(host string) *api.Estimation
	placement func(host, id string, n int) (api.Placement, *api.Error)
	listed    map[string][]api.Placement // what GET /v1/placements answers, by host
	// viewOf answers the n-th GET /v1/mesh asked for host's own view (nil: the mesh view).
	viewOf   func(host string, n int) api.MeshView
	meshAsks map[string]int
	chat     http.HandlerFunc // the gateway's POST /v1/chat/completions
}

func member(name string, runtimes ...api.Runtime) api.Member {
	h := &api.Host{Name: name, OS: "linux", Arch: "arm64", Memory: api.Memory{Total: 16 << 30, Budget: 12 << 30, Available: 14 << 30}}
	for _, r := range runtimes {
		h.Engines = append(h.Engines, api.Engine{Runtime: r, Present: true, Healthy: true})
		if r == api.RuntimeHailoOllama {
			h.Accelerators = append(h.Accelerators, api.Accelerator{Kind: "hailo", Name: "Hailo-10H", Memory: 8 << 30})
		}
	}
	return api.Member{Name: name, Role: api.RoleAgent, Liveness: api.Alive, Host: h}
}

func startAgents(t *testing.T, v api.MeshView) *agents {
	t.Helper()
	a := &agents{view: v, calls: map[string][]string{}, reached: map[string]int{}, listed: map[string][]api.Placement{}, meshAsks: map[string]int{}}
	looks := map[string]int{}
	for i := range a.view.Members {
		server := a.view.Members[i].Name
		mux := http.NewServeMux()
		record := func(r *http.Request) {
			a.mu.Lock()
			defer a.mu.Unlock()
			host := cmp.Or(r.Header.Get(api.HostHeader), server)
			a.calls[host] = append(a.calls[host], r.Method+" "+r.URL.Path)
			a.reached[server]++
		}
		// forHost is the host a call is for.
		forHost := func(r *http.Request) string { return cmp.Or(r.Header.Get(api.HostHeader), server) }
		mux.HandleFunc("GET /v1/mesh", func(w http.ResponseWriter, r *http.Request) {
			a.mu.Lock()
			defer a.mu.Unlock()
			v := a.view
			if host := r.Header.Get(api.HostHeader); host != "" {
				// Asked for one agent's own view (Wait's, until the mesh routes a placement).
				a.meshAsks[host]++
				if a.viewOf != nil {
					v = a.viewOf(host, a.meshAsks[host])
				}
			}
			_ = json.NewEncoder(w).Encode(v)
		})
		mux.HandleFunc("POST /v1/estimate", func(w http.ResponseWriter, r *http.Request) {
			record(r)
			est := a.estimate(forHost(r))
			if est == nil {
				w.WriteHeader(http.StatusInternalServerError)
				_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: api.CodeInternal, Message: "sizer down"}})
				return
			}
			_ = json.NewEncoder(w).Encode(est)
		})
		mux.HandleFunc("GET /v1/placements", func(w http.ResponseWriter, r *http.Request) {
			record(r)
			a.mu.Lock()
			defer a.mu.Unlock()
			_ = json.NewEncoder(w).Encode(api.PlacementList{Placements: a.listed[forHost(r)]})
		})
		mux.HandleFunc("GET /v1/placements/{id}", func(w http.ResponseWriter, r *http.Request) {
			record(r)
			host := forHost(r)
			a.mu.Lock()
			looks[host]++
			n := looks[host]
			a.mu.Unlock()
			p, err := a.placement(host, r.PathValue("id"), n)
			if err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: err})
				return
			}
			_ = json.NewEncoder(w).Encode(p)
		})
		mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
			record(r)
			a.chat(w, r)
		})
		mux.HandleFunc("DELETE /v1/placements/{id}", func(w http.ResponseWriter, r *http.Request) {
			record(r)
			w.WriteHeader(http.StatusNoContent)
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		a.view.Members[i].Host.APIAddr = srv.Listener.Addr().String()
	}
	return a
}

// dialled is how many calls host's own server took.
func (a *agents) dialled(host string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reached[host]
}

func (a *agents) asked(host string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls[host]...)
}

// connect watches the mesh through the first host's API; the view is read once.
func (a *agents) connect(t *testing.T, opts console.Options) *console.Conn {
	t.Helper()
	opts.AgentURL = "http://" + a.view.Members[0].Host.APIAddr
	opts.Poll = time.Hour
	c, err := console.Connect(t.Context(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func placed(id, host, model, ns string, state api.PlacementState) api.Placement {
	return api.Placement{ID: id, Host: host, Model: model, Namespace: ns, State: state, Source: "ollama://" + model}
}

func TestFindPlacement(t *testing.T) {
	pi5, tower := member("pi5"), member("tower")
	pi5.Placements = []api.Placement{placed("p-1a2b", "pi5", "qwen2:1.5b", "default", api.StateReady)}
	tower.Placements = []api.Placement{placed("p-1a3c", "tower", "llama3.2:3b", "default", api.StateReady),
		placed("p-9f00", "tower", "qwen2:1.5b", "team-a", api.StateReady), placed("p-1a", "tower", "mistral:7b", "default", api.StateReady)}
	v := api.MeshView{Members: []api.Member{pi5, tower}}

	for ref, want := range map[string]string{
		"p-1a2b": "p-1a2b", "p-1a3": "p-1a3c", "llama3.2:3b": "p-1a3c", "p-9": "p-9f00",
		"p-1a": "p-1a", // a whole id is that placement, though it is the prefix of others too
	} {
		p, err := console.FindPlacement(v, ref)
		require.NoError(t, err, ref)
		assert.Equal(t, want, p.ID, ref)
	}

	var ae *api.Error
	_, err := console.FindPlacement(v, "qwen2:1.5b")
	require.True(t, errors.As(err, &ae), "a model served twice is no one placement")
	assert.Equal(t, api.CodeBadRequest, ae.Code)
	assert.Contains(t, ae.Message, "p-1a2b (qwen2:1.5b on pi5)")
	assert.Contains(t, ae.Message, "p-9f00 (qwen2:1.5b on tower)")
	_, err = console.FindPlacement(v, "p-1")
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, api.CodeBadRequest, ae.Code)
	_, err = console.FindPlacement(v, "nothing")
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, api.CodeNotFound, ae.Code)
}

func TestChatTarget(t *testing.T) {
	dead, pi5, tower := member("a-dead"), member("pi5"), member("tower")
	dead.Liveness = api.Dead
	dead.Placements = []api.Placement{placed("p-0", "a-dead", "qwen2:1.5b", "default", api.StateReady)}
	pi5.Placements = []api.Placement{placed("p-1", "pi5", "qwen2:1.5b", "default", api.StateLoading)}
	tower.Placements = []api.Placement{placed("p-2", "tower", "qwen2:1.5b", "default", api.StateReady),
		placed("p-3", "tower", "mistral:7b", "team-a", api.StateReady)}
	console1 := api.Member{Name: "laptop", Role: api.RoleConsole, Liveness: api.Alive}
	v := api.MeshView{Members: []api.Member{console1, dead, pi5, tower}}

	for model, want := range map[string]string{
		"qwen2:1.5b":        "tower", // the one ready placement that is alive: no forwarding hop
		"team-a/mistral:7b": "tower", // by the name the gateway resolves
		"mistral:7b":        "pi5",   // not that name in default: any alive agent, first by name
		"llama3.2:3b":       "pi5",   // placed nowhere: its gateway answers
	} {
		got, err := console.ChatTarget(v, model)
		require.NoError(t, err, model)
		assert.Equal(t, want, got.Name, model)
	}
	_, err := console.ChatTarget(api.MeshView{Members: []api.Member{console1, dead}}, "qwen2:1.5b")
	assert.ErrorIs(t, err, console.ErrNoAgents)
}

// Rank sizes a source on an agent that has its runtime, falls back to another when that one
// fails, and ranks every host against the one size.
func TestRank(t *testing.T) {
	a := startAgents(t, api.MeshView{Members: []api.Member{member("a-tower", api.RuntimeOllama), member("pi5", api.RuntimeHailoOllama)}})
	size := api.SizeEstimate{Bytes: 2 << 30, Method: api.SizeRegistry, Device: api.DeviceHailo}
	sizer := "pi5"
	a.estimate = func(host string) *api.Estimation {
		if host != sizer {
			return nil
		}
		return &api.Estimation{Estimate: size, Verdict: api.VerdictFits}
	}
	c := a.connect(t, console.Options{Token: "t"})
	req := api.PlacementRequest{Source: "hailo://qwen2:1.5b"}

	r, err := c.Rank(t.Context(), req, false)
	require.NoError(t, err)
	assert.Equal(t, "pi5", r.SizedBy)
	assert.Equal(t, []string{"POST /v1/estimate"}, a.asked("pi5"))
	assert.Empty(t, a.asked("a-tower"), "the host with hailo-ollama is asked first, though a-tower comes first by name")
	assert.Equal(t, size, r.Estimate)
	require.Len(t, r.Hosts, 2)
	best, ok := r.Best()
	require.True(t, ok)
	assert.Equal(t, "pi5", best.Host)
	assert.Equal(t, api.VerdictRefused, r.Hosts[1].Verdict, "a-tower has no Hailo")
	assert.NoError(t, r.Refusal())

	// The first sizer down, the next one sizes it.
	sizer = "a-tower"
	r, err = c.Rank(t.Context(), req, false)
	require.NoError(t, err)
	assert.Equal(t, "a-tower", r.SizedBy)
	assert.Len(t, a.asked("pi5"), 2)

	// Nobody can size it: the first error comes back.
	sizer = ""
	_, err = c.Rank(t.Context(), req, false)
	var ae *api.Error
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, api.CodeInternal, ae.Code)
	assert.Len(t, a.asked("pi5"), 3, "pi5 first, as before")

	// A source wrong in itself is wrong everywhere: nobody else is asked.
	a.estimate = func(string) *api.Estimation {
		return &api.Estimation{Verdict: api.VerdictRefused, Code: api.CodeInvalidSource, Reason: "no such scheme"}
	}
	calls := len(a.asked("a-tower"))
	_, err = c.Rank(t.Context(), req, false)
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, api.CodeInvalidSource, ae.Code)
	assert.Len(t, a.asked("a-tower"), calls)

	// A size nobody could learn says why.
	a.estimate = func(string) *api.Estimation {
		return &api.Estimation{Verdict: api.VerdictRefused, Code: api.CodeMemoryCheckFailed, Reason: "registry unreachable"}
	}
	r, err = c.Rank(t.Context(), req, false)
	require.NoError(t, err)
	assert.Equal(t, "registry unreachable", r.SizeError)
}

// Wait asks the placement's own host, and its look decides what a failed look does. A ready
// placement is returned once every other agent's own view shows it ready: a chat through any
// gateway then finds it (issue 42).
func TestWait(t *testing.T) {
	a := startAgents(t, api.MeshView{Members: []api.Member{member("gateway"), member("tower", api.RuntimeOllama)}})
	p := placed("p-7", "tower", "llama3.2:3b", "default", api.StatePulling)
	a.viewOf = func(host string, n int) api.MeshView {
		v := a.view
		if host == "gateway" && n >= 3 { // gossip reached it at the third look
			v.Members = append([]api.Member(nil), v.Members...)
			ready := p
			ready.State = api.StateReady
			v.Members[1].Placements = []api.Placement{ready}
		}
		return v
	}
	a.placement = func(host, id string, n int) (api.Placement, *api.Error) {
		switch n {
		case 1:
			return p, nil
		case 2:
			return api.Placement{}, &api.Error{Code: api.CodeTooBusy, Message: "busy"}
		}
		ready := p
		ready.State = api.StateReady
		return ready, nil
	}
	c := a.connect(t, console.Options{Token: "t"})

	var heard []string
	final, err := c.Wait(t.Context(), p, func(p api.Placement, err error) error {
		if err != nil {
			heard = append(heard, "failed")
			return nil // ask again
		}
		heard = append(heard, string(p.State))
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, api.StateReady, final.State)
	assert.Equal(t, []string{"pulling", "failed", "ready"}, heard)
	a.mu.Lock()
	assert.Equal(t, 3, a.meshAsks["gateway"], "returned when the other agent's view showed it ready, not before")
	assert.Zero(t, a.meshAsks["tower"], "the owner is not asked: it routes what it serves")
	a.mu.Unlock()
	assert.Empty(t, a.asked("gateway"), "the owner is asked (through the agent the console watches)")
	assert.Zero(t, a.dialled("tower"), "never dialled itself")
	assert.Equal(t, []string{"GET /v1/placements/p-7", "GET /v1/placements/p-7", "GET /v1/placements/p-7"}, a.asked("tower"))

	_, err = c.Wait(t.Context(), api.Placement{ID: "p-8", Host: "elsewhere"}, func(api.Placement, error) error { return nil })
	assert.Error(t, err, "a host not in the mesh has no API to ask")
}

// Delete finds a placement by any reference in the view, or, when the view has not seen it yet,
// in the agents' own lists, and deletes it on its owner.
func TestDelete(t *testing.T) {
	gateway, tower := member("gateway"), member("tower", api.RuntimeOllama)
	tower.Placements = []api.Placement{placed("p-5e", "tower", "mistral:7b", "default", api.StateReady)}
	a := startAgents(t, api.MeshView{Members: []api.Member{gateway, tower}})
	c := a.connect(t, console.Options{Token: "t"})

	p, err := c.Delete(t.Context(), "mistral:7b")
	require.NoError(t, err)
	assert.Equal(t, "p-5e", p.ID)
	assert.Equal(t, []string{"DELETE /v1/placements/p-5e"}, a.asked("tower"))

	// Placed a moment ago: not in the view the console read, in its owner's list.
	a.mu.Lock()
	a.listed["tower"] = []api.Placement{placed("p-77", "tower", "qwen2:1.5b", "default", api.StatePulling)}
	a.mu.Unlock()
	p, err = c.Delete(t.Context(), "p-7")
	require.NoError(t, err)
	assert.Equal(t, "p-77", p.ID)
	assert.Contains(t, a.asked("gateway"), "GET /v1/placements", "every alive agent is asked")
	assert.Equal(t, "DELETE /v1/placements/p-77", a.asked("tower")[len(a.asked("tower"))-1])
	assert.Zero(t, a.dialled("tower"), "every call goes through the agent the console watches (issue 42)")

	var ae *api.Error
	_, err = c.Delete(t.Context(), "nothing")
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, api.CodeNotFound, ae.Code)
}

// A console that holds the join string scopes the view to its token, as an agent's API would;
// a token the secret refuses sees nothing.
func TestScopedView(t *testing.T) {
	tower := member("tower", api.RuntimeOllama)
	tower.Placements = []api.Placement{placed("p-1", "tower", "mistral:7b", "default", api.StateReady),
		placed("p-2", "tower", "qwen2:1.5b", "team-a", api.StateReady)}
	a := startAgents(t, api.MeshView{Members: []api.Member{tower}})
	secret, err := api.NewSecret()
	require.NoError(t, err)
	join := api.Join{MeshID: "mesh-0123456789abcdef", Secret: secret}.String()
	teamA, err := api.NamespaceToken(api.AdminToken(secret), "team-a")
	require.NoError(t, err)

	models := func(v api.MeshView) []string {
		var out []string
		for _, p := range console.Placements(v) {
			out = append(out, p.QualifiedName())
		}
		return out
	}
	v, err := a.connect(t, console.Options{Join: join, Token: teamA}).ScopedView()
	require.NoError(t, err)
	assert.Equal(t, []string{"team-a/qwen2:1.5b"}, models(v))

	v, err = a.connect(t, console.Options{Join: join}).ScopedView()
	require.NoError(t, err)
	assert.Len(t, models(v), 2, "no token: the join string's admin token")

	v, err = a.connect(t, console.Options{Token: teamA}).ScopedView()
	require.NoError(t, err)
	assert.Len(t, models(v), 2, "without the secret the agent has scoped what it answered")

	other, err := api.NewSecret()
	require.NoError(t, err)
	_, err = a.connect(t, console.Options{Join: join, Token: api.AdminToken(other)}).ScopedView()
	var ae *api.Error
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, api.CodeUnauthorized, ae.Code)
	assert.True(t, strings.HasPrefix(ae.Message, "token refused"))
}

// Chat goes to the host that runs the model ready (no forwarding hop) and streams its pieces; an
// answer that breaks off says so in the user's terms, naming the host.
func TestChat(t *testing.T) {
	gateway, tower := member("gateway"), member("tower", api.RuntimeOllama)
	tower.Placements = []api.Placement{placed("p-1", "tower", "qwen2:1.5b", "default", api.StateReady)}
	a := startAgents(t, api.MeshView{Members: []api.Member{gateway, tower}})
	var breakOff atomic.Bool
	a.chat = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, piece := range []string{"Hello", " world"} {
			_, _ = w.Write([]byte(`data: {"choices":[{"delta":{"content":"` + piece + `"}}]}` + "\n\n"))
			w.(http.Flusher).Flush()
			if breakOff.Load() {
				panic(http.ErrAbortHandler) // the host died mid-answer
			}
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}
	c := a.connect(t, console.Options{Token: "t"})
	msgs := []apiclient.ChatMessage{{Role: "user", Content: "hi"}}

	var text strings.Builder
	host, err := c.Chat(t.Context(), "qwen2:1.5b", msgs, apiclient.ChatOptions{}, func(d apiclient.ChatDelta) error {
		text.WriteString(d.Content)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, "tower", host)
	assert.Equal(t, "Hello world", text.String())
	assert.Equal(t, []string{"POST /v1/chat/completions"}, a.asked("gateway"), "the agent's gateway takes it, and forwards it to the owner")
	assert.Zero(t, a.dialled("tower"), "the console never dials the owner itself (issue 42)")

	breakOff.Store(true)
	host, err = c.Chat(t.Context(), "qwen2:1.5b", msgs, apiclient.ChatOptions{}, func(apiclient.ChatDelta) error { return nil })
	require.Error(t, err)
	assert.Equal(t, "tower", host)
	assert.Contains(t, err.Error(), "the answer broke off: the connection to tower closed mid-answer")
}
