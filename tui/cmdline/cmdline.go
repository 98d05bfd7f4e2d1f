// Package cmdline is the console's `:` command line: a one-line input that completes what is
// typed with tab (the candidates come from the caller: verbs, host names, models, sources) and
// recalls earlier lines with ↑/↓, kept between runs in a file (history.go).
package cmdline

import (
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/styles"
)

// MaxHistory bounds the lines kept.
const MaxHistory = 200

// Line is the command line.
type Line struct {
	input    textinput.Model
	complete func(typed string) []string
	noColor  bool // a completion drawn after the cursor would look typed: it is not drawn

	hist  []string // oldest first
	idx   int      // position while recalling; len(hist) is the line being typed
	draft string   // what was typed before recalling

	// A second tab in a row cycles through the completions the first one offered.
	cycle    []string
	cycleIdx int
}

// New returns a command line drawn with the console's styles; complete lists the whole lines
// that may follow what is typed.
func New(st *styles.Styles, placeholder string, complete func(typed string) []string) *Line {
	in := common.NewInput(st, ":", placeholder)
	in.ShowSuggestions = true
	// Tab is ours (it also extends to the common prefix); ↑/↓ are the history.
	in.KeyMap.AcceptSuggestion = key.NewBinding(key.WithDisabled())
	in.KeyMap.NextSuggestion = key.NewBinding(key.WithKeys("ctrl+n"))
	in.KeyMap.PrevSuggestion = key.NewBinding(key.WithKeys("ctrl+p"))
	return &Line{input: in, complete: complete, noColor: st.NoColor}
}

// SetHistory replaces the recalled lines (loaded from the file), oldest first.
func (l *Line) SetHistory(lines []string) {
	l.hist = append([]string(nil), lines...)
	l.idx = len(l.hist)
}

// History is the recalled lines, oldest first.
func (l *Line) History() []string { return append([]string(nil), l.hist...) }

// Remember adds a line run to the history (not twice in a row) and reports whether it changed.
func (l *Line) Remember(line string) bool {
	line = strings.TrimSpace(line)
	if line == "" || (len(l.hist) > 0 && l.hist[len(l.hist)-1] == line) {
		l.idx = len(l.hist)
		return false
	}
	l.hist = append(l.hist, line)
	if over := len(l.hist) - MaxHistory; over > 0 {
		l.hist = append(l.hist[:0:0], l.hist[over:]...)
	}
	l.idx = len(l.hist)
	return true
}

// Focus starts typing a new line.
func (l *Line) Focus() tea.Cmd {
	l.idx = len(l.hist)
	l.draft = ""
	l.refresh()
	return l.input.Focus()
}

// Close ends typing and empties the line.
func (l *Line) Close() {
	l.input.Blur()
	l.input.SetValue("")
}

// Value is the line typed.
func (l *Line) Value() string { return l.input.Value() }

// SetWidth sizes the input.
func (l *Line) SetWidth(w int) { l.input.Width = max(w-3, 1) } // the prompt and the cursor cell

// View draws the line, with the completion in muted text after the cursor; without colour
// the completion is not drawn (it would look typed), tab still takes it.
func (l *Line) View() string {
	if l.noColor {
		plain := l.input
		plain.SetSuggestions(nil)
		return plain.View()
	}
	return l.input.View()
}

// Matches are the completions of what is typed now.
func (l *Line) Matches() []string { return l.input.MatchedSuggestions() }

// Key takes a key typed into the line (enter and esc are the caller's).
func (l *Line) Key(msg tea.KeyMsg) tea.Cmd {
	if msg.String() != "tab" {
		l.cycle = nil
	}
	switch msg.String() {
	case "tab":
		l.tab()
		return nil
	case "up":
		l.recall(-1)
		return nil
	case "down":
		l.recall(1)
		return nil
	}
	before := l.input.Value()
	var cmd tea.Cmd
	l.input, cmd = l.input.Update(msg)
	if l.input.Value() != before {
		l.refresh()
	}
	return cmd
}

// tab extends the line to what every completion shares, or, when that adds nothing, takes the
// completion shown; tab again takes the next one (as do ctrl+n / ctrl+p before it).
func (l *Line) tab() {
	v := l.input.Value()
	if len(l.cycle) > 0 && v == l.cycle[l.cycleIdx] {
		l.cycleIdx = (l.cycleIdx + 1) % len(l.cycle)
		l.set(l.cycle[l.cycleIdx])
		return
	}
	m := l.input.MatchedSuggestions()
	if len(m) == 0 {
		return
	}
	if next := commonPrefix(m); len([]rune(next)) > len([]rune(v)) {
		l.set(next)
		return
	}
	l.cycle, l.cycleIdx = m, l.input.CurrentSuggestionIndex()
	l.set(l.cycle[l.cycleIdx])
}

func (l *Line) set(v string) {
	l.input.SetValue(v)
	l.input.CursorEnd()
	l.refresh()
}

// recall steps through the history: -1 older, +1 newer; past the newest is the draft again.
func (l *Line) recall(d int) {
	if len(l.hist) == 0 {
		return
	}
	if l.idx == len(l.hist) {
		l.draft = l.input.Value()
	}
	l.idx = max(0, min(l.idx+d, len(l.hist)))
	if l.idx == len(l.hist) {
		l.set(l.draft)
		return
	}
	l.set(l.hist[l.idx])
}

// refresh recomputes the completions of the line as typed.
func (l *Line) refresh() {
	var sugg []string
	if l.complete != nil && l.input.Value() != "" {
		sugg = l.complete(l.input.Value())
	}
	l.input.SetSuggestions(sugg)
}

// commonPrefix is the longest start all of ss share, compared without case as the matching is.
func commonPrefix(ss []string) string {
	p := []rune(ss[0])
	for _, s := range ss[1:] {
		r := []rune(s)
		n := 0
		for n < len(p) && n < len(r) && strings.EqualFold(string(p[n]), string(r[n])) {
			n++
		}
		p = p[:n]
	}
	return string(p)
}
