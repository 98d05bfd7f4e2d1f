package common_test

import (
	"io"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/styles"
)

// With NO_COLOR on a real terminal, every text field (the place form, the filter and the ':'
// line are inputs, the chat a text area) still shows where the cursor is.
func TestTextFieldsShowTheCursorWithoutColour(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	t.Setenv("TERM", "xterm-256color")
	st := styles.New(lipgloss.NewRenderer(io.Discard, termenv.WithTTY(true)))
	typed := tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("hi")}

	in := common.NewInput(st, "/", "filter")
	in.Focus()
	in, _ = in.Update(typed)
	assert.Contains(t, in.View(), "hi\x1b[7m \x1b[0m")

	ta := common.NewTextArea(st, "Message the model")
	ta.Focus()
	ta, _ = ta.Update(typed)
	assert.Contains(t, ta.View(), "hi\x1b[7m \x1b[0m")
}
