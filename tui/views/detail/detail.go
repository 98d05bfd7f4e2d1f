// Package detail is one host up close: its memory over the last minutes as a chart sampled
// live, its engines and their health, its placements with their memory, what hwprobe found,
// its recent events, and where its engines' logs are.
package detail

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/render"
	"github.com/llmkube/mesh/tui/views/events"
)

// axisWidth is the room left of the chart for its scale ("32.0 GiB ┤").
const axisWidth = 10

// maxEvents is how many of the host's recent events the view lists.
const maxEvents = 6

// Model is the host detail view.
type Model struct {
	ctx    *common.Context
	width  int
	height int
	host   string
	scroll common.Scroll

	// Engine log tails, fetched from the host's agent; logSeq drops answers for a host no
	// longer shown.
	logSeq  int
	tails   map[string]string // placement id → tail
	logErr  error
	logTick int
}

// Log tails: how much is asked of the agent, how many lines are shown per engine, and how often
// (in console ticks) they are fetched again while the detail is open.
const (
	logBytes   = 4096
	logLines   = 8
	logEvery   = 5
	logTimeout = 3 * time.Second
)

// logsMsg carries the engine log tails of one host.
type logsMsg struct {
	seq   int
	tails map[string]string
	err   error
}

// New returns the host detail view; Open says which host.
func New(ctx *common.Context) *Model { return &Model{ctx: ctx} }

func (m *Model) Init() tea.Cmd { return nil }

// Open shows host (a member's name) from the top; "" shows the host shown last. Everything it
// shows is in the shared context already, so opening needs no I/O.
func (m *Model) Open(host string) tea.Cmd {
	if host == "" {
		return nil
	}
	m.host = host
	m.scroll = common.Scroll{}
	m.tails, m.logErr = nil, nil
	return m.fetchLogs()
}

// fetchLogs asks the host's agent for the tail of each engine log it keeps (llama-server's; the
// daemons keep their own), in a command.
func (m *Model) fetchLogs() tea.Cmd {
	mb, ok := m.member()
	conn := m.ctx.Conn
	if !ok || conn == nil {
		return nil
	}
	var ids []string
	for _, p := range mb.Placements {
		if p.LogPath != "" {
			ids = append(ids, p.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	m.logSeq++
	seq, host := m.logSeq, mb.Name
	return func() tea.Msg {
		tails := map[string]string{}
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
			tail, err := conn.PlacementLog(ctx, host, id, logBytes)
			cancel()
			if err != nil {
				return logsMsg{seq: seq, err: err}
			}
			tails[id] = tail
		}
		return logsMsg{seq: seq, tails: tails}
	}
}

// Host is the member shown.
func (m *Model) Host() string { return m.host }

func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }

func (m *Model) Capturing() bool { return false }

func (m *Model) ShortHelp() []key.Binding {
	k := m.ctx.Keys
	return []key.Binding{k.Up, k.Down, k.PageDown, k.Back}
}

// FullHelp lists every key of the view, for the help view.
func (m *Model) FullHelp() []common.HelpSection {
	k := m.ctx.Keys
	return []common.HelpSection{{Title: "Host", Keys: []key.Binding{
		common.As(k.Up, "scroll up"), common.As(k.Down, "scroll down"), k.PageUp, k.PageDown, k.Top, k.Bottom,
		common.As(k.Back, "back to the list"),
	}}}
}

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		// esc (back) is the root's: it returns to the page the detail was opened from.
		m.scroll.Update(m.ctx.Keys, msg, len(m.body()), m.bodyHeight())
	case tea.MouseMsg:
		m.scroll.Update(m.ctx.Keys, msg, len(m.body()), m.bodyHeight())
	case logsMsg:
		if msg.seq == m.logSeq {
			m.tails, m.logErr = msg.tails, msg.err
		}
	case common.TickMsg:
		if m.logTick++; m.host != "" && m.logTick%logEvery == 0 {
			return m, m.fetchLogs()
		}
	}
	// Mesh updates and memory samples (common.MeshMsg, common.TickMsg) reach the context
	// through the root; the next render draws them.
	return m, nil
}

