package tui

import (
	"path/filepath"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/internal/tuitest"
	"github.com/llmkube/mesh/tui/views/chat"
	"github.com/llmkube/mesh/tui/views/hosts"
	"github.com/llmkube/mesh/tui/views/models"
)

// burst sends s as bubbletea v1 delivers runes that arrive in one read: one message.
func burst(a *App, s string) tea.Cmd {
	_, cmd := a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)})
	drain(a, cmd)
	return cmd
}

// paste sends s as a bracketed paste.
func paste(a *App, s string) {
	_, cmd := a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s), Paste: true})
	drain(a, cmd)
}

func selectedHost(t *testing.T, a *App) string {
	t.Helper()
	mb, ok := a.pages[common.PageHosts].(*hosts.Model).Selected()
	require.True(t, ok)
	return mb.Name
}

func hostRows(a *App) []string {
	var names []string
	for _, mb := range a.pages[common.PageHosts].(*hosts.Model).Rows() {
		names = append(names, mb.Name)
	}
	return names
}

func TestBatchedKeysAreEachHandled(t *testing.T) {
	a := newApp(t, 120, 35)
	rows := hostRows(a)
	require.GreaterOrEqual(t, len(rows), 3)

	burst(a, "jj")
	assert.Equal(t, rows[2], selectedHost(t, a), "jj in one read moves two rows")
	burst(a, "kG")
	assert.Equal(t, rows[len(rows)-1], selectedHost(t, a))

	burst(a, "2j")
	require.Equal(t, common.PageModels, a.Active(), "a digit switches views inside a burst")
	pl, ok := a.pages[common.PageModels].(*models.Model).Selected()
	require.True(t, ok)
	first := a.pages[common.PageModels].(*models.Model).Rows()[1]
	assert.Equal(t, first.ID, pl.ID, "the key after the digit acts in the new view")

	// Keys after one that opens a text field are typed into it.
	burst(a, "1/hailo")
	assert.Equal(t, common.PageHosts, a.Active())
	assert.True(t, a.page().Capturing())
	assert.Equal(t, []string{"pi5"}, hostRows(a), "the rest of the burst is the filter's text")
	keys(a, "esc")
}

func TestPasteStaysAPaste(t *testing.T) {
	a := newApp(t, 120, 35)
	paste(a, "q2x")
	assert.Equal(t, common.PageHosts, a.Active(), "a paste outside a text field is not a string of commands")
	assert.False(t, a.cmdActive)

	keys(a, "/")
	paste(a, "hailo")
	assert.Equal(t, []string{"pi5"}, hostRows(a), "a paste into the filter is its text")
	keys(a, "esc")

	keys(a, ":")
	paste(a, "models")
	keys(a, "enter")
	assert.Equal(t, common.PageModels, a.Active(), "a paste into the command line")
}

// Over the chat view's model picker, the keys the footer offers work: views, tab, :, ?, q.
func TestGlobalKeysOverTheChatPicker(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		want common.Page
	}{
		{[]string{"1"}, common.PageHosts},
		{[]string{"6"}, common.PageDoctor},
		{[]string{"tab"}, common.PageEvents},
		{[]string{"shift+tab"}, common.PagePlace},
		{[]string{"?"}, common.PageHelp},
		{[]string{":", "hosts", "enter"}, common.PageHosts},
	} {
		a := newApp(t, 120, 35)
		keys(a, "4")
		require.Equal(t, common.PageChat, a.Active())
		require.Empty(t, a.pages[common.PageChat].(*chat.Model).Chatting(), "the picker is open")
		keys(a, tc.keys...)
		assert.Equal(t, tc.want, a.Active(), "%v over the picker", tc.keys)
	}

	a := newApp(t, 120, 35)
	keys(a, "4")
	_, cmd := a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	require.NotNil(t, cmd)
	assert.Equal(t, tea.Quit(), cmd(), "q quits over the picker")

	// jj in one read picks the third model, as two presses would.
	a = newApp(t, 120, 35)
	keys(a, "4")
	burst(a, "jj")
	keys(a, "enter")
	choices := chat.Choices(a.ctx.Mesh)
	assert.Equal(t, choices[2].Model, a.pages[common.PageChat].(*chat.Model).Chatting())
}

func TestTabFromDetailAndHelp(t *testing.T) {
	a := newApp(t, 120, 35)
	keys(a, "2", "?", "tab")
	assert.Equal(t, common.PagePlace, a.Active(), "from the help over Models, the tab after Models")
	keys(a, "esc", "1", "enter", "shift+tab") // esc: out of the place form first
	assert.Equal(t, common.PageDoctor, a.Active(), "from a host's detail over Hosts, the tab before Hosts")
}

