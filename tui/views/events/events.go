// Package events lists what the agents and the mesh report — placements changing state,
// refusals, deletions, engines, members joining and failing — newest at the bottom, following
// new events unless the user scrolled up, filterable by text and by type.
package events

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/render"
	"github.com/llmkube/mesh/tui/styles"
)

// Types are the type filter's steps; "" shows every type.
var Types = []string{"", api.EventPlacement, api.EventRefused, api.EventDeleted, api.EventEngine, api.EventMesh, api.EventLog}

var (
	keyType  = key.NewBinding(key.WithKeys("t"), key.WithHelp("t", "type filter"))
	keyApply = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "apply"))
	keyClear = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear"))
	keyFollw = key.NewBinding(key.WithKeys("G"), key.WithHelp("G", "follow"))
)

// Model is the events view.
type Model struct {
	ctx    *common.Context
	width  int
	height int
	scroll common.Scroll
	typ    int // index in Types

	filter common.Filter
}

// New returns the events view, following new events.
func New(ctx *common.Context) *Model {
	return &Model{
		ctx:    ctx,
		scroll: common.Scroll{Follow: true},
		filter: common.NewFilter(ctx.Styles, "filter by host, model, message, code"),
	}
}

func (m *Model) Init() tea.Cmd { return nil }

func (m *Model) SetSize(w, h int) {
	m.width, m.height = w, h
	m.filter.SetWidth(w)
}

func (m *Model) Capturing() bool { return m.filter.Active() }

func (m *Model) ShortHelp() []key.Binding {
	k := m.ctx.Keys
	if m.filter.Active() {
		return []key.Binding{keyApply, keyClear}
	}
	b := []key.Binding{k.Up, k.Down, k.Filter, keyType}
	if !m.scroll.Follow {
		b = append(b, keyFollw)
	}
	return b
}

// FullHelp lists every key of the view, for the help view.
func (m *Model) FullHelp() []common.HelpSection {
	k := m.ctx.Keys
	return []common.HelpSection{{Title: "Events", Keys: []key.Binding{
		k.Up, k.Down, k.PageUp, k.PageDown, k.Top, common.As(k.Bottom, "newest, and follow"),
		k.Filter, common.As(keyType, "cycle the event type"), common.As(k.Back, "clear the filters"),
	}}}
}

// Type is the type filter ("" for all).
func (m *Model) Type() string { return Types[m.typ] }

// Rows are the events shown, oldest first.
func (m *Model) Rows() []api.Event {
	q := m.filter.Query()
	typ := m.Type()
	var out []api.Event
	for _, e := range m.ctx.Events {
		if typ != "" && e.Type != typ {
			continue
		}
		if q != "" && !strings.Contains(strings.ToLower(searchText(e)), q) {
			continue
		}
		out = append(out, e)
	}
	return out
}

func searchText(e api.Event) string {
	s := e.Type + " " + e.Host + " " + e.Message + " " + string(e.Code) + " " + e.Member
	if p := e.Placement; p != nil {
		s += " " + p.Model + " " + string(p.State)
	}
	return s
}

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		if m.filter.Active() {
			changed, cmd := m.filter.Key(msg)
			if changed {
				m.scroll.Follow = true
			}
			return m, cmd
		}
		k := m.ctx.Keys
		switch {
		case key.Matches(msg, k.Filter):
			return m, m.filter.Start()
		case key.Matches(msg, keyType):
			m.typ = (m.typ + 1) % len(Types)
			m.scroll.Follow = true // a new selection starts at its newest event
			return m, nil
		case key.Matches(msg, k.Back):
			m.filter.Clear()
			m.typ = 0
			return m, nil
		}
		m.scroll.Update(k, msg, len(m.lines()), m.listHeight())
	case tea.MouseMsg:
		m.scroll.Update(m.ctx.Keys, msg, len(m.lines()), m.listHeight())
	}
	// New events (common.EventMsg) need nothing here: the root has added them to the context,
	// and a following scroll shows them on the next render.
	return m, nil
}

// listHeight is the rows of the list, as foot lays them out.
func (m *Model) listHeight() int {
	h, _ := m.foot()
	return h
}

// detailLines is the most the detail under the list takes.
const detailLines = 3

// foot lays out the list and the detail under it: the detail of the last event shown, wrapped
// over up to detailLines lines rather than cut at one (a placement's reason and source are at its
// end), and the rows left for the list under the status line (or the filter) and the column
// titles, as drawn (their heights are their styles', whatever they say). The list gives the
// detail one row at a time until the detail of the event then last shown fits.
func (m *Model) foot() (height int, detail string) {
	st := m.ctx.Styles
	top := st.Header.Render("")
	if m.filter.Shown() {
		top = m.filter.View()
	}
	rest := m.height - common.RowsOf(top, render.Head(st, nil))
	rows := m.Rows()
	lines, owner := m.render()
	for k := 1; ; k++ {
		height = max(rest-k, 1)
		s := m.scroll // a trial: the real scroll moves only on keys
		shown := s.Window(lines, height)
		last := s.Offset + len(shown) - 1
		if last < 0 || last >= len(owner) {
			return height, ""
		}
		detail = render.WrapLines(Detail(rows[owner[last]]), m.width, detailLines)
		if strings.Count(detail, "\n") < k || k >= detailLines {
			return height, detail
		}
	}
}

