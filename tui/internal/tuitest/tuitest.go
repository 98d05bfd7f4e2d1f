// Package tuitest is what the console's view tests share: a fixed clock, plain ASCII styles so
// goldens hold no escape codes, and a context over the sample mesh. Only tests import it.
package tuitest

import (
	"io"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/keymap"
	"github.com/llmkube/mesh/tui/styles"
)

// Now is the tests' clock.
var Now = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// Renderer draws without colour.
func Renderer() *lipgloss.Renderer {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	return r
}

// Context is a console context over SampleMesh and its events at Now, with no
// connection and no memory samples yet.
func Context() *common.Context {
	ctx := &common.Context{
		Styles: styles.New(Renderer()),
		Keys:   keymap.Default(),
		Mesh:   SampleMesh(Now),
		Memory: common.NewHistory(300),
		Now:    func() time.Time { return Now },
	}
	for _, e := range SampleEvents(Now) {
		ctx.AddEvent(e)
	}
	return ctx
}
