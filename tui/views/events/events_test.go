package events

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/internal/tuitest"
)

var now = tuitest.Now

func testCtx() *common.Context {
	ctx := tuitest.Context()
	ctx.AddEvent(api.Event{Seq: 11, Time: now.Add(-2 * time.Second), Type: api.EventRefused, Host: "tower", Code: api.CodeInsufficientMemory,
		Message: "hf://bartowski/Meta-Llama-3.1-70B-Instruct-GGUF/Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf needs 40.1 GiB, 9.3 GiB free of a 16.1 GiB budget"})
	return ctx
}

func press(m *Model, keys ...string) {
	for _, k := range keys {
		var msg tea.KeyMsg
		switch k {
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		case "esc":
			msg = tea.KeyMsg{Type: tea.KeyEsc}
		case "up":
			msg = tea.KeyMsg{Type: tea.KeyUp}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		m.Update(msg)
	}
}

func lastLine(view string) string {
	lines := strings.Split(strings.TrimRight(view, " \n"), "\n")
	return lines[len(lines)-1]
}

func TestFollowsNewEventsUntilScrolledUp(t *testing.T) {
	ctx := testCtx()
	m := New(ctx)
	m.SetSize(80, 8)
	assert.Contains(t, m.View(), "following new events")

	add := func(seq uint64, text string) {
		ev := api.Event{Seq: seq, Time: now, Type: api.EventPlacement, Host: "pi5", Message: text}
		ctx.AddEvent(ev)
		m.Update(common.EventMsg{Event: ev})
	}
	add(20, "first new event")
	assert.Contains(t, lastLine(m.View()), "first new event", "the newest is at the bottom")

	press(m, "up", "up")
	assert.Contains(t, m.View(), "paused (G follows)")
	add(21, "second new event")
	assert.NotContains(t, m.View(), "second new event", "scrolled up: the view stays put")

	press(m, "G")
	assert.Contains(t, lastLine(m.View()), "second new event")
	assert.Contains(t, m.View(), "following new events")

	m.Update(tea.MouseMsg{Button: tea.MouseButtonWheelUp})
	assert.Contains(t, m.View(), "paused")
	m.Update(tea.MouseMsg{Button: tea.MouseButtonWheelDown})
	assert.Contains(t, m.View(), "following")
}

func TestTypeFilterCycles(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	assert.Len(t, m.Rows(), 11)
	press(m, "t")
	assert.Equal(t, api.EventPlacement, m.Type())
	for _, e := range m.Rows() {
		assert.Equal(t, api.EventPlacement, e.Type)
	}
	press(m, "t")
	require.Len(t, m.Rows(), 2)
	assert.Contains(t, m.View(), "2 of 11 events · refused")
	press(m, "t", "t", "t", "t", "t")
	assert.Equal(t, "", m.Type(), "the cycle comes back to all types")
	press(m, "t", "esc")
	assert.Equal(t, "", m.Type(), "esc clears the type filter")
}

// A mesh event is listed under the member it is about, not the one that saw it.
func TestMeshEventNamesItsMember(t *testing.T) {
	m := New(testCtx())
	m.SetSize(120, 35)
	var line string
	for _, l := range strings.Split(m.View(), "\n") {
		if strings.Contains(l, "suspect") {
			line = l
		}
	}
	require.NotEmpty(t, line)
	assert.Regexp(t, `mesh\s+pi4\s+suspect: no ack to 3 probes · seen by tower`, line)
}

func TestTextFilterNarrows(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	press(m, "/")
	assert.True(t, m.Capturing())
	press(m, "t", "o", "w", "e", "r", "enter")
	assert.False(t, m.Capturing())
	require.Len(t, m.Rows(), 4, "tower's events and the one it saw of pi4")
	for _, e := range m.Rows() {
		assert.Equal(t, "tower", e.Host)
	}
	press(m, "/", "e", "s", "c")
	press(m, "esc")
	assert.Len(t, m.Rows(), 11)

	press(m, "/", "M", "E", "M", "O", "R", "Y", "enter")
	require.Len(t, m.Rows(), 1, "codes are searchable, case aside")
	press(m, "/", "z", "z", "z", "enter")
	assert.Contains(t, m.View(), "no event matches")
}

func TestClock(t *testing.T) {
	assert.Equal(t, "15:08:26", Clock(now, now.Add(-time.Minute)))
	assert.Equal(t, "Mar 13", Clock(now, now.Add(-20*time.Hour)))
	zone := time.FixedZone("CET", 3600)
	assert.Equal(t, "16:09:26", Clock(now.In(zone), now), "shown in the console's zone")
}

func TestEmpty(t *testing.T) {
	ctx := testCtx()
	ctx.Events = nil
	m := New(ctx)
	m.SetSize(80, 24)
	assert.Contains(t, m.View(), "no events yet")
}

func TestView(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			m := New(testCtx())
			m.SetSize(size[0], size[1])
			golden.RequireEqual(t, []byte(m.View()))
		})
	}
}

