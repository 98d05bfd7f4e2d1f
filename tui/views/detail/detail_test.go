package detail

import (
	"errors"
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

const mib = int64(1) << 20

// testCtx has five minutes of memory samples: the Mac mini's second model started reserving
// memory a minute ago; the others were steady.
func testCtx() *common.Context {
	ctx := tuitest.Context()
	for i := 299; i >= 0; i-- {
		var mm []common.MemberMemory
		for _, mb := range ctx.Mesh.Members {
			if mb.Host == nil {
				continue
			}
			mem := mb.Host.Memory
			if mb.Name == "mac-mini" && i > 60 {
				mem.Available += mem.Reserved
				mem.Reserved = 0
			}
			mm = append(mm, common.MemberMemory{Name: mb.Name, Committed: mem.Committed, Reserved: mem.Reserved,
				Available: mem.Available, Budget: mem.Budget, Total: mem.Total})
		}
		ctx.Memory.Record(now.Add(-time.Duration(i)*time.Second), mm)
	}
	return ctx
}

func TestOpenShowsTheHostFromTheTop(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	assert.Contains(t, m.View(), "no host chosen")
	assert.Nil(t, m.Open("pi5"))
	assert.Equal(t, "pi5", m.Host())
	assert.Contains(t, m.View(), "pi5 · alive · linux/arm64")
	m.Update(tea.KeyMsg{Type: tea.KeyPgDown})
	assert.NotZero(t, m.scroll.Offset)
	m.Open("mac-mini")
	assert.Zero(t, m.scroll.Offset)
	m.Open("")
	assert.Equal(t, "mac-mini", m.Host(), "opened without a host: the last one")
	m.Update(tea.MouseMsg{Button: tea.MouseButtonWheelDown})
	assert.Equal(t, common.WheelLines, m.scroll.Offset, "the wheel scrolls")
}

func TestHostThatLeft(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("pi9")
	assert.Contains(t, m.View(), "pi9 is not in the mesh (any more)")
}

func TestHostWithoutState(t *testing.T) {
	ctx := testCtx()
	ctx.Mesh.Members = append(ctx.Mesh.Members, api.Member{Name: "new", Role: api.RoleAgent, Liveness: api.Alive})
	m := New(ctx)
	m.SetSize(80, 24)
	m.Open("new")
	assert.Contains(t, m.View(), "No state from this host yet")
	m.Open("laptop")
	assert.Contains(t, m.View(), "A console")
}

func TestNoSamplesYet(t *testing.T) {
	ctx := testCtx()
	ctx.Memory = common.NewHistory(300)
	m := New(ctx)
	m.SetSize(80, 24)
	m.Open("tower")
	assert.Contains(t, m.View(), "sampling: the chart fills in")
	ctx.Memory = nil
	assert.Contains(t, m.View(), "sampling", "no history at all is no crash")
}

func TestYoungHistoryStartsTheAxisWithTheData(t *testing.T) {
	ctx := testCtx()
	ctx.Memory = common.NewHistory(300)
	for i := 30; i >= 0; i-- {
		ctx.Memory.Record(now.Add(-time.Duration(i)*time.Second), []common.MemberMemory{{Name: "tower", Committed: 2355 * mib, Total: 24 << 30, Budget: 16466 * mib}})
	}
	m := New(ctx)
	m.SetSize(80, 24)
	m.Open("tower")
	view := m.View()
	assert.Contains(t, view, "MEMORY · last 30s")
	i := strings.Index(view, "30s ago")
	require.Positive(t, i)
	line := view[strings.LastIndex(view[:i], "\n")+1 : i]
	assert.Equal(t, 80-31, len(line), "the label sits over the first sample's column")
}

func TestSpan(t *testing.T) {
	assert.Equal(t, "42s", span(42*time.Second))
	assert.Equal(t, "5m", span(299*time.Second))
	assert.Equal(t, "1m", span(61*time.Second))
	assert.Equal(t, "1h05m", span(65*time.Minute))
}

func TestView(t *testing.T) {
	for _, c := range []struct {
		host string
		w, h int
	}{{"mac-mini", 80, 24}, {"mac-mini", 120, 35}, {"pi5", 120, 35}, {"pi4", 80, 24}} {
		t.Run(fmt.Sprintf("%s-%dx%d", c.host, c.w, c.h), func(t *testing.T) {
			m := New(testCtx())
			m.SetSize(c.w, c.h)
			m.Open(c.host)
			golden.RequireEqual(t, []byte(m.View()))
		})
	}
}

func TestViewScrolledToTheEnd(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("pi5")
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("G")})
	golden.RequireEqual(t, []byte(m.View()))
}