func (m *Model) member() (api.Member, bool) {
	for _, mb := range m.ctx.Mesh.Members {
		if mb.Name == m.host {
			return mb, true
		}
	}
	return api.Member{}, false
}

// bodyHeight is the rows under the header, as drawn, and the blank line after it.
func (m *Model) bodyHeight() int {
	mb, _ := m.member()
	return max(m.height-common.RowsOf(m.header(mb))-1, 1)
}

// chartHeight grows with the terminal: the chart is the first thing to read.
func (m *Model) chartHeight() int {
	switch {
	case m.height >= 32:
		return 8
	case m.height >= 22:
		return 5
	}
	return 3
}

func (m *Model) header(mb api.Member) string {
	st := m.ctx.Styles
	parts := []string{st.Title.Render(mb.Name), st.Liveness(mb.Liveness).Render(string(mb.Liveness))}
	if mb.Reason != "" {
		parts[1] += st.Liveness(mb.Liveness).Render(" (" + mb.Reason + ")")
	}
	if h := mb.Host; h != nil {
		parts = append(parts, h.OS+"/"+h.Arch)
		if h.Version != "" {
			parts = append(parts, "agent "+h.Version)
		}
		if !h.StartedAt.IsZero() {
			parts = append(parts, "up "+render.Ago(m.ctx.Now(), h.StartedAt))
		}
		if h.APIAddr != "" {
			parts = append(parts, "api "+h.APIAddr)
		}
	} else if mb.Role == api.RoleConsole {
		parts = append(parts, "console")
	}
	return render.Cut(strings.Join(parts, " · "), m.width)
}

func (m *Model) section(title string) string {
	return m.ctx.Styles.BoxTitle.Render(title)
}

// body is every line under the header; the view scrolls over it.
func (m *Model) body() []string {
	mb, ok := m.member()
	if !ok {
		return nil
	}
	var out []string
	add := func(lines ...string) { out = append(out, lines...) }
	if mb.Host == nil {
		if mb.Role == api.RoleConsole {
			add("", "A console: it watches the mesh and holds no models.")
		} else {
			add("", "No state from this host yet: it has joined but not sent its capacity.")
		}
		return append(out, m.events(mb)...)
	}
	add(m.memory(mb.Name, mb.Host)...)
	add("")
	add(m.engines(mb.Host)...)
	add("")
	add(m.placements(mb)...)
	add("")
	add(m.hardware(mb.Host)...)
	add("")
	add(m.events(mb)...)
	add("")
	add(m.logs(mb)...)
	return out
}