func TestViewScrolled(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 6)
	press(m, "t", "up", "up")
	golden.RequireEqual(t, []byte(m.View()))
}

func TestLongHostNamesAreNotCut(t *testing.T) {
	ctx := testCtx()
	ctx.AddEvent(api.Event{Seq: 99, Time: ctx.Now(), Type: api.EventMesh, Host: "pi5", Member: "rack2-gpu-node-0042", Message: "dead"})
	m := New(ctx)
	m.SetSize(80, 24)
	assert.Contains(t, m.View(), "rack2-gpu-node-0042 dead")
}

// An event about a placement names its model: "placement ready at …" on a host with two
// models says which one; a message that names it already is left alone.
func TestPlacementEventNamesItsModel(t *testing.T) {
	ctx := testCtx()
	ctx.Events = nil
	ctx.AddEvent(api.Event{Seq: 1, Time: now, Type: api.EventPlacement, Host: "gpu-server", Message: "placement gpu-server ready at http://127.0.0.1:38003",
		Placement: &api.Placement{ID: "p-1", Model: "llama3.2:1b", State: api.StateReady}})
	ctx.AddEvent(api.Event{Seq: 2, Time: now, Type: api.EventPlacement, Host: "gpu-server", Message: "qwen2.5:0.5b pulling",
		Placement: &api.Placement{ID: "p-2", Model: "qwen2.5:0.5b", State: api.StatePulling}})
	m := New(ctx)
	m.SetSize(120, 35)
	view := m.View()
	assert.Contains(t, view, "llama3.2:1b: placement gpu-server ready at http://127.0.0.1:38003")
	assert.Contains(t, view, " qwen2.5:0.5b pulling")
	assert.NotContains(t, view, "qwen2.5:0.5b: qwen2.5:0.5b")
	lines := strings.Split(view, "\n")
	assert.Equal(t, "p-2 · qwen2.5:0.5b on gpu-server · pulling", strings.TrimSpace(lines[len(lines)-1]),
		"the newest event in view has its detail line")
	m.SetSize(120, 4) // one event in view
	press(m, "up")
	lines = strings.Split(m.View(), "\n")
	assert.Equal(t, "p-1 · llama3.2:1b on gpu-server · ready", strings.TrimSpace(lines[len(lines)-1]),
		"scrolled up, the detail follows the last event shown")
}

// An intent's event is about the model the mesh keeps, not a placement on the agent that said
// it: its detail names the intent and its source, with no "on <agent>" and no empty fields.
// A placement's reason comes before its source in the detail line, which is cut at its end.
func TestPlacementEventDetail(t *testing.T) {
	e := api.Event{Type: api.EventPlacement, Host: "mac-mini", Message: "failed", Placement: &api.Placement{ID: "p-1", Model: "sim-tiny", Host: "mac-mini",
		State: api.StateFailed, Source: "file:///tmp/llmkube-localmesh-1/mac-mini/gguf/sim-tiny.gguf", Reason: "llama-server exited: out of memory"}}
	assert.Equal(t, "p-1 · sim-tiny on mac-mini · failed · llama-server exited: out of memory · file:///tmp/llmkube-localmesh-1/mac-mini/gguf/sim-tiny.gguf", Detail(e))
}

func TestIntentEventDetail(t *testing.T) {
	e := api.Event{Type: api.EventIntent, Host: "gpu-server", Message: "default/llama3.2:3b wants 1, has 0",
		Placement: &api.Placement{Namespace: "default", Model: "llama3.2:3b", Source: "hailo://llama3.2:3b", Runtime: api.RuntimeHailoOllama}}
	assert.Equal(t, "intent default/llama3.2:3b · hailo://llama3.2:3b · said by gpu-server", Detail(e))
}

// The selected event's detail wraps over up to three lines at 80 columns rather than being cut
// at one: a failed placement's reason and source are at its end. The list gives up the rows.
func TestDetailWraps(t *testing.T) {
	ctx := testCtx()
	ctx.AddEvent(api.Event{Seq: 12, Time: now, Type: api.EventPlacement, Host: "mac-mini", Message: "failed",
		Placement: &api.Placement{ID: "p-7", Model: "sim-70b", Host: "mac-mini", State: api.StateFailed,
			Reason: "split member gpu-server refused its share: needs 31.2 GiB, 9.3 GiB free of a 16.1 GiB budget",
			Source: "file:///tmp/llmkube-localmesh-1/mac-mini/gguf/sim-70b.gguf"}})
	m := New(ctx)
	m.SetSize(80, 24)
	view := m.View()
	assert.Contains(t, view, "sim-70b.gguf", "the detail's end is shown")
	assert.Equal(t, 24, strings.Count(view, "\n")+1, "the view keeps its height")
	golden.RequireEqual(t, []byte(view))
}
