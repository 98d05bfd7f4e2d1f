package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/internal/tuitest"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// newApp is the console over the fixture mesh, without a connection.
func newApp(t *testing.T, w, h int) *App {
	t.Helper()
	a := New(nil, Options{Renderer: tuitest.Renderer(), Now: func() time.Time { return now }})
	a.ctx.Mesh = tuitest.SampleMesh(now)
	a.Update(tea.WindowSizeMsg{Width: w, Height: h})
	return a
}

func keys(a *App, ks ...string) {
	for _, k := range ks {
		_, cmd := a.Update(press(k))
		drain(a, cmd)
	}
}

// press is the message of one named key (the names bindings use), or of the runes k.
func press(k string) tea.KeyMsg {
	if msg, ok := keyMsg(k); ok {
		return msg
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

// drain runs the commands a key returned and feeds status messages back into the app, as the
// program would. Without a connection no command of the console waits (the
// clock's tick starts only in Init, which these tests do not call), so they run in place: a
// deadline on a busy machine would drop a status now and then.
func drain(a *App, cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	switch msg := cmd().(type) {
	case tea.BatchMsg:
		for _, c := range msg {
			drain(a, c)
		}
	case common.StatusMsg:
		_, next := a.Update(msg)
		drain(a, next)
	}
}

func TestGoldenHosts(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			a := newApp(t, size[0], size[1])
			view := a.View()
			assert.Equal(t, size[1], lipgloss.Height(view), "the view fills the terminal exactly")
			assert.LessOrEqual(t, lipgloss.Width(view), size[0])
			golden.RequireEqual(t, []byte(view))
		})
	}
}

func TestGoldenHelp(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			a := newApp(t, size[0], size[1])
			keys(a, "?")
			require.Equal(t, common.PageHelp, a.Active())
			view := a.View()
			assert.Equal(t, size[1], lipgloss.Height(view))
			golden.RequireEqual(t, []byte(view))
			keys(a, "esc")
			assert.Equal(t, common.PageHosts, a.Active(), "esc returns to where help was opened")
		})
	}
}

// The help is about the view in front, scrolls to its end at 80×24, and keeps the footer.
func TestHelpScrollsAndFollowsTheView(t *testing.T) {
	a := newApp(t, 80, 24)
	keys(a, "2", "?")
	view := a.View()
	assert.Contains(t, view, "Models")
	assert.Contains(t, view, "chat with a ready model")
	assert.Contains(t, view, "lines 1–", "says there is more")
	assert.NotContains(t, view, ":quit", "the command line is further down")
	keys(a, "G")
	view = a.View()
	assert.Contains(t, view, ":quit")
	assert.Contains(t, view, ":q :exit · leave the console", "abbreviations are listed")
	assert.Contains(t, view, "? help · q quit")
	golden.RequireEqual(t, []byte(view))

	keys(a, "esc", "3", "esc", "?") // from the place view (out of its form)
	assert.Contains(t, a.View(), "Place: the form")
	assert.NotContains(t, a.View(), "chat with a ready model")
}

// The footer keeps the way to help and out at every width.
func TestFooterKeepsHelpAndQuit(t *testing.T) {
	for _, w := range []int{40, 60, 80, 120} {
		a := newApp(t, w, 24)
		lines := strings.Split(a.View(), "\n")
		assert.Contains(t, lines[len(lines)-1], "? help · q quit", "at %d columns", w)
	}
	a := newApp(t, 80, 24)
	keys(a, "/")
	lines := strings.Split(a.View(), "\n")
	assert.Contains(t, lines[len(lines)-1], "ctrl+c quit", "typing, q is text: the footer says the way out that works")
	assert.NotContains(t, lines[len(lines)-1], "q quit")
}

func TestKeymapNavigation(t *testing.T) {
	a := newApp(t, 100, 30)
	assert.Equal(t, common.PageHosts, a.Active())
	keys(a, "tab")
	assert.Equal(t, common.PageModels, a.Active())
	keys(a, "shift+tab", "shift+tab")
	assert.Equal(t, common.PageDoctor, a.Active(), "shift+tab wraps around")
	keys(a, "1")
	assert.Equal(t, common.PageHosts, a.Active())

	// Enter on the first host opens its detail; esc comes back.
	keys(a, "enter")
	assert.Equal(t, common.PageHostDetail, a.Active())
	keys(a, "esc")
	assert.Equal(t, common.PageHosts, a.Active())
}

func TestCommandLine(t *testing.T) {
	a := newApp(t, 100, 30)
	keys(a, ":")
	assert.True(t, a.cmdActive)
	assert.Contains(t, a.View(), ":", "the command line shows in the footer")
	keys(a, "models", "enter")
	assert.False(t, a.cmdActive)
	assert.Equal(t, common.PageModels, a.Active())

	keys(a, ":", "bogus", "enter")
	assert.True(t, a.statusErr)
	assert.Contains(t, a.status, `unknown command "bogus"`)
	assert.Contains(t, a.View(), "unknown command")

	keys(a, ":", "host pi5", "enter")
	assert.Equal(t, common.PageHostDetail, a.Active())

	keys(a, ":", "anything", "esc")
	assert.False(t, a.cmdActive)
	assert.Equal(t, common.PageHostDetail, a.Active(), "esc abandons the command line")
}

