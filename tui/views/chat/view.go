package chat

import (
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/render"
)

// rule separates the transcript from the status line and the input.
func (m *Model) rule() string {
	return m.ctx.Styles.Muted.Render(strings.Repeat("─", max(m.width, 0)))
}

func (m *Model) View() string {
	rule := m.rule()
	var body string
	if m.picking() {
		body = render.Place(m.pickerView(), m.width, m.transcriptHeight())
	} else {
		body = render.Place(strings.Join(m.scroll.Window(m.lines, m.transcriptHeight()), "\n"), m.width, m.transcriptHeight())
	}
	return render.Place(strings.Join([]string{m.statusLine(), rule, body, rule, m.input.View()}, "\n"), m.width, m.height)
}

func (m *Model) statusLine() string {
	st := m.ctx.Styles
	if m.model == "" {
		return render.Cut(st.Title.Render("Chat")+st.Muted.Render(" · choose a ready model"), m.width)
	}
	parts := []string{st.Title.Render(m.model)}
	// What is happening comes first: the figures may be cut on a narrow terminal.
	ready := false
	for _, c := range Choices(m.ctx.Mesh) {
		ready = ready || c.Model == m.model
	}
	switch {
	case m.streaming:
		parts = append(parts, st.Warn.Render("generating (esc stops)"))
	case !ready:
		parts = append(parts, st.Warn.Render("not ready anywhere now"))
	}
	// Where the last answer came from, else where the next one will.
	a := m.answer()
	host := ""
	if a != nil && a.Role == "assistant" {
		host = a.Host
	}
	var placed *api.Placement
	if t, err := console.ChatTarget(m.ctx.Mesh, m.model); err == nil {
		if host == "" {
			host = t.Name
		}
		for _, mb := range m.ctx.Mesh.Members {
			for i, p := range mb.Placements {
				if mb.Name == host && p.Model == m.model {
					placed = &mb.Placements[i]
				}
			}
		}
	}
	if host != "" {
		parts = append(parts, "on "+host)
	}
	if placed != nil {
		parts = append(parts, string(placed.Runtime))
	}
	switch {
	case a != nil && a.Role == "assistant" && a.TTFT > 0:
		parts = append(parts, "TTFT "+render.Millis(float64(a.TTFT.Microseconds())/1000), render.Speed(a.TokPS))
	case placed != nil && (placed.TTFTMillis > 0 || placed.TokensPerS > 0):
		parts = append(parts, "TTFT "+render.Millis(placed.TTFTMillis), render.Speed(placed.TokensPerS)+" (rolling)")
	}
	return render.Cut(strings.Join(parts, st.Muted.Render(" · ")), m.width)
}

func (m *Model) pickerView() string {
	st := m.ctx.Styles
	choices := Choices(m.ctx.Mesh)
	lines := []string{m.pickerHead()}
	if len(choices) == 0 {
		lines = append(lines, "No model is ready in the mesh yet: press p to place one.")
		if m.ctx.Conn == nil {
			lines = append(lines, "", st.Muted.Render("not connected to a mesh"))
		}
		return strings.Join(lines, "\n")
	}
	m.pick.Clamp(len(choices), m.pickRows()) // the mesh may have changed since the last key
	nameWidth := 0                           // the names in a column, so where each runs lines up
	for _, c := range choices {
		nameWidth = max(nameWidth, min(ansi.StringWidth(c.Model), max(m.width/2, 10)))
	}
	for i := m.pick.Offset; i < min(m.pick.Offset+m.pickRows(), len(choices)); i++ {
		c := choices[i]
		mark := "  "
		name := render.Pad(c.Model, nameWidth)
		if i == m.pick.Pos {
			mark = "> "
			name = st.Selected.Render(name)
		}
		lines = append(lines, render.Cut(mark+name+st.Muted.Render("  on "+strings.Join(c.Hosts, ", ")+" · "+string(c.Runtime)), m.width))
	}
	return strings.Join(lines, "\n")
}

// transcript renders the conversation, for the scroll.
func (m *Model) transcript() string {
	st := m.ctx.Styles
	if m.model == "" {
		return ""
	}
	turns := m.convs[m.model]
	textWidth := max(m.width-2, 10)
	wrap := func(text string) []string {
		var out []string
		for _, l := range strings.Split(ansi.Wrap(text, textWidth, " "), "\n") {
			out = append(out, "  "+l)
		}
		return out
	}
	if len(turns) == 0 {
		where := ""
		if t, err := console.ChatTarget(m.ctx.Mesh, m.model); err == nil {
			where = " It runs on " + t.Name + "."
		}
		return strings.Join(wrap(st.Muted.Render("Say something to "+m.model+"."+where+" The conversation stays here while the console runs; ctrl+o changes the model.")), "\n")
	}
	var lines []string
	for i, t := range turns {
		if i > 0 {
			lines = append(lines, "")
		}
		if t.Role == "user" {
			lines = append(lines, st.User.Render("you"))
			lines = append(lines, wrap(t.Text)...)
			continue
		}
		head := st.Bold.Render(m.model)
		var facts []string
		if t.Host != "" {
			facts = append(facts, t.Host)
		}
		if t.TTFT > 0 {
			facts = append(facts, "TTFT "+render.Millis(float64(t.TTFT.Microseconds())/1000))
		}
		if t.TokPS > 0 {
			facts = append(facts, render.Speed(t.TokPS))
		}
		if t.Took > 0 {
			facts = append(facts, "answered in "+render.Millis(float64(t.Took.Microseconds())/1000))
		}
		if len(facts) > 0 {
			head += st.Muted.Render(" · " + strings.Join(facts, " · "))
		}
		lines = append(lines, render.Cut(head, m.width))
		// An answer's first token often starts with a space (" Hello"): under the indent it
		// would start a column off.
		text := strings.TrimLeft(t.Text, " \n")
		last := i == len(turns)-1
		if last && m.streaming {
			text += "▍"
		}
		if text != "" {
			lines = append(lines, wrap(st.Assistant.Render(text))...)
		}
		if t.Stopped {
			lines = append(lines, "  "+st.Muted.Render("[stopped]"))
		}
		if t.Err != "" {
			for _, l := range wrap("✗ " + t.Err) {
				lines = append(lines, st.Error.Render(l))
			}
		}
	}
	return strings.Join(lines, "\n")
}
