package tui

import (
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/views/chat"
)

func click(a *App, x, y int) {
	_, cmd := a.Update(tea.MouseMsg{X: x, Y: y, Action: tea.MouseActionPress, Button: tea.MouseButtonLeft})
	drain(a, cmd)
}

// at is the column where s starts on line y of the screen.
func at(t *testing.T, a *App, y int, s string) int {
	t.Helper()
	line := strings.Split(a.View(), "\n")[y]
	i := strings.Index(line, s)
	require.GreaterOrEqual(t, i, 0, "%q on line %d: %q", s, y, line)
	return len([]rune(line[:i]))
}

func TestClickTabsRowsAndKeys(t *testing.T) {
	a := newApp(t, 120, 35)
	click(a, at(t, a, 1, "3 Place"), 1)
	assert.Equal(t, common.PagePlace, a.Active(), "a click on a tab")
	click(a, at(t, a, 1, "1 Hosts")+3, 1)
	require.Equal(t, common.PageHosts, a.Active())

	rows := hostRows(a)
	// The first host is on the screen's line 5: the title, the tabs, the summary, the legend
	// and the column titles above it.
	click(a, 10, 5+2)
	assert.Equal(t, rows[2], selectedHost(t, a), "a click selects a row")
	click(a, 10, 5+2)
	assert.Equal(t, common.PageHostDetail, a.Active(), "a click on the selected row opens it")

	keys(a, "esc")
	click(a, at(t, a, 34, "? help"), 34)
	assert.Equal(t, common.PageHelp, a.Active(), "the footer's keys are buttons")
	click(a, at(t, a, 34, "esc back"), 34)
	assert.Equal(t, common.PageHosts, a.Active())

	// The chat picker: a click chooses, a second one opens.
	keys(a, "4")
	choices := chat.Choices(a.ctx.Mesh)
	y := at(t, a, 0, "llmkube") + 2 + 4 + 1 // the second model
	click(a, 4, y)
	assert.Empty(t, a.pages[common.PageChat].(*chat.Model).Chatting())
	click(a, 4, y)
	assert.Equal(t, choices[1].Model, a.pages[common.PageChat].(*chat.Model).Chatting())
}

func TestMouseToggle(t *testing.T) {
	a := newApp(t, 120, 35)
	keys(a, "/") // also from a text field
	_, cmd := a.Update(tea.KeyMsg{Type: tea.KeyCtrlY})
	require.NotNil(t, cmd)
	assert.True(t, a.mouseOff)
	assert.Contains(t, a.View(), "mouse off")
	_, cmd = a.Update(tea.KeyMsg{Type: tea.KeyCtrlY})
	require.NotNil(t, cmd)
	assert.False(t, a.mouseOff)
	assert.NotContains(t, a.View(), "mouse off")
}

func TestKeyMsgOfABindingName(t *testing.T) {
	for _, name := range []string{"enter", "esc", "tab", "shift+tab", "ctrl+o", "pgdown", "up", "?", "x", "alt+enter", "ctrl+y"} {
		km, ok := keyMsg(name)
		require.True(t, ok, name)
		assert.Equal(t, name, km.String())
	}
	_, ok := keyMsg("no such key")
	assert.False(t, ok)
}
