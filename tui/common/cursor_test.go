package common

import (
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/tui/keymap"
)

func TestCursor(t *testing.T) {
	k := keymap.Default()
	var c Cursor
	const n, h = 10, 4
	press := func(s string) bool { return c.Move(k, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}, n, h) }

	assert.True(t, press("k"))
	assert.Equal(t, Cursor{0, 0}, c, "stays on the first row")
	press("j")
	press("j")
	press("j")
	press("j")
	assert.Equal(t, Cursor{4, 1}, c, "scrolls to keep the row in view")
	press("G")
	assert.Equal(t, Cursor{9, 6}, c)
	c.Move(k, tea.KeyMsg{Type: tea.KeyPgUp}, n, h)
	assert.Equal(t, Cursor{6, 6}, c)
	c.Move(k, tea.MouseMsg{Button: tea.MouseButtonWheelUp}, n, h)
	assert.Equal(t, Cursor{5, 5}, c)
	press("g")
	assert.Equal(t, Cursor{0, 0}, c)
	assert.False(t, press("x"), "not a list key")

	c = Cursor{Pos: 9, Offset: 6}
	c.Clamp(3, h)
	assert.Equal(t, Cursor{2, 0}, c, "the list shrank")
	c.Clamp(0, h)
	assert.Equal(t, Cursor{0, 0}, c, "an empty list")
}

func TestCursorClick(t *testing.T) {
	c := Cursor{Pos: 0, Offset: 2}
	click := func(y int) (bool, bool) {
		return c.Click(tea.MouseMsg{X: 5, Y: y, Action: tea.MouseActionPress, Button: tea.MouseButtonLeft}, 3, 10, 4)
	}
	hit, again := click(4)
	assert.True(t, hit)
	assert.False(t, again)
	assert.Equal(t, 3, c.Pos, "the second row shown, scrolled by two")
	_, again = click(4)
	assert.True(t, again, "a click on the selected row")
	for _, y := range []int{2, 7, -1} {
		hit, _ = click(y)
		assert.False(t, hit, "line %d is not a row", y)
	}
	c = Cursor{}
	hit, _ = c.Click(tea.MouseMsg{Y: 5, Action: tea.MouseActionPress, Button: tea.MouseButtonLeft}, 3, 2, 10)
	assert.False(t, hit, "under the last row")
	hit, _ = c.Click(tea.MouseMsg{Y: 3, Action: tea.MouseActionRelease, Button: tea.MouseButtonLeft}, 3, 2, 10)
	assert.False(t, hit, "a release is not a click")
}
