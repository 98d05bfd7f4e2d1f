// Package doctor shows the doctor's report: why hosts may be invisible or unusable, as this
// console and every agent see it, grouped by severity, each with what to do about it and who
// saw it.
package doctor

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/render"
	"github.com/llmkube/mesh/tui/styles"
)

// timeout bounds one run: the doctor may dial seeds and agents that do not answer.
const timeout = 15 * time.Second

// Severities (api's), short.
const (
	SevError   = api.SeverityError
	SevWarning = api.SeverityWarning
	SevInfo    = api.SeverityInfo
)

var keyRun = key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "run again"))

// Model is the doctor view.
type Model struct {
	ctx    *common.Context
	width  int
	height int
	scroll common.Scroll

	seq     int
	running bool
	report  *console.Doctor
	at      time.Time // when the report came back
}

// reportMsg carries a finished run; seq drops the answer of a run that a newer one replaced.
type reportMsg struct {
	seq    int
	report console.Doctor
}

// New returns the doctor view; Init runs the doctor once.
func New(ctx *common.Context) *Model { return &Model{ctx: ctx} }

// Init runs the doctor.
func (m *Model) Init() tea.Cmd { return m.run() }

// Open runs the doctor again whenever the view is opened: its findings age quickly.
func (m *Model) Open(string) tea.Cmd { return m.run() }

func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }

func (m *Model) Capturing() bool { return false }

func (m *Model) ShortHelp() []key.Binding {
	k := m.ctx.Keys
	return []key.Binding{keyRun, k.Up, k.Down}
}

// Running reports whether a run is in flight.
func (m *Model) Running() bool { return m.running }

func (m *Model) run() tea.Cmd {
	conn := m.ctx.Conn
	if conn == nil || m.running {
		return nil
	}
	m.seq++
	m.running = true
	seq := m.seq
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return reportMsg{seq: seq, report: conn.Doctor(ctx)}
	}
}

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case reportMsg:
		if msg.seq != m.seq {
			return m, nil
		}
		m.running = false
		r := msg.report
		m.report, m.at = &r, m.ctx.Now()
		m.scroll = common.Scroll{}
	case tea.KeyMsg:
		if key.Matches(msg, keyRun) {
			return m, m.run()
		}
		m.scroll.Update(m.ctx.Keys, msg, len(m.lines()), m.bodyHeight())
	case tea.MouseMsg:
		m.scroll.Update(m.ctx.Keys, msg, len(m.lines()), m.bodyHeight())
	}
	return m, nil
}

// bodyHeight is the rows under the title line, as drawn, and the blank line after it.
func (m *Model) bodyHeight() int { return max(m.height-common.RowsOf(m.titleLine())-1, 1) }

// SeverityStyle colours a severity; its name is always written too.
func SeverityStyle(st *styles.Styles, sev string) lipgloss.Style {
	switch sev {
	case SevError:
		return st.Error
	case SevWarning:
		return st.Warn
	}
	return st.Muted
}

func rank(sev string) int {
	switch sev {
	case SevError:
		return 0
	case SevWarning:
		return 1
	case SevInfo:
		return 2
	}
	return 3
}

var marks = map[string]string{SevError: "✗", SevWarning: "!", SevInfo: "i"}

// Counts sums findings by severity, in words: "1 error · 2 warnings · 1 note".
func Counts(fs []api.Finding) string {
	var e, w, n int
	for _, f := range fs {
		switch f.Severity {
		case SevError:
			e++
		case SevWarning:
			w++
		default:
			n++
		}
	}
	var parts []string
	add := func(k int, one, many string) {
		if k == 1 {
			parts = append(parts, "1 "+one)
		} else if k > 1 {
			parts = append(parts, fmt.Sprintf("%d %s", k, many))
		}
	}
	add(e, "error", "errors")
	add(w, "warning", "warnings")
	add(n, "note", "notes")
	if e+w == 0 {
		parts = append([]string{"no problems found"}, parts...)
	}
	return strings.Join(parts, " · ")
}