// Log tails arrive as a message for the host shown; an answer for a host no longer shown is
// dropped.
func TestLogTails(t *testing.T) {
	m := New(testCtx())
	m.SetSize(120, 200)
	m.Open("pi5")
	var id string
	for _, mb := range m.ctx.Mesh.Members {
		if mb.Name == "pi5" {
			id = mb.Placements[0].ID
		}
	}
	m.logSeq = 3
	m.Update(logsMsg{seq: 2, tails: map[string]string{id: "stale line\n"}})
	assert.NotContains(t, m.View(), "stale line")
	m.Update(logsMsg{seq: 3, tails: map[string]string{id: "main: model loaded\nsrv  update_slots: all slots are idle\n"}})
	view := m.View()
	assert.Contains(t, view, "main: model loaded")
	assert.Contains(t, view, "all slots are idle")
	m.Update(logsMsg{seq: 3, err: errors.New("agent pi5 unreachable")})
	assert.Contains(t, m.View(), "could not read the logs: agent pi5 unreachable")
}

// Anonymous access on a host is shown in its detail, and only where it is on.
func TestAnonymousAccessShown(t *testing.T) {
	ctx := testCtx()
	for i := range ctx.Mesh.Members {
		if ctx.Mesh.Members[i].Name == "pi5" {
			h := *ctx.Mesh.Members[i].Host
			h.Anonymous = "home"
			ctx.Mesh.Members[i].Host = &h
		}
	}
	m := New(ctx)
	m.SetSize(120, 200)
	m.Open("pi5")
	assert.Contains(t, m.View(), "anonymous")
	assert.Contains(t, m.View(), "on: listing and chat without a token, as namespace home")
	m.Open("mac-mini")
	assert.NotContains(t, m.View(), "without a token")
}

// At 80 columns a host's long lines are read whole: a recent event says which model it is about
// and wraps under its column, as in Events, and the Hailo's note and an engine's detail wrap.
func TestLongLinesWrapAt80(t *testing.T) {
	ctx := testCtx()
	for i := range ctx.Mesh.Members {
		if ctx.Mesh.Members[i].Name == "pi5" {
			h := *ctx.Mesh.Members[i].Host
			h.Accelerators = append([]api.Accelerator(nil), h.Accelerators...)
			h.Accelerators[0].Loaded = "deepseek_r1_distill_qwen:1.5b"
			h.Engines = append([]api.Engine(nil), h.Engines...)
			h.Engines[0].Detail = "downloaded: deepseek_r1_distill_qwen:1.5b, qwen2.5-instruct:1.5b"
			ctx.Mesh.Members[i].Host = &h
		}
	}
	ctx.Events = append(ctx.Events, api.Event{Time: now, Type: api.EventPlacement, Host: "pi5", Message: "placement ready at http://127.0.0.1:33939",
		Placement: &api.Placement{Model: "deepseek_r1_distill_qwen:1.5b", Host: "pi5"}})
	m := New(ctx)
	m.SetSize(80, 300)
	m.Open("pi5")
	view := m.View()
	assert.NotContains(t, view, "…")
	words := strings.Join(strings.Fields(view), " ")
	assert.Contains(t, words, "placement deepseek_r1_distill_qwen:1.5b: placement ready at http://127.0.0.1:33939")
	assert.Contains(t, words, "deepseek_r1_distill_qwen:1.5b runs on the Hailo-10H in its own 8.0 GiB: not counted here")
	assert.Contains(t, words, "downloaded: deepseek_r1_distill_qwen:1.5b, qwen2.5-instruct:1.5b")
	assert.Contains(t, view, "\n                     http://127.0.0.1:33939", "under the message's column")
}

// A host on battery says so in its detail; one that is not shows no power line.
func TestOnBatteryShown(t *testing.T) {
	ctx := testCtx()
	for i := range ctx.Mesh.Members {
		if ctx.Mesh.Members[i].Name == "pi5" {
			h := *ctx.Mesh.Members[i].Host
			h.OnBattery = true
			ctx.Mesh.Members[i].Host = &h
		}
	}
	m := New(ctx)
	m.SetSize(120, 200)
	m.Open("pi5")
	assert.Contains(t, m.View(), "power        on battery")
	m.Open("mac-mini")
	assert.NotContains(t, m.View(), "on battery")
}
