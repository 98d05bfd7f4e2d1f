package models

import (
	"fmt"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/internal/tuitest"
)

var now = tuitest.Now

func testCtx() *common.Context {
	return tuitest.Context()
}

func press(m *Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		var msg tea.KeyMsg
		switch k {
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		case "esc":
			msg = tea.KeyMsg{Type: tea.KeyEsc}
		case "down":
			msg = tea.KeyMsg{Type: tea.KeyDown}
		case "up":
			msg = tea.KeyMsg{Type: tea.KeyUp}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		_, cmd = m.Update(msg)
	}
	return cmd
}

func TestRowsSortedByHostThenModel(t *testing.T) {
	m := New(testCtx())
	m.SetSize(120, 35)
	var got []string
	for _, p := range m.Rows() {
		got = append(got, p.Host+"/"+p.Model)
	}
	assert.Equal(t, []string{
		"mac-mini/llama-3.1-8b-instruct", "mac-mini/qwen2.5-coder-7b",
		"pi4/tinyllama-1.1b", "pi5/qwen2:1.5b",
		"tower/llama3.2:3b", "tower/mistral:7b",
	}, got)
}

func TestFilterNarrowsRows(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	press(m, "/")
	assert.True(t, m.Capturing(), "the filter takes letters")
	press(m, "t", "o", "w", "e", "r")
	require.Len(t, m.Rows(), 2)
	assert.Equal(t, "tower", m.Rows()[0].Host)
	press(m, "enter")
	assert.False(t, m.Capturing())
	assert.Len(t, m.Rows(), 2, "enter keeps the filter")
	press(m, "/", "esc")
	assert.Len(t, m.Rows(), 6, "esc clears it")

	press(m, "/", "p", "u", "l", "l", "enter")
	require.Len(t, m.Rows(), 1, "the state is searchable")
	assert.Equal(t, "llama-3.1-8b-instruct", m.Rows()[0].Model)
}

func TestDeleteAsksFirst(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	press(m, "down", "down", "down") // pi5/qwen2:1.5b
	sel, _ := m.Selected()
	require.Equal(t, "qwen2:1.5b", sel.Model)

	cmd := press(m, "x")
	assert.Nil(t, cmd, "x alone does nothing but ask")
	assert.True(t, m.Capturing())
	assert.Contains(t, m.View(), "delete qwen2:1.5b on pi5? (y/n)")

	cmd = press(m, "n")
	assert.False(t, m.Capturing())
	assert.NotContains(t, m.View(), "(y/n)")
	require.NotNil(t, cmd)
	assert.Equal(t, common.StatusMsg{Text: "kept qwen2:1.5b on pi5"}, cmd(), "n keeps it and says so")
	assert.Empty(t, m.deleting)

	press(m, "x")
	cmd = press(m, "q")
	assert.Equal(t, common.StatusMsg{Text: "kept qwen2:1.5b on pi5"}, cmd(), "any key but y keeps it")

	press(m, "x")
	cmd = press(m, "y")
	require.NotNil(t, cmd)
	assert.True(t, m.deleting["p-7f3a9c"])
	assert.Contains(t, m.View(), "deleting…")
	msg := cmd()
	require.IsType(t, deletedMsg{}, msg)
	assert.ErrorIs(t, msg.(deletedMsg).err, common.ErrNotConnected, "no connection: an error, not a crash")

	_, cmd = m.Update(msg)
	assert.Equal(t, common.StatusMsg{Text: "delete qwen2:1.5b on pi5 failed: not connected to a mesh", Err: true}, cmd())
	assert.False(t, m.deleting["p-7f3a9c"], "a failed delete shows the row as it is again")
}

