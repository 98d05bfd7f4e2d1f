// Package styles holds every style of the console in one struct, built from a lipgloss renderer
// so tests can pass an ASCII one and NO_COLOR is honoured in one place.
package styles

import (
	"io"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/llmkube/mesh/agent/api"
)

// Styles is the console's look.
type Styles struct {
	r *lipgloss.Renderer

	// NoColor: the terminal shows no colour and no attributes (NO_COLOR, a dumb terminal, the
	// tests): what colour would say is said in text.
	NoColor bool

	App        lipgloss.Style
	Title      lipgloss.Style
	Header     lipgloss.Style // the mesh summary line
	TabActive  lipgloss.Style
	TabIdle    lipgloss.Style
	TableHead  lipgloss.Style
	Row        lipgloss.Style
	Selected   lipgloss.Style
	Muted      lipgloss.Style
	Bold       lipgloss.Style
	OK         lipgloss.Style
	Warn       lipgloss.Style
	Error      lipgloss.Style
	Danger     lipgloss.Style // dangerous actions and their confirmations
	BoxTitle   lipgloss.Style
	StatusBar  lipgloss.Style
	HelpKey    lipgloss.Style
	HelpDesc   lipgloss.Style
	Prompt     lipgloss.Style
	Cursor     lipgloss.Style // a text field's cursor
	User       lipgloss.Style // chat: the person's turns
	Assistant  lipgloss.Style // chat: the model's turns
	BarUsed    lipgloss.Style // memory bar: committed
	BarReserve lipgloss.Style // memory bar: reserved by in-flight admissions
	BarFree    lipgloss.Style // memory bar: budget left
	BarOutside lipgloss.Style // memory bar: outside the budget
}

// New builds the styles for a renderer (lipgloss.DefaultRenderer() in the program).
func New(r *lipgloss.Renderer) *Styles {
	s := &Styles{r: r, NoColor: r.ColorProfile() == termenv.Ascii}
	ns := r.NewStyle
	accent := lipgloss.AdaptiveColor{Light: "#5A3FC0", Dark: "#A78BFA"}
	muted := lipgloss.AdaptiveColor{Light: "#777777", Dark: "#8A8A8A"}
	green := lipgloss.AdaptiveColor{Light: "#1F7A1F", Dark: "#4ADE80"}
	yellow := lipgloss.AdaptiveColor{Light: "#9A6700", Dark: "#FACC15"}
	red := lipgloss.AdaptiveColor{Light: "#B91C1C", Dark: "#F87171"}

	s.App = ns()
	s.Title = ns().Bold(true).Foreground(accent)
	s.Header = ns().Foreground(muted)
	s.TabActive = ns().Bold(true).Foreground(accent).Underline(true)
	s.TabIdle = ns().Foreground(muted)
	s.TableHead = ns().Bold(true)
	s.Row = ns()
	s.Selected = ns().Reverse(true)
	s.Muted = ns().Foreground(muted)
	s.Bold = ns().Bold(true)
	s.OK = ns().Foreground(green)
	s.Warn = ns().Foreground(yellow)
	s.Error = ns().Foreground(red)
	s.Danger = ns().Bold(true).Foreground(red)
	s.BoxTitle = ns().Bold(true)
	s.StatusBar = ns().Foreground(muted)
	s.HelpKey = ns().Bold(true).Foreground(accent)
	s.HelpDesc = ns().Foreground(muted)
	s.Prompt = ns().Bold(true).Foreground(accent)
	s.Cursor = s.Selected
	if s.NoColor && r.Output().ColorProfile() != termenv.Ascii {
		// NO_COLOR asks for no colour, not for no attributes, and a text field drawn without
		// them has no cursor at all: on a terminal that draws attributes the cursor keeps its
		// reverse video. (A dumb terminal, or output that is no terminal, gets none.)
		attrs := lipgloss.NewRenderer(io.Discard)
		attrs.SetColorProfile(termenv.ANSI)
		s.Cursor = attrs.NewStyle().Reverse(true)
	}
	s.User = ns().Bold(true)
	s.Assistant = ns()
	s.BarUsed = ns().Foreground(accent)
	s.BarReserve = ns().Foreground(yellow)
	s.BarFree = ns().Foreground(green)
	s.BarOutside = ns().Foreground(muted)
	return s
}

// SelectedRow draws a table row under the cursor: reverse video across the whole width, over
// the row's text without its own colours (a coloured cell would end the reverse video where
// it ends).
func (s *Styles) SelectedRow(line string, width int) string {
	line = ansi.Strip(line)
	if w := ansi.StringWidth(line); w < width {
		line += strings.Repeat(" ", width-w)
	}
	return s.Selected.Render(line)
}

// Placeholder is the hint an empty text field shows: muted, and without colour in guillemets,
// so it never looks like text already typed.
func (s *Styles) Placeholder(hint string) string {
	if s.NoColor && hint != "" {
		return "«" + hint + "»"
	}
	return hint
}

// Renderer is the renderer the styles were made for.
func (s *Styles) Renderer() *lipgloss.Renderer { return s.r }

// Liveness colours a member's liveness; the word is always spelled out too, so colour is
// never the only signal.
func (s *Styles) Liveness(l api.Liveness) lipgloss.Style {
	switch l {
	case api.Alive:
		return s.OK
	case api.Suspect:
		return s.Warn
	case api.Dead, api.Unreachable:
		return s.Error
	default:
		return s.Muted
	}
}

// State colours a placement's state.
func (s *Styles) State(st api.PlacementState) lipgloss.Style {
	switch st {
	case api.StateReady:
		return s.OK
	case api.StateSizing, api.StatePulling, api.StateLoading, api.StateRestarting, api.StateStopping:
		return s.Warn
	case api.StateFailed, api.StateUnavailable:
		return s.Error
	default:
		return s.Muted
	}
}

// Verdict colours a ranking verdict.
func (s *Styles) Verdict(v api.Verdict) lipgloss.Style {
	switch v {
	case api.VerdictFits:
		return s.OK
	case api.VerdictSwap:
		return s.Warn
	default:
		return s.Error
	}
}