func (m *Model) memory(name string, h *api.Host) []string {
	st := m.ctx.Styles
	mem := h.Memory
	var samples []common.Sample
	if m.ctx.Memory != nil {
		samples = m.ctx.Memory.Of(name)
	}
	title := "MEMORY"
	if len(samples) > 1 {
		title += " · last " + span(samples[len(samples)-1].At.Sub(samples[0].At))
	}
	out := []string{m.section(title)}
	width := max(m.width-axisWidth, 10)
	if len(samples) == 0 {
		out = append(out, st.Muted.Render("  sampling: the chart fills in as readings arrive, one a second"))
	} else {
		held := make([]float64, len(samples))
		avail := make([]float64, len(samples))
		var top int64
		for i, s := range samples {
			held[i] = float64(render.Sum(s.Committed, s.Reserved))
			avail[i] = float64(s.Available)
			top = max(top, s.Total)
		}
		last := samples[len(samples)-1]
		rows := render.AreaChart(st, render.Downsample(held, width), float64(top), float64(last.Budget), width, m.chartHeight())
		for i, r := range rows {
			label, tick := "", " │"
			switch i {
			case 0:
				label, tick = render.Bytes(top), " ┤"
			case len(rows) - 1:
				label, tick = "0", " ┤"
			}
			out = append(out, st.Muted.Render(render.PadLeft(label, axisWidth-2)+tick)+r)
		}
		// The time axis starts where the data does: a young history fills only the right part.
		cols := len(render.Downsample(held, width))
		left := span(last.At.Sub(samples[0].At)) + " ago"
		axis := strings.Repeat(" ", axisWidth+width-cols)
		if cols-3 > len(left) {
			axis += st.Muted.Render(render.Pad(left, cols-3) + "now")
		} else {
			axis = strings.Repeat(" ", axisWidth) + st.Muted.Render(render.PadLeft("now", width))
		}
		out = append(out, axis)
		out = append(out, strings.Repeat(" ", axisWidth)+st.Muted.Render("available ")+
			render.Sparkline(st, render.Downsample(avail, width-10), 0, float64(top), width-10))
	}
	out = append(out, m.pack(fmt.Sprintf("held %s (committed %s + reserved %s)", size(render.Sum(mem.Committed, mem.Reserved)), size(mem.Committed), size(mem.Reserved)),
		"budget "+size(mem.Budget), "free "+size(mem.Free()))...)
	out = append(out, render.Cut(fmt.Sprintf("  available %s · total %s · ", size(mem.Available), size(mem.Total))+
		st.BarUsed.Render("█")+" held  "+st.Muted.Render("┄")+" budget", m.width))
	for _, a := range h.Accelerators {
		if a.Kind == "hailo" && a.Loaded != "" {
			out = append(out, m.para(fmt.Sprintf("%s runs on the %s in its own %s: not counted here", a.Loaded, a.Name, size(a.Memory)))...)
		}
	}
	return out
}

// size is a size where zero is a real reading ("0 B"), not an unknown one.
func size(b int64) string {
	if b == 0 {
		return "0 B"
	}
	return render.Bytes(b)
}

// span says a duration the way the chart's title reads: "42s", "5m", "1h10m".
func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Round(time.Minute).Minutes()))
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

var engineCols = []render.Column{{Title: "RUNTIME", Width: 12}, {Title: "STATE", Width: 9}, {Title: "VERSION", Width: 8}, {Title: "WHERE · DETAIL"}}

func (m *Model) engines(h *api.Host) []string {
	st := m.ctx.Styles
	cols := render.Fit(engineCols, m.width-2, 10)
	out := []string{m.section("ENGINES"), "  " + render.Head(st, cols)}
	if len(h.Engines) == 0 {
		return append(out, st.Muted.Render("  no engine reported"))
	}
	for _, e := range h.Engines {
		state := st.Muted.Render("absent")
		switch {
		case e.Present && e.Healthy:
			state = st.OK.Render("healthy")
		case e.Present:
			state = st.Error.Render("unhealthy")
		}
		var where []string
		if e.Address != "" {
			where = append(where, e.Address)
		}
		if e.Detail != "" {
			where = append(where, e.Detail)
		}
		if n := len(e.Models); n > 0 {
			what := "local tags"
			if e.Runtime == api.RuntimeHailoOllama {
				what = "in the zoo"
			}
			where = append(where, fmt.Sprintf("%d models %s", n, what))
		}
		version := e.Version
		if version == "" {
			version = "—"
		}
		detail := m.wrap(strings.Join(where, " · "), m.width-cols[len(cols)-1].Width)
		out = append(out, "  "+render.Row(cols, []string{string(e.Runtime), state, version, detail[0]}))
		out = append(out, detail[1:]...)
	}
	return out
}

var placementCols = []render.Column{{Title: "MODEL"}, {Title: "RUNTIME", Width: 12}, {Title: "STATE", Width: 12}, {Title: "MEMORY", Width: 20}, {Title: "TTFT", Width: 7, Right: true}, {Title: "SPEED", Width: 10, Right: true}}