func TestDeletedPlacementLeavesDeleting(t *testing.T) {
	ctx := testCtx()
	m := New(ctx)
	m.SetSize(80, 24)
	m.deleting["p-7f3a9c"] = true
	_, cmd := m.Update(deletedMsg{p: api.Placement{ID: "p-7f3a9c", Model: "qwen2:1.5b", Host: "pi5"}})
	assert.Equal(t, common.StatusMsg{Text: "deleted qwen2:1.5b on pi5"}, cmd())
	assert.True(t, m.deleting["p-7f3a9c"], "still deleting until the mesh says it is gone")

	for i := range ctx.Mesh.Members {
		if ctx.Mesh.Members[i].Name == "pi5" {
			ctx.Mesh.Members[i].Placements = nil
		}
	}
	m.Update(common.MeshMsg{View: ctx.Mesh})
	assert.Empty(t, m.deleting)
	assert.Len(t, m.Rows(), 5)
}

func TestEnterChatsWithReadyModelsOnly(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	cmd := press(m, "enter") // mac-mini/llama-3.1-8b-instruct, pulling
	assert.Equal(t, common.StatusMsg{Text: "llama-3.1-8b-instruct on mac-mini is pulling: chat opens once it is ready"}, cmd())
	press(m, "down", "enter")
	assert.Equal(t, common.Navigation{Page: common.PageChat, Arg: "qwen2.5-coder-7b"}, navigation(m))
}

// navigation is the page switch the view asked for, once (the zero value: none).
func navigation(m *Model) common.Navigation {
	nav, _ := m.ctx.TakeNavigation()
	return nav
}

func TestCursorAndWheel(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 6) // two table rows
	press(m, "G")
	sel, _ := m.Selected()
	assert.Equal(t, "mistral:7b", sel.Model)
	assert.Contains(t, m.View(), "mistral:7b")
	assert.NotContains(t, m.View(), "tinyllama", "scrolled past")
	m.Update(tea.MouseMsg{Button: tea.MouseButtonWheelUp})
	m.Update(tea.MouseMsg{Button: tea.MouseButtonWheelUp})
	m.Update(tea.MouseMsg{Button: tea.MouseButtonWheelUp})
	sel, _ = m.Selected()
	assert.Equal(t, "tinyllama-1.1b", sel.Model)
	press(m, "g", "up")
	sel, _ = m.Selected()
	assert.Equal(t, "llama-3.1-8b-instruct", sel.Model, "the cursor stops at the top")
}

func TestStateCell(t *testing.T) {
	ctx := testCtx()
	cases := []struct {
		p     api.Placement
		width int
		want  string
	}{
		{api.Placement{State: api.StateReady}, 10, "ready"},
		{api.Placement{State: api.StatePulling, Progress: 0.42}, 16, "pulling █░░  42%"},
		{api.Placement{State: api.StatePulling, Progress: 0.42}, 12, "pulling 42%"},
		{api.Placement{State: api.StateFailed, Code: api.CodePullFailed}, 24, "failed (PullFailed)"},
		{api.Placement{State: api.StateRestarting, Restarts: 2}, 16, "restarting ×2"},
		// A split's main sending its members their weights.
		{api.Placement{State: api.StateLoading, Progress: 0.42, TotalBytes: 1, Split: &api.SplitPlan{}}, 16, "loading █░░  42%"},
		{api.Placement{State: api.StateLoading, Progress: 0.42, TotalBytes: 1, Split: &api.SplitPlan{}}, 12, "loading 42%"},
		{api.Placement{State: api.StateLoading, Progress: 0.42}, 12, "loading"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, StateCell(ctx, c.p, false, c.width), c.want)
	}
	assert.Equal(t, "deleting…", StateCell(ctx, api.Placement{State: api.StateReady}, true, 16))
}

func TestNoPlacements(t *testing.T) {
	ctx := testCtx()
	ctx.Mesh = api.MeshView{}
	m := New(ctx)
	m.SetSize(80, 24)
	assert.Contains(t, m.View(), "No models placed yet.")
	assert.Contains(t, m.View(), "not connected")
	assert.Nil(t, press(m, "x", "enter"), "nothing to act on")
}

