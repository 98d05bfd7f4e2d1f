// Package help is the console's help view. It draws the sections the root hands it when it
// opens — the keys of the view in front, the global keys and the `:` commands, all taken from
// the key map and the command table — so it cannot disagree with the keys, and it scrolls when
// they do not fit.
package help

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/render"
)

// twoColumns is the width from which sections are laid out side by side.
const twoColumns = 100

// Model is the help view.
type Model struct {
	ctx           *common.Context
	width, height int
	sections      []common.HelpSection
	scroll        common.Scroll
}

// New returns the help view.
func New(ctx *common.Context) *Model { return &Model{ctx: ctx} }

// Show sets what the help lists and scrolls back to its top.
func (m *Model) Show(sections []common.HelpSection) {
	m.sections = sections
	m.scroll = common.Scroll{}
}

func (m *Model) Init() tea.Cmd    { return nil }
func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }
func (m *Model) Capturing() bool  { return false }

func (m *Model) ShortHelp() []key.Binding {
	k := m.ctx.Keys
	if len(m.lines()) > m.height {
		return []key.Binding{common.As(k.Down, "scroll"), k.PageDown, k.Back}
	}
	return []key.Binding{k.Back}
}

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg.(type) {
	case tea.KeyMsg, tea.MouseMsg:
		m.scroll.Update(m.ctx.Keys, msg, len(m.lines()), m.bodyHeight())
	}
	return m, nil
}

// bodyHeight is the rows for help lines: all of them when they fit, else one less for the
// line that says where the window is.
func (m *Model) bodyHeight() int {
	if len(m.lines()) <= m.height {
		return max(m.height, 1)
	}
	return max(m.height-1, 1)
}

// section draws one section in width cells: its title, then a key column and a description.
func (m *Model) section(s common.HelpSection, width int) []string {
	st := m.ctx.Styles
	keyW := 0
	for _, b := range s.Keys {
		keyW = max(keyW, len([]rune(b.Help().Key)))
	}
	keyW = min(keyW, max(width/2, 8))
	lines := []string{st.Bold.Render(render.Cut(s.Title, width))}
	indent := strings.Repeat(" ", keyW+3)
	for _, b := range s.Keys {
		h := b.Help()
		// A long description wraps under itself, as the Events view's messages do: help cut
		// short says nothing.
		desc := strings.Split(ansi.Wrap(h.Desc, max(width-keyW-3, 10), " "), "\n")
		lines = append(lines, "  "+st.HelpKey.Render(render.Pad(h.Key, keyW))+" "+desc[0])
		for _, d := range desc[1:] {
			lines = append(lines, indent+d)
		}
	}
	return append(lines, "")
}

// lines lays the sections out: one column on narrow terminals, two side by side on wide ones
// (in order: the left one takes sections up to about half the lines).
func (m *Model) lines() []string {
	if m.width < twoColumns {
		var out []string
		for _, s := range m.sections {
			out = append(out, m.section(s, m.width)...)
		}
		return out
	}
	colW := (m.width - 1) / 2
	var drawn [][]string
	total := 0
	for _, s := range m.sections {
		d := m.section(s, colW)
		drawn = append(drawn, d)
		total += len(d)
	}
	var left, right []string
	for _, d := range drawn {
		if len(right) == 0 && (len(left) == 0 || len(left)+len(d) <= (total+1)/2) {
			left = append(left, d...)
		} else {
			right = append(right, d...)
		}
	}
	out := make([]string, max(len(left), len(right)))
	for i := range out {
		l, r := "", ""
		if i < len(left) {
			l = left[i]
		}
		if i < len(right) {
			r = right[i]
		}
		out[i] = render.Pad(l, colW) + " " + r
	}
	return out
}

func (m *Model) View() string {
	lines := m.lines()
	h := m.bodyHeight()
	shown := m.scroll.Window(lines, h)
	if len(lines) > h {
		end := m.scroll.Offset + len(shown)
		more := "↓/pgdn for more"
		if end >= len(lines) {
			more = "↑/g back to the top"
		}
		shown = append(shown, m.ctx.Styles.Muted.Render(fmt.Sprintf("lines %d–%d of %d · %s", m.scroll.Offset+1, end, len(lines), more)))
	}
	return render.Place(strings.Join(shown, "\n"), m.width, m.height)
}
