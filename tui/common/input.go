package common

import (
	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/textarea"
	"github.com/charmbracelet/bubbles/textinput"

	"github.com/llmkube/mesh/tui/styles"
)

// NewInput is a one-line text input drawn with the console's renderer (so NO_COLOR and the
// tests' ASCII profile reach it too: bubbles' defaults use the global renderer) and a steady
// cursor (a blinking one re-renders twice a second for nothing and makes views differ by time).
func NewInput(st *styles.Styles, prompt, placeholder string) textinput.Model {
	ti := textinput.New()
	ti.Prompt = prompt
	ti.Placeholder = st.Placeholder(placeholder)
	ti.PromptStyle = st.Prompt
	ti.TextStyle = st.Row
	ti.PlaceholderStyle = st.Muted
	ti.CompletionStyle = st.Muted
	ti.Cursor.Style = st.Cursor
	ti.Cursor.TextStyle = st.Row
	ti.Cursor.SetMode(cursor.CursorStatic)
	return ti
}

// NewTextArea is a multi-line input drawn with the console's renderer and a steady cursor.
func NewTextArea(st *styles.Styles, placeholder string) textarea.Model {
	ta := textarea.New()
	ta.Placeholder = st.Placeholder(placeholder)
	ta.ShowLineNumbers = false
	ta.Prompt = "┃ "
	focused := textarea.Style{
		Base:             st.App,
		CursorLine:       st.Row,
		CursorLineNumber: st.Muted,
		EndOfBuffer:      st.Muted,
		LineNumber:       st.Muted,
		Placeholder:      st.Muted,
		Prompt:           st.Prompt,
		Text:             st.Row,
	}
	blurred := focused
	blurred.Prompt = st.Muted
	blurred.Text = st.Muted
	ta.FocusedStyle, ta.BlurredStyle = focused, blurred
	ta.Cursor.Style = st.Cursor
	ta.Cursor.TextStyle = st.Row
	ta.Cursor.SetMode(cursor.CursorStatic)
	// The textarea draws through a pointer to its current style set; Blur points it at the
	// styles just set (New left it at bubbles' defaults).
	ta.Blur()
	return ta
}
