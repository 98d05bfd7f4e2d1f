package common

import (
	"strings"

	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/tui/styles"
)

// Filter is a list's "/" filter: a text input that takes every key while it is being typed;
// enter keeps what was typed, esc clears it.
type Filter struct {
	input  textinput.Model
	active bool
}

// NewFilter returns a filter drawn with the console's styles.
func NewFilter(st *styles.Styles, placeholder string) Filter {
	return Filter{input: NewInput(st, "/", placeholder)}
}

// Active reports whether the filter is being typed (it then captures the keys).
func (f *Filter) Active() bool { return f.active }

// Query is the lower-cased filter text, "" for none.
func (f *Filter) Query() string { return strings.ToLower(strings.TrimSpace(f.input.Value())) }

// Shown reports whether the filter line belongs on screen: being typed, or holding text.
func (f *Filter) Shown() bool { return f.active || f.input.Value() != "" }

// Start focuses the filter for typing.
func (f *Filter) Start() tea.Cmd {
	f.active = true
	return f.input.Focus()
}

// Clear empties the filter.
func (f *Filter) Clear() { f.input.SetValue("") }

// SetWidth sizes the input.
func (f *Filter) SetWidth(w int) { f.input.Width = max(w-2, 1) }

// Key takes a key while the filter is typed and reports whether its text changed.
func (f *Filter) Key(msg tea.KeyMsg) (changed bool, cmd tea.Cmd) {
	switch msg.String() {
	case "enter":
		f.active = false
		f.input.Blur()
		return false, nil
	case "esc":
		f.active = false
		f.input.Blur()
		before := f.input.Value()
		f.input.SetValue("")
		return before != "", nil
	}
	before := f.input.Value()
	f.input, cmd = f.input.Update(msg)
	return f.input.Value() != before, cmd
}

// View draws the filter line.
func (f *Filter) View() string { return f.input.View() }
