package tui

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/internal/tuitest"
)

// hostileMesh is what a buggy or compromised keyholder can put in gossip: memory figures that
// contradict each other or overflow when summed, rates that are not numbers, and names with
// terminal escape sequences.
func hostileMesh() api.MeshView {
	const esc = "\x1b]0;owned\x07\x1b[2J\x1b[31m"
	h := &api.Host{
		Name: "evil" + esc, OS: "linux" + esc, Arch: "arm64", Chip: "chip" + esc, CPUs: math.MaxInt32,
		Memory: api.Memory{Total: 1, Budget: math.MaxInt64, Committed: math.MaxInt64, Reserved: math.MaxInt64,
			Available: math.MaxInt64, CgroupLimit: math.MaxInt64},
		Accelerators: []api.Accelerator{{Kind: "hailo", Name: "npu" + esc, Memory: math.MaxInt64}},
		Engines:      []api.Engine{{Runtime: api.RuntimeOllama, Present: true, Version: "1" + esc, Detail: esc}},
		Placements:   math.MaxInt32, APIAddr: "127.0.0.1:1" + esc, Version: "9" + esc,
	}
	p := api.Placement{
		ID: "p-x" + esc, Host: "evil", Model: "model" + esc, Source: "hf://a/b/c.gguf" + esc, Runtime: api.RuntimeOllama,
		Namespace: "default", Context: math.MaxInt32, State: api.StatePulling, Reason: esc,
		Progress: math.NaN(), PulledBytes: math.MaxInt64, TotalBytes: 1, TokensPerS: math.Inf(1), TTFTMillis: math.NaN(),
		Memory: api.SizeEstimate{Bytes: math.MaxInt64, Weights: math.MaxInt64, KV: -1, Method: "x" + esc},
	}
	big := *h
	big.Name, big.Memory = "big", api.Memory{Total: math.MaxInt64, Budget: math.MaxInt64, Committed: math.MaxInt64, Reserved: math.MaxInt64}
	return api.MeshView{Mesh: "m", Self: "console", At: now, Members: []api.Member{
		{Name: "evil" + esc, Role: api.RoleAgent, Addr: "10.0.0.1:7946" + esc, Liveness: api.Alive, Reason: esc, Host: h, Placements: []api.Placement{p}, Updated: now},
		{Name: "big", Role: api.RoleAgent, Addr: "10.0.0.2:7946", Liveness: api.Alive, Host: &big, Placements: []api.Placement{p}, Updated: now},
		{Name: "console", Role: api.RoleConsole, Liveness: api.Alive, Updated: now},
	}}
}

// TestHostileNumbersCrashNoView renders every page of the console over a mesh whose members
// say absurd things (committed far above total, sums that overflow, rates that are not
// numbers): no view may panic.
func TestHostileNumbersCrashNoView(t *testing.T) {
	a := newApp(t, 120, 35)
	a.ctx.Mesh = hostileMesh()
	visitAll(t, a, func(string, string) {})
}

// TestRemoteEscapesNeverReachTheScreen watches a mesh through an agent's API (agent mode)
// whose members carry terminal escape sequences in every string: none reaches the screen.
func TestRemoteEscapesNeverReachTheScreen(t *testing.T) {
	v := hostileMesh()
	for i := range v.Members { // JSON carries no NaN or infinity
		for j := range v.Members[i].Placements {
			p := &v.Members[i].Placements[j]
			p.Progress, p.TokensPerS, p.TTFTMillis = 0.5, 1e300, 1e300
		}
	}
	ev := api.Event{Seq: 1, Type: api.EventMesh, Host: "evil\x1b[2J", Member: "evil\x1b]0;x\x07", Message: "joined\x1b[31m", Time: now}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/mesh":
			json.NewEncoder(w).Encode(v)
		case "/v1/events":
			w.Header().Set("Content-Type", "text/event-stream")
			b, _ := json.Marshal(ev)
			fmt.Fprintf(w, "id: 1\ndata: %s\n\n", b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	conn, err := console.Connect(context.Background(), console.Options{AgentURL: srv.URL, Token: "t", Poll: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })

	a := New(conn, Options{Renderer: tuitest.Renderer(), Now: func() time.Time { return now }})
	a.Update(tea.WindowSizeMsg{Width: 120, Height: 35})
	a.Update(meshChangedMsg{})
	var got []api.Event
	ectx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = apiclient.New(srv.URL, "t").Events(ectx, 0, nil, func(e api.Event) error {
		got = append(got, e)
		cancel()
		return nil
	})
	require.NotEmpty(t, got)
	for _, e := range got {
		a.Update(common.EventMsg{Event: e})
	}
	require.Len(t, a.ctx.Mesh.Members, 3)
	visitAll(t, a, func(what, screen string) {
		require.NotContains(t, screen, "\x1b", "%s: an escape sequence from the mesh reached the screen", what)
		require.NotContains(t, screen, "\x07", what)
		require.False(t, strings.ContainsAny(screen, "\r\b"), what)
	})
}

// visitAll shows every page, and the detail of every member, calling check on each screen.
func visitAll(t *testing.T, a *App, check func(what, screen string)) {
	t.Helper()
	for range 3 {
		a.Update(common.TickMsg(now)) // memory samples for the charts
	}
	a.Update(common.MeshMsg{View: a.ctx.Mesh})
	for _, p := range common.Tabs {
		drain(a, a.navigate(p, ""))
		check(p.Title(), a.View())
	}
	for _, mb := range a.ctx.Mesh.Members {
		drain(a, a.navigate(common.PageHostDetail, mb.Name))
		check("detail of "+mb.Name, a.View())
	}
	drain(a, a.navigate(common.PageHosts, ""))
	for range 3 {
		keys(a, "j")
		check("hosts after moving", a.View())
	}
}