func (m *Model) placements(mb api.Member) []string {
	st := m.ctx.Styles
	cols := placementCols
	if m.width < 100 {
		cols = append(cols[:4:4], cols[5]) // the model's name matters more than its latency
	}
	cols = render.Fit(cols, m.width-2, 12)
	out := []string{m.section(fmt.Sprintf("PLACEMENTS · %d", len(mb.Placements)))}
	if len(mb.Placements) == 0 {
		return append(out, st.Muted.Render("  none: press p to place a model"))
	}
	out = append(out, "  "+render.Head(st, cols))
	for _, p := range mb.Placements {
		state := string(p.State)
		if p.State == api.StatePulling {
			state = fmt.Sprintf("pulling %d%%", int(p.Progress*100+0.5))
		}
		memory := render.Bytes(p.Memory.Bytes)
		if p.Memory.Device == api.DeviceHailo {
			memory += " on Hailo-10H"
		} else if p.Memory.Method != "" {
			memory += " by " + p.Memory.Method
		}
		cells := []string{modelCell(p), string(p.Runtime), st.State(p.State).Render(render.Cut(state, 12)), memory, render.Millis(p.TTFTMillis), render.Speed(p.TokensPerS)}
		if len(cols) < len(placementCols) {
			cells = append(cells[:4:4], cells[5])
		}
		out = append(out, "  "+render.Row(cols, cells))
	}
	return out
}

func (m *Model) hardware(h *api.Host) []string {
	st := m.ctx.Styles
	out := []string{m.section("HARDWARE · what hwprobe found")}
	kv := func(k, v string) {
		lines := m.wrap(v, 2+13)
		out = append(out, "  "+st.Muted.Render(render.Pad(k, 13))+lines[0])
		out = append(out, lines[1:]...)
	}
	orUnknown := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	kv("chip", orUnknown(h.Chip))
	kv("CPUs", fmt.Sprint(h.CPUs))
	page := "unknown"
	if h.PageSize > 0 {
		page = render.Bytes(int64(h.PageSize))
	}
	kv("page size", page)
	limit := "none"
	if h.Memory.CgroupLimit > 0 {
		limit = render.Bytes(h.Memory.CgroupLimit)
	}
	if h.Memory.HostFigures {
		limit += " (cgroup v1: the figures are the host's)"
	}
	kv("cgroup limit", limit)
	if h.OnBattery {
		// Shown only then: most hosts have no battery, and intents kept off battery avoid it.
		kv("power", st.Warn.Render("on battery"))
	}
	kv("hostname", orUnknown(h.Hostname))
	if len(h.Accelerators) == 0 {
		kv("accelerator", "none")
	}
	for _, a := range h.Accelerators {
		parts := []string{a.Name}
		if a.Device != "" {
			parts = append(parts, a.Device)
		}
		if a.Memory > 0 {
			parts = append(parts, render.Bytes(a.Memory))
		}
		if a.Kind == "hailo" {
			loaded := "nothing loaded"
			if a.Loaded != "" {
				loaded = "loaded: " + a.Loaded
			}
			parts = append(parts, loaded)
		}
		kv("accelerator", strings.Join(parts, " · "))
	}
	ns := "any"
	if len(h.Namespaces) > 0 {
		ns = strings.Join(h.Namespaces, ", ")
	}
	kv("namespaces", ns)
	if h.Anonymous != "" {
		// Opt-in on the agent, so shown only when on, and loudly.
		kv("anonymous", st.Warn.Render("on: listing and chat without a token, as namespace "+h.Anonymous))
	}
	if len(h.Unknown) > 0 {
		kv("not read", st.Warn.Render(strings.Join(h.Unknown, ", ")))
	}
	return out
}