// Tab cycles views from every view, also from a chat message being typed; digits are text
// there. The place form keeps tab for its fields, and esc gives tab back.
func TestTabAndDigitsInTextFields(t *testing.T) {
	a := newApp(t, 120, 35)
	keys(a, "4", "enter") // choose the first model: the input has the keys
	require.True(t, a.page().Capturing())
	burst(a, "12")
	assert.Equal(t, common.PageChat, a.Active(), "digits are typed into a message")
	keys(a, "tab")
	assert.Equal(t, common.PageEvents, a.Active(), "tab leaves the chat input for the next view")

	keys(a, "3")
	require.Equal(t, common.PagePlace, a.Active())
	require.True(t, a.page().Capturing(), "the source field has the keys")
	keys(a, "tab")
	assert.Equal(t, common.PagePlace, a.Active(), "tab moves to the next field of the form")
	keys(a, "esc", "tab")
	assert.Equal(t, common.PageChat, a.Active(), "out of the form, tab switches views")
}

func TestCommandLineCompletesArguments(t *testing.T) {
	for _, tc := range []struct {
		typed string
		want  string
	}{
		{"ho", "hosts "},
		{"host pi5", "host pi5"},                                 // pi5 is a whole name already
		{"host ma", "host mac-mini"},                             // a host name
		{"chat qwen2.", "chat qwen2.5-coder-7b"},                 // a ready model
		{"place hailo://deep", "place hailo://deepseek_r1:1.5b"}, // a source the mesh offers
	} {
		a := newApp(t, 120, 35)
		keys(a, ":", tc.typed, "tab")
		assert.Equal(t, tc.want, a.cmdline.Value(), "%q", tc.typed)
	}
}

func TestCommandHistoryKeptBetweenRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console-history")
	run := func() *App {
		a := New(nil, Options{Renderer: tuitest.Renderer(), Now: func() time.Time { return now }, HistoryFile: path})
		a.ctx.Mesh = tuitest.SampleMesh(now)
		a.Update(tea.WindowSizeMsg{Width: 100, Height: 30})
		_, cmd := a.Update(a.loadHistory()())
		drain(a, cmd)
		return a
	}
	a := run()
	keys(a, ":", "models", "enter")
	keys(a, ":", "host pi5", "enter")
	require.FileExists(t, path)

	b := run()
	keys(b, ":", "up")
	assert.Equal(t, "host pi5", b.cmdline.Value(), "the last line of the previous run")
	keys(b, "up", "enter")
	assert.Equal(t, common.PageModels, b.Active())
}

// Esc and a key in one read arrive as alt+key: outside a text field that is the two presses.
func TestEscThenAKeyInOneRead(t *testing.T) {
	a := newApp(t, 120, 35)
	rows := hostRows(a)
	keys(a, "enter")
	require.Equal(t, common.PageHostDetail, a.Active())
	_, cmd := a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("j"), Alt: true})
	drain(a, cmd)
	assert.Equal(t, common.PageHosts, a.Active(), "esc went back")
	assert.Equal(t, rows[1], selectedHost(t, a), "and j moved down")

	// In a text field alt+b is a word move, not esc then b.
	keys(a, "/", "pi")
	_, cmd = a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("b"), Alt: true})
	drain(a, cmd)
	assert.True(t, a.page().Capturing(), "still typing the filter")

	// Any other key after esc is the two presses there too: esc then 1 in the place form (as
	// tmux sends it) leaves the form for Hosts, and types no "1" into the source.
	keys(a, "esc", "3")
	burst(a, "ollama://")
	require.True(t, a.page().Capturing())
	_, cmd = a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("1"), Alt: true})
	drain(a, cmd)
	assert.Equal(t, common.PageHosts, a.Active(), "esc left the form, 1 went to Hosts")
	keys(a, "3")
	assert.Contains(t, a.View(), "source    ollama:// ", "nothing typed after esc")
}

// typeKeys sends each rune of s as its own key press, as a person types, and reports whether
// any of the commands they gave was the program's end.
func typeKeys(a *App, s string) (quit bool) {
	names := map[rune]string{'\r': "enter", '\x1b': "esc"}
	for _, r := range s {
		msg := press(string(r))
		if name, ok := names[r]; ok {
			msg = press(name)
		}
		_, cmd := a.Update(msg)
		quit = drainQuit(a, cmd) || quit
	}
	return quit
}

// drainQuit is drain that also says whether a command ended the program.
func drainQuit(a *App, cmd tea.Cmd) bool {
	if cmd == nil {
		return false
	}
	switch msg := cmd().(type) {
	case tea.QuitMsg:
		return true
	case tea.BatchMsg:
		q := false
		for _, c := range msg {
			q = drainQuit(a, c) || q
		}
		return q
	case common.StatusMsg:
		_, next := a.Update(msg)
		return drainQuit(a, next)
	}
	return false
}