// lines renders the report: errors first, each finding's fix under it.
func (m *Model) lines() []string {
	if m.report == nil {
		return nil
	}
	st := m.ctx.Styles
	fs := append([]api.Finding(nil), m.report.Findings...)
	sort.SliceStable(fs, func(i, j int) bool { return rank(fs[i].Severity) < rank(fs[j].Severity) })
	const labelWidth = 11 // "✗ WARNING  "
	textWidth := max(m.width-labelWidth, 20)
	indent := strings.Repeat(" ", labelWidth)
	var out []string
	if len(fs) > 0 && rank(fs[0].Severity) < 2 {
		out = append(out, st.Bold.Render(Counts(fs)), "")
	} else {
		line := st.OK.Render("✓ no problems found") + ": " + m.checked()
		if len(fs) > 0 {
			line += " · " + strings.TrimPrefix(Counts(fs), "no problems found · ")
		}
		out = append(out, render.Cut(line, m.width), "")
	}
	for i, f := range fs {
		if i > 0 {
			out = append(out, "")
		}
		sev := f.Severity
		if sev == "" {
			sev = SevInfo
		}
		mark := marks[sev]
		if mark == "" {
			mark = "?"
		}
		label := SeverityStyle(st, sev).Render(render.Pad(mark+" "+strings.ToUpper(sev), labelWidth-1)) + " "
		problem := f.Problem
		if f.Detail != "" {
			problem += " (" + f.Detail + ")"
		}
		for j, l := range strings.Split(ansi.Wrap(problem, textWidth, " "), "\n") {
			if j == 0 {
				out = append(out, label+l)
			} else {
				out = append(out, indent+l)
			}
		}
		if f.Fix != "" {
			for j, l := range strings.Split(ansi.Wrap("fix: "+f.Fix, textWidth, " "), "\n") {
				if j == 0 {
					out = append(out, indent+st.Bold.Render(l[:4])+l[4:])
				} else {
					out = append(out, indent+"     "+l)
				}
			}
		}
		if len(f.SeenBy) > 0 {
			for _, l := range strings.Split(ansi.Wrap("seen by "+strings.Join(f.SeenBy, ", "), textWidth, " "), "\n") {
				out = append(out, indent+st.Muted.Render(l))
			}
		}
	}
	return out
}

// checked says whose reports a clean bill of health covers.
func (m *Model) checked() string {
	switch n := len(m.report.Agents); {
	case n == 0:
		return "nothing wrong seen here, and no agent's report came back"
	case n == 1:
		return "this console and agent " + m.report.Agents[0] + " saw nothing wrong"
	default:
		return fmt.Sprintf("this console and %d agents saw nothing wrong", n)
	}
}

// titleLine is the view's first line: its title, and how far the check is.
func (m *Model) titleLine() string {
	st := m.ctx.Styles
	head := "Doctor"
	switch {
	case m.ctx.Conn == nil && m.report == nil:
		return st.Title.Render(head)
	case m.report == nil:
		return st.Title.Render(head) + st.Header.Render(" · checking…")
	}
	status := fmt.Sprintf(" · %s mode · checked %s ago", m.report.Mode, ago(m.ctx.Now().Sub(m.at)))
	if m.running {
		status += " · checking again…"
	} else {
		status += " · r runs it again"
	}
	return render.Cut(st.Title.Render(head)+st.Header.Render(status), m.width)
}

func (m *Model) View() string {
	st := m.ctx.Styles
	var b strings.Builder
	b.WriteString(m.titleLine() + "\n\n")
	switch {
	case m.ctx.Conn == nil && m.report == nil:
		b.WriteString(st.Muted.Render(render.Cut("not connected to a mesh: the doctor asks this console's membership and every agent", m.width)))
	case m.report == nil:
		b.WriteString(st.Muted.Render("asking this console's membership and every agent what they see…"))
	default:
		b.WriteString(strings.Join(m.scroll.Window(m.lines(), m.bodyHeight()), "\n"))
	}
	return render.Place(b.String(), m.width, m.height)
}

func ago(d time.Duration) string {
	if d < time.Second {
		return "0s"
	}
	return d.Round(time.Second).String()
}
