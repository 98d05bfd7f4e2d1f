// Package hosts is the console's home: one row per mesh member with its capacity, memory bar,
// models, speed and liveness, under a header that sums the mesh.
package hosts

import (
	"fmt"
	"sort"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/render"
	"github.com/llmkube/mesh/tui/styles"
)

// Sort orders of the table.
const (
	SortName = iota
	SortFree
	SortModels
	sortCount
)

var sortNames = [sortCount]string{"name", "free memory", "models"}

// Model is the hosts view.
type Model struct {
	ctx    *common.Context
	width  int
	height int
	cur    common.Cursor
	sortBy int

	filter common.Filter
}

// New returns the hosts view.
func New(ctx *common.Context) *Model {
	return &Model{ctx: ctx, filter: common.NewFilter(ctx.Styles, "filter by name, chip, engine, model")}
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
		return []key.Binding{key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "apply")), key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear"))}
	}
	return []key.Binding{k.Up, k.Down, k.Open, k.Filter, k.Sort, k.Place}
}

// FullHelp lists every key of the view, for the help view.
func (m *Model) FullHelp() []common.HelpSection {
	k := m.ctx.Keys
	return []common.HelpSection{{Title: "Hosts", Keys: []key.Binding{
		k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom,
		common.As(k.Open, "host details"), k.Filter, common.As(k.Back, "clear the filter"),
		common.As(k.Sort, "sort: name, free memory, models"),
	}}}
}

// Rows are the members shown, filtered and sorted.
func (m *Model) Rows() []api.Member {
	q := m.filter.Query()
	var rows []api.Member
	for _, mb := range m.ctx.Mesh.Members {
		if q == "" || strings.Contains(strings.ToLower(searchText(mb)), q) {
			rows = append(rows, mb)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		// Agents before consoles: consoles hold no models.
		if (a.Role == api.RoleAgent) != (b.Role == api.RoleAgent) {
			return a.Role == api.RoleAgent
		}
		switch m.sortBy {
		case SortFree:
			if fa, fb := free(a), free(b); fa != fb {
				return fa > fb
			}
		case SortModels:
			if la, lb := Held(a), Held(b); la != lb {
				return la > lb
			}
		}
		return a.Name < b.Name
	})
	return rows
}

func free(m api.Member) int64 {
	if m.Host == nil {
		return -1
	}
	return m.Host.Memory.Free()
}

func searchText(m api.Member) string {
	parts := []string{m.Name, string(m.Liveness), string(m.Role)}
	if h := m.Host; h != nil {
		parts = append(parts, h.OS, h.Arch, h.Chip, h.Hostname)
		for _, a := range h.Accelerators {
			parts = append(parts, a.Name)
		}
		for _, e := range h.Engines {
			if e.Present {
				parts = append(parts, string(e.Runtime))
			}
		}
	}
	for _, p := range m.Placements {
		parts = append(parts, p.Model)
	}
	return strings.Join(parts, " ")
}

// Selected is the member under the cursor.
func (m *Model) Selected() (api.Member, bool) {
	rows := m.Rows()
	if m.cur.Pos < 0 || m.cur.Pos >= len(rows) {
		return api.Member{}, false
	}
	return rows[m.cur.Pos], true
}

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	k := m.ctx.Keys
	switch msg := msg.(type) {
	case tea.KeyMsg:
		if m.filter.Active() {
			changed, cmd := m.filter.Key(msg)
			if changed {
				m.cur = common.Cursor{}
			}
			return m, cmd
		}
		n := len(m.Rows())
		if m.cur.Move(k, msg, n, m.tableHeight()) {
			return m, nil
		}
		switch {
		case key.Matches(msg, k.Sort):
			m.sortBy = (m.sortBy + 1) % sortCount
			return m, common.Status("sorted by "+sortNames[m.sortBy], false)
		case key.Matches(msg, k.Filter):
			return m, m.filter.Start()
		case key.Matches(msg, k.Back):
			m.filter.Clear()
		case key.Matches(msg, k.Open):
			if sel, ok := m.Selected(); ok {
				m.ctx.Navigate(common.PageHostDetail, sel.Name)
				return m, nil
			}
		}
		m.cur.Clamp(n, m.tableHeight())
	case tea.MouseMsg:
		n := len(m.Rows())
		if hit, again := m.cur.Click(msg, m.firstRow(), n, m.tableHeight()); hit {
			if sel, ok := m.Selected(); ok && again {
				m.ctx.Navigate(common.PageHostDetail, sel.Name)
				return m, nil
			}
			return m, nil
		}
		m.cur.Move(m.ctx.Keys, msg, n, m.tableHeight())
	case common.MeshMsg:
		m.cur.Clamp(len(m.Rows()), m.tableHeight())
	}
	return m, nil
}

