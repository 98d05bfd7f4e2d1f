package tui

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/mesh"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/internal/tuitest"
)

// meshForFlows is a real mesh of two agents (a Pi 5 with a Hailo-10H, a GPU server with
// Ollama) on loopback, and a console joined to it as a member.
func meshForFlows(t *testing.T) (*localmesh.Mesh, *console.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var hosts []localmesh.HostSpec
	for _, h := range localmesh.DemoHosts() {
		if h.Name != "mac-mini" {
			hosts = append(hosts, h)
		}
	}
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), Hosts: hosts, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	conn, err := console.Connect(ctx, console.Options{Join: m.JoinString(), Profile: mesh.ProfileLocal, NodeName: "console-" + strings.ToLower(t.Name())})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	require.Eventually(t, func() bool { return len(console.Agents(conn.View())) == 2 }, 20*time.Second, 10*time.Millisecond)
	return m, conn
}

func waitScreen(t *testing.T, tm *teatest.TestModel, what string, cond func(string) bool) {
	t.Helper()
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return cond(string(b)) },
		teatest.WithDuration(30*time.Second), teatest.WithCheckInterval(20*time.Millisecond))
	_ = what
}

func contains(s ...string) func(string) bool {
	return func(out string) bool {
		for _, x := range s {
			if !strings.Contains(out, x) {
				return false
			}
		}
		return true
	}
}

func enter(tm *teatest.TestModel) { tm.Send(tea.KeyMsg{Type: tea.KeyEnter}) }

// The whole life of a model from the console: place it with the fit preview, follow it to
// ready, chat with it, delete it — against real agents.
func TestFlowPlaceChatDelete(t *testing.T) {
	m, conn := meshForFlows(t)
	app := New(conn, Options{Renderer: tuitest.Renderer()})
	tm := teatest.NewTestModel(t, app, teatest.WithInitialTermSize(120, 35))
	t.Cleanup(func() { tm.Quit() })

	waitScreen(t, tm, "both hosts", contains("pi5-hailo", "gpu-server"))

	// :place pre-fills the form; the ranking says where it fits and why.
	tm.Type(":place hailo://qwen2:1.5b")
	enter(tm)
	waitScreen(t, tm, "the ranking", contains("fits", "needs a Hailo-10H"))
	enter(tm) // to the ranked hosts, best first
	enter(tm) // place on the best: the Pi
	waitScreen(t, tm, "ready", contains("ready: qwen2:1.5b on pi5-hailo"))
	require.Eventually(t, func() bool {
		ps, err := m.Client("pi5-hailo").Placements(context.Background())
		return err == nil && len(ps) == 1 && ps[0].State == api.StateReady
	}, 20*time.Second, 20*time.Millisecond)

	// enter on a ready placement opens the chat with it, before the next key: what is typed
	// right after it is the message (it once went to the global keys, "e" opening Events).
	enter(tm)
	tm.Type("hello there")
	waitScreen(t, tm, "the chat", contains("Say something to qwen2:1.5b", "hello there"))
	enter(tm)
	waitScreen(t, tm, "a complete answer with its figures", contains("qwen2:1.5b · pi5-hailo · TTFT", "answered in"))

	// Models: the placement is there; delete asks first, then deletes.
	tm.Send(tea.KeyMsg{Type: tea.KeyEsc}) // leave the chat input: global keys again
	tm.Type("2")
	waitScreen(t, tm, "the models view", contains("qwen2:1.5b", "pi5-hailo"))
	tm.Type("x")
	waitScreen(t, tm, "the confirmation", contains("(y/n)"))
	tm.Type("y")
	require.Eventually(t, func() bool {
		ps, err := m.Client("pi5-hailo").Placements(context.Background())
		return err == nil && len(ps) == 0
	}, 20*time.Second, 20*time.Millisecond)

	tm.Type("q")
	tm.WaitFinished(t, teatest.WithFinalTimeout(10*time.Second))
	require.False(t, bytes.Contains([]byte(app.View()), []byte("panic")))
}

// A namespace token sees in the console what it sees with `mesh …`: its own namespace only.
func TestNamespaceTokenSeesItsNamespace(t *testing.T) {
	m, _ := meshForFlows(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := m.Client("gpu-server").Place(ctx, api.PlacementRequest{Source: "ollama://qwen2.5:0.5b"})
	require.NoError(t, err)
	j, err := api.ParseJoin(m.JoinString())
	require.NoError(t, err)
	teamA, err := api.NamespaceToken(api.AdminToken(j.Secret), "team-a")
	require.NoError(t, err)
	conn, err := console.Connect(ctx, console.Options{Join: m.JoinString(), Token: teamA, Profile: mesh.ProfileLocal, NodeName: "console-team-a"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	// The unscoped picture has the default namespace's placement once gossip carried it.
	require.Eventually(t, func() bool {
		_, err := console.FindPlacement(conn.View(), p.ID)
		return err == nil
	}, 20*time.Second, 10*time.Millisecond)

	app := New(conn, Options{Renderer: tuitest.Renderer()})
	app.Update(tea.WindowSizeMsg{Width: 120, Height: 35})
	app.Update(meshChangedMsg{})
	assert.Empty(t, console.Placements(app.Context().Mesh), "another namespace's placement is not shown")
	assert.Len(t, console.Agents(app.Context().Mesh), 2, "the hosts are")
}
