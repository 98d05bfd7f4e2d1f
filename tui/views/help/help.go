// Package help is the console's help view, generated from the key map so it cannot disagree
// with the keys.
package help

import (
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/render"
)

// Model is the help view.
type Model struct {
	ctx           *common.Context
	width, height int
}

// New returns the help view.
func New(ctx *common.Context) *Model { return &Model{ctx: ctx} }

func (m *Model) Init() tea.Cmd                       { return nil }
func (m *Model) SetSize(w, h int)                    { m.width, m.height = w, h }
func (m *Model) Capturing() bool                     { return false }
func (m *Model) ShortHelp() []key.Binding            { return []key.Binding{m.ctx.Keys.Back} }
func (m *Model) Update(tea.Msg) (tea.Model, tea.Cmd) { return m, nil }

func (m *Model) View() string {
	k := m.ctx.Keys
	st := m.ctx.Styles
	section := func(title string, binds ...key.Binding) []string {
		lines := []string{st.Bold.Render(title)}
		for _, b := range binds {
			h := b.Help()
			lines = append(lines, "  "+st.HelpKey.Render(render.Pad(h.Key, 12))+" "+h.Desc)
		}
		return append(lines, "")
	}
	left := append(section("Views", k.Global()...), section("Lists", k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom, k.Open, k.Filter, k.Sort, k.Back)...)
	right := append(section("Models", k.Delete, k.Confirm, k.Cancel), section("Place", k.NextFld, k.PrevFld, k.Spread, k.Open)...)
	right = append(right, section("Chat", k.Send, k.Newline, k.Stop)...)
	right = append(right,
		st.Bold.Render("Command line"),
		"  :hosts  :models  :place SOURCE  :chat MODEL",
		"  :host NAME  :events  :doctor  :help  :quit",
	)
	colW := max(m.width/2-1, 20)
	var b strings.Builder
	for i := 0; i < max(len(left), len(right)); i++ {
		l, r := "", ""
		if i < len(left) {
			l = left[i]
		}
		if i < len(right) {
			r = right[i]
		}
		if m.width < 80 {
			continue
		}
		b.WriteString(render.Pad(l, colW) + " " + render.Cut(r, colW) + "\n")
	}
	if m.width < 80 {
		return render.Place(strings.Join(append(left, right...), "\n"), m.width, m.height)
	}
	return render.Place(b.String(), m.width, m.height)
}