// columns are the list's: HOST as wide as the longest member named (between 10 and 24), so
// names are not cut while there is room; the message takes the rest.
func (m *Model) columns() []render.Column {
	host := 10
	for _, e := range m.ctx.Events {
		host = max(host, min(ansi.StringWidth(e.Subject()), 24))
	}
	cols := []render.Column{{Title: "TIME", Width: 8}, {Title: "TYPE", Width: 9}, {Title: "HOST", Width: host}, {Title: "MESSAGE"}}
	return render.Fit(cols, m.width, 20)
}

// lines renders every shown event, a long message wrapped under itself.
func (m *Model) lines() []string {
	lines, _ := m.render()
	return lines
}

// render draws every shown event's lines and says which event (its index in Rows) each line
// belongs to.
func (m *Model) render() (lines []string, owner []int) {
	st := m.ctx.Styles
	cs := m.columns()
	msgWidth := cs[3].Width
	indent := strings.Repeat(" ", m.width-msgWidth)
	now := m.ctx.Now()
	var out []string
	for i, e := range m.Rows() {
		text := Text(e)
		if e.Member != "" && e.Host != "" && e.Member != e.Host {
			text += " · seen by " + e.Host
		}
		wrapped := strings.Split(ansi.Wrap(text, msgWidth, " "), "\n")
		out = append(out, render.Row(cs, []string{Clock(now, e.Time), TypeStyle(st, e.Type).Render(e.Type), e.Subject(), wrapped[0]}))
		owner = append(owner, i)
		for _, w := range wrapped[1:] {
			out = append(out, indent+w)
			owner = append(owner, i)
		}
	}
	return out, owner
}

// Text is what an event says: its message, which model it is about when the message does not
// name it ("placement ready at …" on a host with two models says which one, as the CLI does),
// and its code.
func Text(e api.Event) string {
	text := e.Message
	if p := e.Placement; p != nil && p.Model != "" && !strings.Contains(text, p.Model) {
		text = p.Model + ": " + text
	}
	if e.Code != "" {
		text += " (" + string(e.Code) + ")"
	}
	return text
}

// Detail is the line under the list about the newest event in view (the last one shown while
// following): which placement, model, host and state it concerns, or which member.
func Detail(e api.Event) string {
	if p := e.Placement; p != nil && e.Type == api.EventIntent {
		// The keeper's placement is the intent's model only: no id, host or state of its own.
		return strings.Join([]string{"intent " + p.Namespace + "/" + p.Model, p.Source, "said by " + e.Subject()}, " · ")
	}
	if p := e.Placement; p != nil {
		host := p.Host
		if host == "" {
			host = e.Subject()
		}
		parts := []string{p.ID, p.Model + " on " + host, string(p.State)}
		if p.Reason != "" {
			parts = append(parts, p.Reason) // before the source: the line is cut at its end
		}
		if p.Source != "" {
			parts = append(parts, p.Source)
		}
		return strings.Join(parts, " · ")
	}
	parts := []string{e.Type}
	if s := e.Subject(); s != "" {
		parts = append(parts, s)
	}
	if e.Code != "" {
		parts = append(parts, string(e.Code))
	}
	return strings.Join(parts, " · ") + ": " + e.Message
}

// Clock is an event's time in the console's zone (the zone of now): the time of day, or the
// date for an event of another day.
func Clock(now, t time.Time) string {
	t = t.In(now.Location())
	if y, d := t.Year(), t.YearDay(); y == now.Year() && d == now.YearDay() {
		return t.Format("15:04:05")
	}
	return t.Format("Jan 02")
}

// TypeStyle colours an event type; the type is always spelled too.
func TypeStyle(st *styles.Styles, typ string) lipgloss.Style {
	switch typ {
	case api.EventRefused:
		return st.Error
	case api.EventDeleted, api.EventEngine, api.EventMesh:
		return st.Warn
	case api.EventPlacement:
		return st.OK
	}
	return st.Muted
}

func (m *Model) View() string {
	st := m.ctx.Styles
	var b strings.Builder
	rows := m.Rows()
	if m.filter.Shown() {
		b.WriteString(render.Cut(m.filter.View(), m.width))
	} else {
		typ := m.Type()
		if typ == "" {
			typ = "all types"
		}
		status := fmt.Sprintf("%d events · %s", len(rows), typ)
		if len(rows) != len(m.ctx.Events) {
			status = fmt.Sprintf("%d of %d events · %s", len(rows), len(m.ctx.Events), typ)
		}
		lines := m.lines()
		if m.scroll.AtBottom(len(lines), m.listHeight()) {
			status += " · following new events"
		} else {
			status += " · paused (G follows)"
		}
		b.WriteString(st.Header.Render(render.Cut(status, m.width)))
	}
	b.WriteString("\n")
	b.WriteString(render.Head(st, m.columns()))
	switch {
	case len(m.ctx.Events) == 0:
		b.WriteString("\n" + st.Muted.Render(render.Cut("no events yet: placements, refusals, engines and members joining or failing show here", m.width)))
	case len(rows) == 0:
		b.WriteString("\n" + st.Muted.Render(render.Cut("no event matches (esc clears the filters)", m.width)))
	default:
		height, detail := m.foot()
		shown := m.scroll.Window(m.lines(), height)
		for _, l := range shown {
			b.WriteString("\n" + l)
		}
		for range height - len(shown) {
			b.WriteString("\n")
		}
		if detail != "" {
			b.WriteString("\n" + st.Muted.Render(detail))
		}
	}
	return render.Place(b.String(), m.width, m.height)
}
