package tui

import (
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/views/models"
)

// lineOf is the screen line on which s first shows.
func lineOf(t *testing.T, a *App, s string) int {
	t.Helper()
	for i, l := range strings.Split(a.View(), "\n") {
		if strings.Contains(l, s) {
			return i
		}
	}
	require.Failf(t, "not on screen", "%q", s)
	return -1
}

// The chrome is measured as drawn: styles given borders and padding make every view smaller,
// never taller than the screen, and the mouse still hits what is drawn where it clicks.
func TestFramedStylesKeepTheLayout(t *testing.T) {
	const w, h = 100, 30
	a := newApp(t, w, h)
	st := a.ctx.Styles
	st.Header = st.Header.Border(lipgloss.NormalBorder(), false, false, true, false)
	st.TableHead = st.TableHead.PaddingBottom(1)
	st.TabActive = st.TabActive.PaddingTop(1).PaddingLeft(1)
	st.TabIdle = st.TabIdle.PaddingTop(1).PaddingLeft(1)
	st.HelpKey = st.HelpKey.PaddingLeft(2)
	a.Update(tea.WindowSizeMsg{Width: w, Height: h})

	fits := func(page string) {
		t.Helper()
		lines := strings.Split(a.View(), "\n")
		assert.Len(t, lines, h, page)
		for i, l := range lines {
			assert.LessOrEqual(t, ansi.StringWidth(l), w, "%s, line %d: %q", page, i, l)
		}
	}
	for _, k := range []string{"1", "2", "3", "4", "5", "6", "?"} {
		keys(a, k)
		fits("page " + k)
		keys(a, "esc")
	}
	keys(a, "1", "enter")
	require.Equal(t, common.PageHostDetail, a.Active())
	fits("host detail")
	keys(a, "esc")

	// A click on a tab's padding or its label, on a row, on a key of the footer.
	tabs := lineOf(t, a, "1 Hosts")
	click(a, at(t, a, tabs, "2 Models"), tabs-1)
	assert.Equal(t, common.PageModels, a.Active(), "the tab's padding is the tab")
	click(a, at(t, a, tabs, "1 Hosts"), tabs)
	require.Equal(t, common.PageHosts, a.Active())
	rows := hostRows(a)
	click(a, 10, lineOf(t, a, rows[2]))
	assert.Equal(t, rows[2], selectedHost(t, a), "a click selects the row drawn there")

	keys(a, "2")
	ms := a.pages[common.PageModels].(*models.Model)
	second := ms.Rows()[1]
	click(a, 10, lineOf(t, a, second.Model))
	sel, ok := ms.Selected()
	require.True(t, ok)
	assert.Equal(t, second.ID, sel.ID)

	click(a, at(t, a, h-1, "? help")+1, h-1)
	assert.Equal(t, common.PageHelp, a.Active(), "the footer's keys are where they are drawn")
}
