package styles

import (
	"io"
	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
	"github.com/stretchr/testify/assert"
)

func colour() *Styles {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.TrueColor)
	return New(r)
}

// The cursor row is one reverse-video run across the terminal, even over coloured cells.
func TestSelectedRowSpansTheRow(t *testing.T) {
	st := colour()
	line := "pi5  " + st.OK.Render("alive") + "  " + st.BarUsed.Render("██") + st.BarFree.Render("░░")
	got := st.SelectedRow(line, 40)
	assert.Equal(t, 40, ansi.StringWidth(got))
	assert.Equal(t, "pi5  alive  ██░░"+strings.Repeat(" ", 24), ansi.Strip(got))
	assert.Equal(t, 2, strings.Count(got, "\x1b["), "one sequence on, one off: nothing ends it midway")
}

func TestPlaceholderWithoutColour(t *testing.T) {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	assert.Equal(t, "«hailo://qwen2:1.5b»", New(r).Placeholder("hailo://qwen2:1.5b"))
	assert.Equal(t, "hailo://qwen2:1.5b", colour().Placeholder("hailo://qwen2:1.5b"), "muted colour says it")
}

// With NO_COLOR on a terminal that draws attributes, a text field's cursor is still drawn, in
// reverse video and without colour; the rest stays plain. Output that is no terminal (the
// tests' goldens, a pipe) gets no escape codes at all.
func TestCursorWithoutColour(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	t.Setenv("TERM", "xterm-256color")
	st := New(lipgloss.NewRenderer(io.Discard, termenv.WithTTY(true)))
	assert.True(t, st.NoColor)
	assert.Equal(t, "\x1b[7m \x1b[0m", st.Cursor.Render(" "))
	assert.Equal(t, "ok", st.OK.Render("ok"), "no colour")

	assert.Equal(t, " ", New(lipgloss.NewRenderer(io.Discard)).Cursor.Render(" "))
	assert.Contains(t, colour().Cursor.Render(" "), "\x1b[7m", "with colour the cursor is the selection's reverse video")
}
