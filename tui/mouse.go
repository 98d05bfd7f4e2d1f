package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/llmkube/mesh/tui/common"
)

// tab is one label of the tab bar.
type tab struct {
	page  common.Page
	label string
}

// tabGap separates the tab labels.
const tabGap = " "

// tabs are the labels of the tab bar. The active one is bracketed, the others padded to the
// same width, so it shows without colour (NO_COLOR) and the labels never move when it changes.
func (a *App) tabs() []tab {
	pages := append([]common.Page(nil), common.Tabs...)
	if a.active == common.PageHostDetail || a.active == common.PageHelp {
		pages = append(pages, a.active)
	}
	out := make([]tab, len(pages))
	for i, p := range pages {
		label := p.Title()
		if i < len(common.Tabs) {
			label = fmt.Sprintf("%d %s", i+1, label)
		}
		if p == a.active {
			label = "[" + label + "]"
		} else {
			label = " " + label + " "
		}
		out[i] = tab{page: p, label: label}
	}
	return out
}

// tabAt is the tab under column x.
func (a *App) tabAt(x int) (common.Page, bool) {
	pos := 0
	for _, t := range a.tabs() {
		w := lipgloss.Width(a.tabLabel(t))
		if x >= pos && x < pos+w {
			return t.page, true
		}
		pos += w + lipgloss.Width(tabGap)
	}
	return 0, false
}

// footerAt is the key of the footer under column x: the footer's keys are buttons.
func (a *App) footerAt(x int) (key.Binding, bool) {
	pos := 0
	sep := lipgloss.Width(a.ctx.Styles.Muted.Render(helpSep))
	for _, b := range a.footerKeys() {
		w := lipgloss.Width(a.drawHelp([]key.Binding{b}))
		if x >= pos && x < pos+w {
			return b, true
		}
		pos += w + sep
	}
	return key.Binding{}, false
}

// mouse routes a mouse event: a click on a tab switches to it, a click on a key of the
// footer presses it, and the rest goes to the view with its line counted from the view's top.
func (a *App) mouse(msg tea.MouseMsg) tea.Cmd {
	click := msg.Action == tea.MouseActionPress && msg.Button == tea.MouseButtonLeft
	top, bottom := a.header(), a.footer()
	tabsAt, bodyAt := lipgloss.Height(a.titleLine()), lipgloss.Height(top)
	footerAt := bodyAt + a.bodyHeight(top, bottom)
	switch {
	case msg.Y >= tabsAt && msg.Y < bodyAt:
		if p, ok := a.tabAt(msg.X); ok && click && p != a.active {
			return a.navigate(p, "")
		}
		return nil
	case msg.Y >= footerAt:
		if !click || a.cmdActive || a.status != "" {
			return nil
		}
		if b, ok := a.footerAt(msg.X); ok && len(b.Keys()) > 0 {
			if km, ok := keyMsg(b.Keys()[0]); ok {
				return a.key(km)
			}
		}
		return nil
	case msg.Y >= bodyAt:
		msg.Y -= bodyAt
		return a.forward(msg)
	}
	return nil
}

// toggleMouse gives the mouse to the terminal, so text (a chat answer) can be selected and
// copied without holding shift, or takes it back.
func (a *App) toggleMouse() tea.Cmd {
	a.mouseOff = !a.mouseOff
	if a.mouseOff {
		return tea.Batch(tea.DisableMouse, common.Status("mouse off: select text with it; ctrl+y gives it back to the console", false))
	}
	return tea.Batch(tea.EnableMouseCellMotion, common.Status("mouse on: clicks select rows, tabs and keys", false))
}

// keyNames maps the names bubbletea gives keys ("enter", "ctrl+o", "pgdown") back to keys.
var keyNames = func() map[string]tea.KeyType {
	m := map[string]tea.KeyType{}
	for t := tea.KeyType(-128); t < 128; t++ {
		if t == tea.KeyRunes {
			continue
		}
		if s := (tea.KeyMsg{Type: t}).String(); s != "" {
			if _, dup := m[s]; !dup {
				m[s] = t
			}
		}
	}
	return m
}()

// keyMsg is the key press a binding's key name stands for.
func keyMsg(name string) (tea.KeyMsg, bool) {
	alt := false
	if rest, ok := strings.CutPrefix(name, "alt+"); ok && len(rest) > 0 {
		alt, name = true, rest
	}
	if t, ok := keyNames[name]; ok {
		return tea.KeyMsg{Type: t, Alt: alt}, true
	}
	if r := []rune(name); len(r) == 1 {
		return tea.KeyMsg{Type: tea.KeyRunes, Runes: r, Alt: alt}, true
	}
	return tea.KeyMsg{}, false
}