func TestQuit(t *testing.T) {
	a := newApp(t, 80, 24)
	_, cmd := a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	require.NotNil(t, cmd)
	assert.Equal(t, tea.Quit(), cmd())
}

func TestHostsFilterCapturesKeys(t *testing.T) {
	a := newApp(t, 120, 35)
	keys(a, "/", "q", "2") // typed into the filter, not quit / models
	assert.Equal(t, common.PageHosts, a.Active())
	keys(a, "esc")
	keys(a, "/", "hailo", "enter")
	view := a.View()
	assert.Contains(t, view, "Hailo-10H")
	assert.NotContains(t, view, "darwin")
}

// Goldens of the states the root draws, at both sizes, without colour (the tests' renderer is
// what NO_COLOR gives): the chat picker with the global footer, the command line completing,
// the mouse given to the terminal, and the help of the place form.
func TestGoldenStates(t *testing.T) {
	for _, st := range []struct {
		name string
		keys []string
	}{
		{"chat-picker", []string{"4"}},
		{"command-completing", []string{":", "chat qw"}},
		{"place-help", []string{"3", "esc", "?"}},
		{"models", []string{"2"}}, // its alerts and its main keys (x delete, / filter) at 80 columns too
	} {
		for _, size := range [][2]int{{80, 24}, {120, 35}} {
			t.Run(fmt.Sprintf("%s/%dx%d", st.name, size[0], size[1]), func(t *testing.T) {
				a := newApp(t, size[0], size[1])
				keys(a, st.keys...)
				view := a.View()
				assert.Equal(t, size[1], lipgloss.Height(view))
				assert.LessOrEqual(t, lipgloss.Width(view), size[0])
				golden.RequireEqual(t, []byte(view))
			})
		}
	}
}

// valueView is a view written the way bubbletea's contract allows: Update returns a changed
// copy rather than changing itself.
type valueView struct{ seen int }

func (v valueView) Init() tea.Cmd                       { return nil }
func (v valueView) Update(tea.Msg) (tea.Model, tea.Cmd) { v.seen++; return v, nil }
func (v valueView) View() string                        { return fmt.Sprintf("seen %d", v.seen) }
func (v valueView) SetSize(int, int)                    {}
func (v valueView) ShortHelp() []key.Binding            { return nil }
func (v valueView) Capturing() bool                     { return false }

// The root keeps what a view's Update returns, for broadcast messages and forwarded keys alike.
func TestRootKeepsTheModelAViewReturns(t *testing.T) {
	a := newApp(t, 80, 24)
	a.pages[common.PageEvents] = valueView{}
	a.Update(common.TickMsg(now))
	keys(a, "5", "j")
	assert.Equal(t, valueView{seen: 2}, a.pages[common.PageEvents])
	assert.Contains(t, a.View(), "seen 2")
}

// Every key of the Models help is said whole at 120 columns: "r" places an evicted model
// again, on its host, asking before a swap (its line was cut before "a swap").
func TestModelsHelpUncutAt120(t *testing.T) {
	a := newApp(t, 120, 35)
	keys(a, "2", "?")
	view := a.View()
	assert.Contains(t, view, "place again (same host; asks before a swap)")
	assert.NotContains(t, view, "…   esc")
}

// The demo's note (where scripts find its mesh) is for copying: when the title has no room for
// it, it takes a line of its own, whole, and the tabs and the view move down a line with it.
func TestNoteOnALineOfItsOwn(t *testing.T) {
	const note = "scripts: . /var/folders/x1/abcdefghij0123456789/T/llmkube-demo.env"
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		a := New(nil, Options{Renderer: tuitest.Renderer(), Now: func() time.Time { return now }, Note: note})
		a.ctx.Mesh = tuitest.SampleMesh(now)
		a.Update(tea.WindowSizeMsg{Width: size[0], Height: size[1]})
		view := a.View()
		lines := strings.Split(view, "\n")
		require.Len(t, lines, size[1])
		if size[0] == 80 {
			assert.Equal(t, note, strings.TrimRight(lines[1], " "), "the note, whole, under the title")
			click(a, at(t, a, 2, "3 Place"), 2)
			assert.Equal(t, common.PagePlace, a.Active(), "the tabs are a line lower")
		} else {
			assert.True(t, strings.HasSuffix(strings.TrimRight(lines[0], " "), " · "+note), "room for it on the title line")
		}
	}
}

// Typing a chat message at 80 columns, the footer keeps the way out of the input: without it
// the digits that switch views are text, and nothing says how to leave.
func TestChatFooterKeepsTheWayOut(t *testing.T) {
	a := newApp(t, 80, 24)
	keys(a, "4", "enter")
	require.True(t, a.page().Capturing())
	footer := a.footer()
	assert.Contains(t, footer, "esc leave input")
	assert.Contains(t, footer, "ctrl+c quit")
}

// No help is cut: a long description wraps under itself, in one column or two.
func TestHelpNeverCut(t *testing.T) {
	for _, w := range []int{80, 120} {
		for _, p := range common.Tabs {
			a := newApp(t, w, 300) // tall: every line of the help on screen at once
			a.navigate(p, "")
			keys(a, "esc", "?") // esc: out of a form or an input first
			require.Equal(t, common.PageHelp, a.Active())
			assert.NotContains(t, a.View(), "…", "%s help at %d columns", p.Title(), w)
		}
	}
}