// intro is what the view draws first: the summary, and the legend or the filter.
func (m *Model) intro() string {
	st := m.ctx.Styles
	legend := "sorted by " + sortNames[m.sortBy] + " · █ committed ▓ reserved ░ free budget · outside budget"
	for _, mb := range m.ctx.Mesh.Members {
		if SplitShares(mb) > 0 {
			legend += splitsNote
			break
		}
	}
	second := st.Muted.Render(render.Cut(legend, m.width))
	if m.filter.Shown() {
		second = render.Cut(m.filter.View(), m.width)
	}
	return st.Header.Render(render.Cut(Summary(m.ctx.Mesh, m.width), m.width)) + "\n" + second
}

// firstRow is the line of the first host: under the intro and the column titles, as drawn (the
// titles' height is their style's, whatever the columns).
func (m *Model) firstRow() int { return common.RowsOf(m.intro(), render.Head(m.ctx.Styles, nil)) }

// tableHeight is the number of rows that fit under the intro and the column titles.
func (m *Model) tableHeight() int { return max(m.height-m.firstRow(), 1) }

// Summary is the header line that sums the mesh, in width cells when it can be: the host RAM
// goes first, then the word "budget" (the legend under it says what the bar counts), so the
// memory is read whole at 80 columns rather than cut to "budget u…".
func Summary(v api.MeshView, width int) string {
	var agents, consoles, ready, alerts int
	var committed, budget, total int64
	for _, mb := range v.Members {
		if mb.Role == api.RoleConsole {
			consoles++
			continue
		}
		agents++
		if mb.Liveness != api.Alive {
			alerts++
		}
		if mb.Host != nil && mb.Liveness == api.Alive {
			committed = render.Sum(committed, mb.Host.Memory.Committed, mb.Host.Memory.Reserved)
			budget = render.Sum(budget, mb.Host.Memory.Budget)
			total = render.Sum(total, mb.Host.Memory.Total)
		}
		for _, p := range mb.Placements {
			switch p.State {
			case api.StateReady:
				if p.Part == nil { // a share of a split is not a model: the split is ready once
					ready++
				}
			case api.StateFailed, api.StateRestarting:
				alerts++
			}
		}
	}
	mesh := v.Mesh
	if mesh == "" {
		mesh = "mesh"
	}
	s := fmt.Sprintf("%s · %d agents", mesh, agents)
	if consoles > 0 {
		s += fmt.Sprintf(", %d console", consoles)
		if consoles > 1 {
			s += "s"
		}
	}
	// The alerts come before the memory: a narrow terminal cuts the line's end, and what needs
	// attention must stay in sight.
	switch alerts {
	case 0:
		s += " · no alerts"
	case 1:
		s += " · 1 alert"
	default:
		s += fmt.Sprintf(" · %d alerts", alerts)
	}
	// Nothing held is "0 B", not the "—" of an unknown figure.
	s += fmt.Sprintf(" · %d ready · %s of %s", ready, api.FormatBytes(committed), render.Bytes(budget))
	for _, end := range []string{" budget used (" + render.Bytes(total) + " RAM)", " budget used"} {
		if ansi.StringWidth(s+end) <= width {
			return s + end
		}
	}
	return s + " used"
}

// columns of the hosts table, in order. On a narrow terminal the least telling go first: the
// chip, the speed, the accelerator, the OS; the engines (what can run where) stay longer, and
// the name and the state stay whole.
func columns(st *styles.Styles) []render.Col[api.Member] {
	text := func(f func(api.Member) string) func(api.Member, int) string {
		return func(mb api.Member, _ int) string { return f(mb) }
	}
	return []render.Col[api.Member]{
		{Title: " ", Min: 1, Fixed: 1, Priority: 100, Cell: text(func(api.Member) string { return "" })}, // the cursor, drawn by View
		{Title: "NAME", Min: 8, Priority: 95, Cell: text(func(mb api.Member) string { return mb.Name })},
		{Title: "STATE", Min: 11, Priority: 90, Cell: text(func(mb api.Member) string {
			return st.Liveness(mb.Liveness).Render(string(mb.Liveness))
		})},
		{Title: "OS/ARCH", Min: 7, Priority: 50, Cell: text(osArch)},
		{Title: "CHIP", Min: 8, Max: 24, Priority: 10, Cell: text(func(mb api.Member) string {
			if mb.Host == nil {
				return ""
			}
			return mb.Host.Chip
		})},
		{Title: "ACCEL", Min: 5, Max: 16, Priority: 40, Cell: text(accel)},
		{Title: "ENGINES", Min: 7, Max: 28, Priority: 55, Cell: text(engines)},
		{Title: "MEMORY", Min: 8, Max: 24, Fixed: 12, Priority: 80, Cell: func(mb api.Member, w int) string {
			if h := mb.Host; h != nil {
				return render.MemBar(st, w, h.Memory.Committed, h.Memory.Reserved, h.Memory.Budget, h.Memory.Total)
			}
			return ""
		}},
		{Title: "FREE", Min: 8, Priority: 85, Right: true, Cell: text(func(mb api.Member) string {
			if mb.Host == nil {
				return ""
			}
			return render.Bytes(mb.Host.Memory.Free())
		})},
		{Title: "MODELS", Min: 6, Priority: 70, Right: true, Cell: text(func(mb api.Member) string {
			if mb.Role != api.RoleAgent {
				return ""
			}
			if n := SplitShares(mb); n > 0 {
				return fmt.Sprintf("%d +%ds", Held(mb), n)
			}
			return fmt.Sprint(Held(mb))
		})},
		{Title: "TOK/S", Min: 5, Priority: 30, Right: true, Cell: text(tokS)},
	}
}