// The trap of issue 46: "3", a source with ':' and 'q' in it, enter, and typing on. An invalid
// source keeps the focus in its field with the validator's own words under it, so what is
// typed next stays text: the ':' opens no command line and the 'q' quits nothing.
func TestPlaceKeySequenceNeverQuits(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		a := newApp(t, size[0], size[1])
		require.False(t, typeKeys(a, "3qwen2.5:0.5b\r"))
		assert.Equal(t, common.PagePlace, a.Active())
		view := a.View()
		assert.Contains(t, view, `source "qwen2.5:0.5b" has no scheme; did you mean`, "the CLI's words, under the field")
		require.False(t, typeKeys(a, "\x1b"), "esc: out of the form, nothing quits")
		assert.Contains(t, a.View(), "› out of the form", "where the keys go is on screen")
		require.False(t, typeKeys(a, "\x1b"))
		assert.False(t, a.page().Capturing(), "a second esc does not lead back into the form")
		assert.Contains(t, a.View(), "› out of the form")
		require.False(t, typeKeys(a, "\r"))
		assert.True(t, a.page().Capturing(), "enter with no host to choose is the form again")

		// Back to the view: the form takes text again, ':' and 'q' included.
		a = newApp(t, size[0], size[1])
		require.False(t, typeKeys(a, "3olama://qwen\r"))
		assert.Contains(t, a.View(), `unknown scheme "olama"`)
		require.False(t, typeKeys(a, ":q,more"))
		assert.False(t, a.cmdActive, "':' in a field is text")
		assert.Equal(t, common.PagePlace, a.Active())
		assert.Contains(t, a.View(), "olama://qwen:q,more")
	}
}

// Quitting the demo console stops the demo mesh and its placements: q asks while models run,
// any key but y keeps it running, and ctrl+c (a deliberate chord) quits at once.
func TestQuitAsksWhenItStopsTheMesh(t *testing.T) {
	a := New(nil, Options{Renderer: tuitest.Renderer(), Now: func() time.Time { return now }, QuitStops: "the demo mesh"})
	a.ctx.Mesh = tuitest.SampleMesh(now)
	a.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	require.False(t, typeKeys(a, "q"))
	assert.Contains(t, a.View(), "quit? it stops the demo mesh and its 6 models (y/n)")
	require.False(t, typeKeys(a, "w"), "any other key answers no")
	assert.Contains(t, a.View(), "not quitting: the demo mesh runs on")
	require.False(t, typeKeys(a, "2"), "the key after the answer is a key again")
	assert.Equal(t, common.PageModels, a.Active())
	assert.True(t, typeKeys(a, "qy"))
	_, cmd := a.Update(tea.KeyMsg{Type: tea.KeyCtrlC})
	assert.Equal(t, tea.Quit(), cmd())

	// Failed and evicted placements hold nothing: with only those, q quits at once.
	a = New(nil, Options{Renderer: tuitest.Renderer(), Now: func() time.Time { return now }, QuitStops: "the demo mesh"})
	a.ctx.Mesh = tuitest.SampleMesh(now)
	for _, m := range a.ctx.Mesh.Members {
		for j := range m.Placements {
			m.Placements[j].State = api.StateFailed
		}
	}
	a.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	assert.True(t, typeKeys(a, "q"), "nothing runs: q quits without asking")
}

// typedAhead feeds msgs as the program does when they arrive in one read (a fast typist, a
// paste after enter): every one is handled before the result of any command they start, which
// runs on its own goroutine. Only then are the commands drained.
func typedAhead(a *App, msgs ...tea.KeyMsg) {
	var cmds []tea.Cmd
	for _, msg := range msgs {
		_, cmd := a.Update(msg)
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		drain(a, cmd)
	}
}

// Enter on a view that opens another (a ready model opens its chat, a host its detail) switches
// pages before the next key: what is typed right after it goes to the page it opened, not to the
// old page or the global keys (the "e" of "hello" switched to Events, its "t" filtered them).
func TestKeysTypedRightAfterEnterGoToThePageItOpens(t *testing.T) {
	a := newApp(t, 120, 35)
	keys(a, "2")
	for i, p := range a.pages[common.PageModels].(*models.Model).Rows() {
		if p.State == api.StateReady {
			keys(a, "g")
			for range i {
				keys(a, "j")
			}
			break
		}
	}
	sel, ok := a.pages[common.PageModels].(*models.Model).Selected()
	require.True(t, ok)
	require.Equal(t, api.StateReady, sel.State)

	typedAhead(a, press("enter"), press("hello there"))
	assert.Equal(t, common.PageChat, a.Active())
	assert.Equal(t, sel.Model, a.pages[common.PageChat].(*chat.Model).Chatting())
	assert.Contains(t, a.View(), "hello there", "the keys after enter are the chat's text")

	a = newApp(t, 120, 35)
	first := hostRows(a)[0]
	typedAhead(a, press("enter"), press("j"))
	assert.Equal(t, common.PageHostDetail, a.Active(), "j after enter scrolls the detail it opened")
	assert.Equal(t, first, selectedHost(t, a), "and does not move the hosts' cursor")
}
