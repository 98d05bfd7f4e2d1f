package common

import (
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/tui/keymap"
)

// WheelLines is how far one wheel notch scrolls.
const WheelLines = 3

// Scroll is the vertical position of a view that has more lines than rows: events, the
// doctor's report, a host's detail. Follow keeps the newest (last) line in view as lines are
// added, until the user scrolls up; scrolling back to the bottom follows again.
type Scroll struct {
	Offset int
	Follow bool
}

// Window returns the lines visible in height rows, clamping the offset first.
func (s *Scroll) Window(lines []string, height int) []string {
	s.clamp(len(lines), height)
	end := min(s.Offset+max(height, 0), len(lines))
	return lines[s.Offset:end]
}

func (s *Scroll) clamp(total, height int) {
	bottom := max(total-height, 0)
	if s.Follow {
		s.Offset = bottom
	}
	s.Offset = max(0, min(s.Offset, bottom))
}

// By scrolls delta lines (negative is up); reaching the bottom follows again, leaving it stops.
func (s *Scroll) By(delta, total, height int) {
	s.clamp(total, height)
	s.Offset += delta
	s.Follow = false
	s.clamp(total, height)
	s.Follow = s.Offset >= max(total-height, 0)
}

// AtBottom reports whether the last line is in view.
func (s *Scroll) AtBottom(total, height int) bool {
	s.clamp(total, height)
	return s.Offset >= max(total-height, 0)
}

// Update handles the scrolling keys and the mouse wheel; it reports whether msg was one.
func (s *Scroll) Update(k keymap.KeyMap, msg tea.Msg, total, height int) bool {
	page := max(height-1, 1)
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch {
		case key.Matches(msg, k.Up):
			s.By(-1, total, height)
		case key.Matches(msg, k.Down):
			s.By(1, total, height)
		case key.Matches(msg, k.PageUp):
			s.By(-page, total, height)
		case key.Matches(msg, k.PageDown):
			s.By(page, total, height)
		case key.Matches(msg, k.Top):
			s.By(-total, total, height)
		case key.Matches(msg, k.Bottom):
			s.By(total, total, height)
		default:
			return false
		}
		return true
	case tea.MouseMsg:
		switch msg.Button {
		case tea.MouseButtonWheelUp:
			s.By(-WheelLines, total, height)
		case tea.MouseButtonWheelDown:
			s.By(WheelLines, total, height)
		default:
			return false
		}
		return true
	}
	return false
}