func osArch(mb api.Member) string {
	if mb.Role == api.RoleConsole {
		return "console"
	}
	if mb.Host == nil {
		return ""
	}
	return mb.Host.OS + "/" + mb.Host.Arch
}

func accel(mb api.Member) string {
	var names []string
	if h := mb.Host; h != nil {
		for _, a := range h.Accelerators {
			names = append(names, a.Name)
		}
	}
	if len(names) == 0 && mb.Role == api.RoleAgent {
		return "—"
	}
	return strings.Join(names, ",")
}

func engines(mb api.Member) string {
	var names []string
	if h := mb.Host; h != nil {
		for _, e := range h.Engines {
			if e.Present {
				n := string(e.Runtime)
				if !e.Healthy {
					n += "!"
				}
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 && mb.Role == api.RoleAgent {
		return "—"
	}
	return strings.Join(names, ",")
}

func tokS(mb api.Member) string {
	if mb.Role != api.RoleAgent {
		return ""
	}
	var best float64
	for _, p := range mb.Placements {
		best = max(best, p.TokensPerS)
	}
	return strings.TrimSuffix(render.Speed(best), " tok/s")
}

func (m *Model) View() string {
	st := m.ctx.Styles
	var b strings.Builder
	b.WriteString(m.intro())
	b.WriteString("\n")
	rows := m.Rows()
	if len(m.ctx.Mesh.Members) == 0 || countAgents(m.ctx.Mesh) == 0 {
		b.WriteString(emptyState(m.ctx))
		return render.Place(b.String(), m.width, m.height)
	}
	// Sized over every row shown or not, so widths do not change as the list scrolls.
	cols, kept := render.LayoutRows(columns(st), rows, m.width)
	b.WriteString(render.Head(st, cols))
	end := min(m.cur.Offset+m.tableHeight(), len(rows))
	for i := m.cur.Offset; i < end; i++ {
		cells := render.Cells(cols, kept, rows[i])
		if i == m.cur.Pos && len(cells) > 0 && kept[0].Title == " " {
			cells[0] = "›" // the cursor is marked in text too: reverse video is lost without colour
		}
		line := render.Row(cols, cells)
		b.WriteString("\n")
		if i == m.cur.Pos {
			b.WriteString(st.SelectedRow(line, m.width))
		} else {
			b.WriteString(line)
		}
	}
	if len(rows) == 0 {
		b.WriteString("\n" + st.Muted.Render("no host matches the filter (esc clears it)"))
	}
	return render.Place(b.String(), m.width, m.height)
}

func countAgents(v api.MeshView) int {
	n := 0
	for _, m := range v.Members {
		if m.Role == api.RoleAgent {
			n++
		}
	}
	return n
}

func emptyState(ctx *common.Context) string {
	st := ctx.Styles
	lines := []string{
		"",
		st.Bold.Render("No agents in sight yet."),
		"",
		"  • Start an agent on a host:   llmkube-agent run --join-string \"$LLMKUBE_JOIN\"",
		"  • Or join one by address:     llmkube-tui --join-string … --join 10.0.0.5:7946",
		"  • Ask why peers are invisible: press 6 for the doctor",
		"  • Or try it all locally:      make demo (llmkube-demo)",
	}
	if ctx.Conn != nil && ctx.Conn.Mode() == console.ModeAgent {
		lines = append(lines, "", st.Muted.Render("Watching through one agent's API: its view has no agents yet."))
	}
	return strings.Join(lines, "\n")
}

// Held counts the models a member holds: an evicted or failed placement stays listed (in
// Models, to place again) but holds nothing, so a Hailo-10H that swapped twice shows one. A
// member's share of a split (a part) is not a model: SplitShares counts those.
func Held(mb api.Member) int {
	n := 0
	for _, p := range mb.Placements {
		if !p.State.Terminal() && p.Part == nil {
			n++
		}
	}
	return n
}

// SplitShares counts the splits a member holds a share of (its parts: an rpc-server each).
func SplitShares(mb api.Member) int {
	n := 0
	for _, p := range mb.Placements {
		if !p.State.Terminal() && p.Part != nil {
			n++
		}
	}
	return n
}

// splitsNote is the legend of the MODELS column's "+Ns", when a host shows one.
const splitsNote = " · +Ns: shares of N splits"
