package common

import (
	"fmt"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/tui/keymap"
)

func lines(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}

func TestScrollFollowsUntilScrolledUp(t *testing.T) {
	k := keymap.Default()
	s := Scroll{Follow: true}
	assert.Equal(t, []string{"7", "8", "9"}, s.Window(lines(10), 3))
	assert.Equal(t, []string{"8", "9", "10"}, s.Window(lines(11), 3), "a new line comes into view")

	assert.True(t, s.Update(k, tea.KeyMsg{Type: tea.KeyUp}, 11, 3))
	assert.False(t, s.Follow)
	assert.Equal(t, []string{"7", "8", "9"}, s.Window(lines(11), 3))
	assert.Equal(t, []string{"7", "8", "9"}, s.Window(lines(12), 3), "scrolled up: new lines do not move the view")

	assert.True(t, s.Update(k, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("G")}, 12, 3))
	assert.True(t, s.Follow, "back at the bottom follows again")
	assert.Equal(t, []string{"9", "10", "11"}, s.Window(lines(12), 3))

	s.Update(k, tea.MouseMsg{Button: tea.MouseButtonWheelUp}, 12, 3)
	assert.Equal(t, 6, s.Offset)
	s.Update(k, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("g")}, 12, 3)
	assert.Equal(t, 0, s.Offset)
	s.By(-5, 12, 3)
	assert.Equal(t, 0, s.Offset, "never above the top")
	s.Update(k, tea.KeyMsg{Type: tea.KeyPgDown}, 12, 3)
	assert.Equal(t, 2, s.Offset)
	assert.False(t, s.Update(k, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("z")}, 12, 3))
}

func TestScrollShortContent(t *testing.T) {
	s := Scroll{}
	assert.Equal(t, []string{"0", "1"}, s.Window(lines(2), 5))
	s.By(3, 2, 5)
	assert.Equal(t, 0, s.Offset)
	assert.True(t, s.AtBottom(2, 5))
	assert.Empty(t, s.Window(lines(2), 0))
}