func TestView(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			m := New(testCtx())
			m.SetSize(size[0], size[1])
			press(m, "down")
			golden.RequireEqual(t, []byte(m.View()))
		})
	}
}

func TestViewConfirm(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	press(m, "down", "down", "down", "x")
	golden.RequireEqual(t, []byte(m.View()))
}

// A placement that will not become ready by itself says so, and what to do, instead of
// promising a chat that never opens.
func TestNotReadySaysWhatToDo(t *testing.T) {
	p := api.Placement{Model: "qwen2:1.5b", Host: "pi5", State: api.StateEvicted, Reason: "evicted for llama3 (priority high)"}
	text, stuck := NotReady(p)
	assert.True(t, stuck)
	assert.Equal(t, "qwen2:1.5b on pi5 was evicted (evicted for llama3 (priority high)): place it again (r), or x removes it from the list", text)
	assert.NotContains(t, text, "once it is ready")

	for _, st := range []api.PlacementState{api.StateFailed, api.StateUnavailable, api.StateStopping} {
		p.State = st
		text, stuck = NotReady(p)
		assert.True(t, stuck, st)
		assert.NotContains(t, text, "once it is ready", st)
	}
	p.State = api.StateLoading
	text, stuck = NotReady(p)
	assert.False(t, stuck)
	assert.Contains(t, text, "chat opens once it is ready")
}

// At 80 columns host names stay whole: the least telling columns go first, and STATE keeps
// no room for states no row is in.
func TestNarrowKeepsHostNames(t *testing.T) {
	ctx := testCtx()
	for i := range ctx.Mesh.Members {
		for j := range ctx.Mesh.Members[i].Placements {
			ctx.Mesh.Members[i].Placements[j].Host = "rack2-" + ctx.Mesh.Members[i].Placements[j].Host + "-gpu"
		}
	}
	m := New(ctx)
	m.SetSize(80, 24)
	view := m.View()
	assert.Contains(t, view, "rack2-mac-mini-gpu")
	assert.Contains(t, view, "rack2-tower-gpu")
	assert.NotContains(t, view, "NAMESPACE", "the namespace goes before names are cut")
}

// A placement's log is one key away (its host's detail tails it), and so is placing its
// source again: an evicted or failed model is not a dead end.
func TestLogAndPlaceAgain(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	p, ok := m.Selected()
	require.True(t, ok)
	press(m, "l")
	assert.Equal(t, common.Navigation{Page: common.PageHostDetail, Arg: p.Host}, navigation(m))
	press(m, "r")
	assert.Equal(t, common.Navigation{Page: common.PagePlace, Arg: p.Source}, navigation(m))
}

// s sorts: the largest first, then what needs attention (not ready) first, then back to host.
func TestSortCycles(t *testing.T) {
	m := New(testCtx())
	m.SetSize(120, 35)
	assert.Equal(t, common.StatusMsg{Text: "sorted by memory"}, press(m, "s")())
	rows := m.Rows()
	for i := 1; i < len(rows); i++ {
		assert.GreaterOrEqual(t, rows[i-1].Memory.Bytes, rows[i].Memory.Bytes)
	}
	press(m, "s")
	rows = m.Rows()
	assert.NotEqual(t, api.StateReady, rows[0].State, "what needs attention first")
	assert.Equal(t, api.StateReady, rows[len(rows)-1].State)
	assert.Equal(t, common.StatusMsg{Text: "sorted by host"}, press(m, "s")())
	assert.Equal(t, console.Placements(m.ctx.Mesh), m.Rows())
}