func (m *Model) events(mb api.Member) []string {
	st := m.ctx.Styles
	var evs []api.Event
	for _, e := range m.ctx.Events {
		if e.Host == mb.Name || e.Member == mb.Name {
			evs = append(evs, e)
		}
	}
	if len(evs) > maxEvents {
		evs = evs[len(evs)-maxEvents:]
	}
	out := []string{m.section("RECENT EVENTS")}
	if len(evs) == 0 {
		return append(out, st.Muted.Render("  none since the console started"))
	}
	loc := m.ctx.Now().Location()
	const indent = 2 + 8 + 1 + 9 + 1 // the message's column, after the time and the type
	for _, e := range evs {
		text := m.wrap(events.Text(e), indent)
		out = append(out, "  "+st.Muted.Render(e.Time.In(loc).Format("15:04:05"))+" "+render.Pad(e.Type, 9)+" "+text[0])
		out = append(out, text[1:]...)
	}
	return out
}

// wrap is text wrapped to start in column indent, whole: its first line, to follow what is
// before that column, and the lines under it, indented.
func (m *Model) wrap(text string, indent int) []string {
	lines := strings.Split(ansi.Wrap(text, max(m.width-indent, 20), " "), "\n")
	for i := 1; i < len(lines); i++ {
		lines[i] = strings.Repeat(" ", indent) + lines[i]
	}
	return lines
}

// pack lays parts out as " · " does on a line, each part whole: a part that would pass the
// width starts the next line (a size is never parted from its unit).
func (m *Model) pack(parts ...string) []string {
	lines := []string{"  " + parts[0]}
	for _, p := range parts[1:] {
		if last := len(lines) - 1; ansi.StringWidth(lines[last]+" · "+p) <= m.width {
			lines[last] += " · " + p
		} else {
			lines = append(lines, "  "+p)
		}
	}
	return lines
}

// para is text as a paragraph of the view: wrapped, every line indented by two.
func (m *Model) para(text string) []string {
	lines := m.wrap(text, 2)
	lines[0] = "  " + lines[0]
	return lines
}

// logs shows the tail of each engine log the host's agent keeps, fetched through its API.
func (m *Model) logs(mb api.Member) []string {
	st := m.ctx.Styles
	out := []string{m.section("ENGINE LOGS")}
	n := 0
	for _, p := range mb.Placements {
		if p.LogPath == "" {
			continue
		}
		n++
		out = append(out, render.Cut("  "+st.Bold.Render(p.Model)+st.Muted.Render(" · "+p.LogPath), m.width))
		tail, ok := m.tails[p.ID]
		if !ok {
			continue
		}
		lines := strings.Split(strings.TrimRight(tail, "\n"), "\n")
		if len(lines) > logLines {
			lines = lines[len(lines)-logLines:]
		}
		for _, l := range lines {
			out = append(out, st.Muted.Render(render.Cut("    "+ansi.Strip(l), m.width)))
		}
	}
	if n == 0 {
		for _, l := range m.para("no engine log kept by the agent (the Ollama and hailo-ollama daemons keep their own)") {
			out = append(out, st.Muted.Render(l))
		}
	}
	if m.logErr != nil {
		out = append(out, st.Error.Render(render.Cut("  could not read the logs: "+m.logErr.Error(), m.width)))
	}
	return out
}

func (m *Model) View() string {
	st := m.ctx.Styles
	mb, ok := m.member()
	if !ok {
		msg := "no host chosen: pick one in Hosts (1) and press enter"
		if m.host != "" {
			msg = m.host + " is not in the mesh (any more): it left or was never seen · esc goes back"
		}
		return render.Place(st.Muted.Render(render.Cut(msg, m.width)), m.width, m.height)
	}
	var b strings.Builder
	b.WriteString(m.header(mb))
	b.WriteString("\n")
	for _, l := range m.scroll.Window(m.body(), m.bodyHeight()) {
		b.WriteString("\n" + l)
	}
	return render.Place(b.String(), m.width, m.height)
}
