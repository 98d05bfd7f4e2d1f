package common

import (
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/tui/keymap"
)

// Cursor is the selection in a table that scrolls: the selected row and the first row shown.
type Cursor struct {
	Pos    int
	Offset int
}

// Move handles the list keys (up, down, page up/down, top, bottom) and the mouse wheel for a
// list of n rows shown height at a time, and reports whether msg was one of them.
func (c *Cursor) Move(k keymap.KeyMap, msg tea.Msg, n, height int) bool {
	page := max(height-1, 1)
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch {
		case key.Matches(msg, k.Up):
			c.Pos--
		case key.Matches(msg, k.Down):
			c.Pos++
		case key.Matches(msg, k.PageUp):
			c.Pos -= page
		case key.Matches(msg, k.PageDown):
			c.Pos += page
		case key.Matches(msg, k.Top):
			c.Pos = 0
		case key.Matches(msg, k.Bottom):
			c.Pos = n - 1
		default:
			return false
		}
	case tea.MouseMsg:
		switch msg.Button {
		case tea.MouseButtonWheelUp:
			c.Pos--
		case tea.MouseButtonWheelDown:
			c.Pos++
		default:
			return false
		}
	default:
		return false
	}
	c.Clamp(n, height)
	return true
}

// Clamp keeps the cursor on a row and the row in view.
func (c *Cursor) Clamp(n, height int) {
	height = max(height, 1)
	c.Pos = max(0, min(c.Pos, n-1))
	if c.Pos < c.Offset {
		c.Offset = c.Pos
	}
	if c.Pos >= c.Offset+height {
		c.Offset = c.Pos - height + 1
	}
	c.Offset = max(0, min(c.Offset, max(n-height, 0)))
}

// Click selects the row under a left click, for a table whose first row is drawn on line top
// of the view and shows height rows. It reports whether a row was hit and whether it was the
// one already selected (a second click opens it, as enter would).
func (c *Cursor) Click(msg tea.MouseMsg, top, n, height int) (hit, again bool) {
	if msg.Action != tea.MouseActionPress || msg.Button != tea.MouseButtonLeft {
		return false, false
	}
	line := msg.Y - top
	row := c.Offset + line
	if line < 0 || line >= height || row >= n {
		return false, false
	}
	again = row == c.Pos
	c.Pos = row
	c.Clamp(n, height)
	return true, again
}