// The intents an agent keeps are shown over the table, those not met first, as wants vs has;
// the table moves down by as many lines. A met intent of one replica is the table's row alone.
func TestIntentsShownOverTheTable(t *testing.T) {
	m := New(testCtx())
	m.SetSize(120, 35)
	before := m.firstRow()
	met := api.IntentStatus{Intent: api.Intent{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: "mistral:7b", Replicas: 2}}, Has: 2}
	single := api.IntentStatus{Intent: api.Intent{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: "phi3:mini", Replicas: 1}}, Has: 1}
	short := api.IntentStatus{Intent: api.Intent{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: "qwen2:1.5b", Replicas: 2}}, Has: 1,
		Note: "pi4 dead 12s ago; re-placing on pi5"}
	m.Update(intentsMsg{ins: []api.IntentStatus{met, single, short}})
	v := m.View()
	assert.Contains(t, v, "kept: qwen2:1.5b wants 2, has 1 (pi4 dead 12s ago; re-placing on pi5)")
	assert.Contains(t, v, "kept: mistral:7b wants 2, has 2")
	assert.NotContains(t, v, "phi3:mini wants")
	assert.Less(t, strings.Index(v, "qwen2:1.5b wants"), strings.Index(v, "mistral:7b wants"), "the unmet first")
	assert.Equal(t, before+2, m.firstRow())

	m.Update(intentsMsg{err: &api.Error{Code: api.CodeUnreachable, Message: "down"}})
	assert.Contains(t, m.View(), "kept: qwen2:1.5b", "kept on screen while no agent answers")
	m.Update(intentsMsg{err: &api.Error{Code: api.CodeNotFound, Message: "no route"}})
	assert.NotContains(t, m.View(), "kept:", "an agent without intents")
}

// swappedCtx is the sample mesh after a Hailo swap on pi5: qwen2.5-coder replaced qwen2:1.5b,
// whose row stays, evicted.
func swappedCtx() *common.Context {
	ctx := testCtx()
	for i := range ctx.Mesh.Members {
		mb := &ctx.Mesh.Members[i]
		if mb.Name != "pi5" {
			continue
		}
		mb.Host.Accelerators[0].Loaded = "qwen2.5-coder:1.5b"
		old := &mb.Placements[0]
		old.State, old.ReplacedBy = api.StateEvicted, "p-c0de15"
		old.Context, old.TTL, old.Protected = 4096, "10m0s", true
		old.Reason = "replaced by qwen2.5-coder:1.5b (p-c0de15, priority normal) on the Hailo-10H, which runs one model at a time"
		mb.Placements = append(mb.Placements, api.Placement{
			ID: "p-c0de15", Host: "pi5", Model: "qwen2.5-coder:1.5b", Source: "hailo://qwen2.5-coder:1.5b",
			Runtime: api.RuntimeHailoOllama, Namespace: "default", Context: 2048, Priority: api.PriorityNormal,
			State: api.StateReady, Memory: api.SizeEstimate{Bytes: 1900 << 20, Device: api.DeviceHailo},
		})
	}
	return ctx
}

// selectModel moves the cursor to the row of model.
func selectModel(t *testing.T, m *Model, model string) {
	t.Helper()
	for range m.Rows() {
		if p, _ := m.Selected(); p.Model == model {
			return
		}
		press(m, "down")
	}
	t.Fatalf("no row for %s", model)
}

// An evicted model is placed again from its row: with the request it was placed with, on the
// host it was evicted from, and, when that swaps out the model the Hailo-10H runs now, only
// after a yes, as Place asks before a swap. Its row says what replaced it.
func TestPlaceAgainAnEvictedModel(t *testing.T) {
	m := New(swappedCtx())
	m.SetSize(80, 24)
	selectModel(t, m, "qwen2:1.5b")
	assert.Contains(t, m.View(), "replaced on pi5 by qwen2.5-coder:1.5b · r places it again")
	m.Update(intentsMsg{ins: []api.IntentStatus{{Intent: api.Intent{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: "qwen2:1.5b", Replicas: 1}},
		Note: "no host can take it: pi5 swap: replaces qwen2.5-coder:1.5b on the Hailo-10H; it answers until the pull ends"}}})
	assert.Contains(t, m.View(), "kept: qwen2:1.5b wants 1, has 0 (replaced on pi5 by qwen2.5-coder:1.5b)",
		"the intent says the swap and the key, not 'no host can take it'")
	assert.Equal(t, "r", m.ShortHelp()[0].Help().Key, "the footer leads with place again, kept at 80 columns")

	assert.Nil(t, press(m, "r"), "a swap asks first")
	assert.Equal(t, common.Navigation{}, navigation(m), "placed from here, not sent to Place")
	assert.True(t, m.Capturing())
	assert.Contains(t, m.View(), "place again (y/n)? qwen2:1.5b on pi5, replacing qwen2.5-coder:1.5b")
	assert.Equal(t, common.StatusMsg{Text: "not placed again: qwen2.5-coder:1.5b stays on pi5"}, press(m, "n")())
	assert.False(t, m.Capturing())

	press(m, "r")
	cmd := press(m, "y")
	require.NotNil(t, cmd)
	msg := cmd()
	require.IsType(t, placedAgainMsg{}, msg)
	assert.ErrorIs(t, msg.(placedAgainMsg).err, common.ErrNotConnected)
	_, cmd = m.Update(msg)
	assert.Equal(t, common.StatusMsg{Text: "placing qwen2:1.5b again on pi5 failed: not connected to a mesh", Err: true}, cmd())

	p, _ := m.Selected()
	assert.Equal(t, api.PlacementRequest{
		Source: "hailo://qwen2:1.5b", Runtime: api.RuntimeHailoOllama, Namespace: "default", Context: 4096,
		Priority: api.PriorityNormal, Name: "qwen2:1.5b", Protected: true, TTL: "10m0s",
	}, AgainRequest(p), "the same request as before")

	// With nothing on the device (the replacer deleted), placing again asks nothing.
	for i := range m.ctx.Mesh.Members {
		if m.ctx.Mesh.Members[i].Name == "pi5" {
			m.ctx.Mesh.Members[i].Host.Accelerators[0].Loaded = ""
		}
	}
	cmd = press(m, "r")
	require.NotNil(t, cmd)
	assert.False(t, m.Capturing())
	assert.IsType(t, placedAgainMsg{}, cmd())
}

func TestViewPlaceAgain(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			m := New(swappedCtx())
			m.SetSize(size[0], size[1])
			selectModel(t, m, "qwen2:1.5b")
			t.Run("row", func(t *testing.T) { golden.RequireEqual(t, []byte(m.View())) })
			press(m, "r")
			t.Run("asked", func(t *testing.T) { golden.RequireEqual(t, []byte(m.View())) })
		})
	}
}

// The selected placement's detail wraps under the table rather than losing its end, where why
// it failed is; the table gives it the rows, and the selected row stays in sight.
func TestDetailWrapsUnderTheTable(t *testing.T) {
	ctx := testCtx()
	const reason = "pull failed: the server answered HTTP 403 for hf://Qwen/Qwen2.5-Coder-7B-Instruct-GGUF/qwen2.5-coder-7b-instruct-q4_k_m.gguf (a gated repository: accept its licence, then give the agent a token)"
	m := New(ctx)
	rows := m.Rows()
	last := rows[len(rows)-1].ID // only the last row's detail is long: selecting it shrinks the table
	for i := range ctx.Mesh.Members {
		for j, p := range ctx.Mesh.Members[i].Placements {
			if p.ID == last {
				ctx.Mesh.Members[i].Placements[j].State = api.StateFailed
				ctx.Mesh.Members[i].Placements[j].Reason = reason
			}
		}
	}
	m.SetSize(80, 10)
	for range rows {
		press(m, "down")
	}
	view := m.View()
	assert.Equal(t, 10, strings.Count(view, "\n")+1)
	assert.Contains(t, view, "> ", "the selected row is in sight")
	assert.Contains(t, strings.Join(strings.Fields(view), " "), "pull failed: the server answered HTTP 403")
	assert.True(t, strings.HasSuffix(strings.TrimRight(view, " "), "…"), "longer than the foot's lines: its last one says so")
}
