package place

import (
	"errors"
	"fmt"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/render"
)

// labelWidth is the room for the field names left of the inputs.
const labelWidth = 12

var hostCols = []render.Column{{Title: "VERDICT", Width: 7}, {Title: "HOST", Width: 10}, {Title: "", Width: 4}, {Title: "REASON"}}

func (m *Model) label(name string, field int) string {
	st := m.ctx.Styles
	if m.focus == field && !m.placing && m.placement == nil && m.placeErr == nil {
		return st.Prompt.Render(render.Pad("› "+name, labelWidth))
	}
	return st.Muted.Render(render.Pad("  "+name, labelWidth))
}

func (m *Model) View() string {
	lines, _ := m.screen()
	return render.Place(strings.Join(lines, "\n"), m.width, m.height)
}

// hostRows is where the ranked hosts are on screen: the line of the first one shown, the host
// each line after it belongs to (none shown: empty), and how many hosts the list has room for.
type hostRows struct {
	top   int
	owner []int
	rows  int
}

// screen draws the view's lines and says where its ranked hosts are, for clicks.
func (m *Model) screen() ([]string, hostRows) {
	st := m.ctx.Styles
	var lines []string
	add := func(l ...string) { lines = append(lines, l...) }

	mode := "best fit: the tightest host first · ctrl+s spreads"
	if m.spread {
		mode = "spread: the host with the most room first · ctrl+s for best fit"
	}
	add(render.Cut(st.Title.Render("Place a model")+st.Muted.Render(" · "+mode), m.width))
	add(render.Cut(m.label("source", fieldSource)+m.inputs[fieldSource].View(), m.width))
	// Why the form is not a request yet, under the fields and whole: the validator's words
	// name what to type ("no tag; hailo sources name a model and its tag…").
	fieldError := func(err error) {
		for _, l := range strings.Split(ansi.Wrap(err.Error(), max(m.width-labelWidth, 20), " "), "\n") {
			add(st.Error.Render(strings.Repeat(" ", labelWidth) + l))
		}
	}
	if m.srcErr != nil {
		fieldError(m.srcErr)
	}
	if m.focus == fieldSource && !m.placing && m.placement == nil && m.placeErr == nil {
		add(m.suggestionLines()...)
	}
	rt, inferred := m.Runtime()
	rtText := string(rt)
	switch {
	case inferred && !LooksLikeSource(strings.TrimSpace(m.inputs[fieldSource].Value())):
		rtText = st.Muted.Render("inferred from the source · ctrl+r chooses")
	case inferred:
		scheme := "a GGUF source"
		if i := strings.Index(m.inputs[fieldSource].Value(), "://"); i > 0 && rt != api.RuntimeLlamaServer {
			scheme = strings.ToLower(m.inputs[fieldSource].Value()[:i+3])
		}
		rtText += st.Muted.Render(" (from " + scheme + ") · ctrl+r chooses")
	default:
		rtText += st.Muted.Render(" (chosen) · ctrl+r changes")
	}
	add(render.Cut(m.label("runtime", -1)+rtText, m.width))
	add(render.Cut(m.label("namespace", fieldNamespace)+m.inputs[fieldNamespace].View()+" "+
		m.label("context", fieldContext)+m.inputs[fieldContext].View()+" "+
		m.label("priority", fieldPriority)+m.inputs[fieldPriority].View(), m.width))
	if _, err := m.Request(); err != nil && !errors.Is(err, errIncomplete) {
		fieldError(err)
	}
	add("")
	if (m.focus == fieldOut || (m.focus == fieldHosts && !m.choosable())) && !m.placing && m.placement == nil && m.placeErr == nil {
		// Out of the form with nothing chosen: say where the keys go, so none is a surprise.
		out := "› out of the form: the keys are the console's · enter edits the form"
		if m.focus == fieldOut && m.choosable() {
			out = "› out of the form: the keys are the console's · enter edits it · ↓ the hosts"
		}
		add(st.Prompt.Render(render.Cut(out, m.width)))
	}
	var where hostRows
	if m.placing || m.placement != nil || m.placeErr != nil {
		add(m.progressLines()...)
	} else {
		above := common.RowsOf(strings.Join(lines, "\n")) // as drawn: a line may take more than one row
		ranking, w := m.rankingLines(m.height - above)
		where = w
		where.top += above
		add(ranking...)
	}
	return lines, where
}

func (m *Model) suggestionLines() []string {
	st := m.ctx.Styles
	sugg := m.Suggestions()
	if len(sugg) == 0 {
		return nil
	}
	n := 3
	if m.height >= 30 {
		n = 5
	}
	// The highlighted one stays in sight; none highlighted shows the first ones.
	m.suggCur.Pos = max(m.sugg, 0)
	m.suggCur.Clamp(len(sugg), n)
	start := m.suggCur.Offset
	end := min(start+n, len(sugg))
	var out []string
	indent := strings.Repeat(" ", labelWidth)
	for i := start; i < end; i++ {
		s := sugg[i]
		mark := "  "
		// A long path loses its middle, never its file name: three GGUF files in one folder
		// would otherwise look the same.
		room := m.width - labelWidth - len(mark) - 2 - ansi.StringWidth(s.Note)
		if room < 24 {
			room = m.width - labelWidth - len(mark) // the note gives way
		}
		text := cutSource(s.Source, room)
		if i == m.sugg {
			mark = "> "
			text = st.Selected.Render(text)
		}
		out = append(out, render.Cut(indent+mark+text+"  "+st.Muted.Render(s.Note), m.width))
	}
	more := len(sugg) - end
	hint := "↓ picks a suggestion, tab completes it"
	if len(sugg) == 1 && m.sugg < 0 && m.inputs[fieldSource].Value() != "" {
		hint = "tab completes it"
	}
	if more > 0 {
		hint = fmt.Sprintf("%d more · ", more) + hint
	}
	return append(out, st.Muted.Render(render.Cut(indent+"  "+hint, m.width)))
}

// cutSource fits a source in width cells by taking out its middle: its scheme and its end (the
// file's name) stay, so sources in one deep folder stay told apart.
func cutSource(src string, width int) string {
	head := 1 // an absolute path's "/"
	if n := strings.Index(src, "://"); n >= 0 {
		head = n + 3
	}
	return render.CutMiddle(src, head, width)
}

func (m *Model) rankingLines(room int) ([]string, hostRows) {
	st := m.ctx.Styles
	var out []string
	req, reqErr := m.Request()
	switch {
	case errors.Is(reqErr, errIncomplete):
		out = append(out, st.Muted.Render(render.Cut("Type a source or pick one: every host is ranked for it here as you type.", m.width)))
		if req.Source != "" && m.srcErr == nil {
			for _, l := range strings.Split(ansi.Wrap(errIncomplete.Error(), max(m.width-2, 20), " "), "\n") {
				out = append(out, st.Muted.Render("  "+l))
			}
		}
		return out, hostRows{}
	case reqErr != nil:
		return nil, hostRows{}
	case m.sizing:
		return []string{st.Muted.Render(render.Cut("sizing "+req.Source+"…", m.width))}, hostRows{}
	case m.rankErr != nil:
		out = append(out, m.errorLines("cannot size it", m.rankErr)...)
		return out, hostRows{}
	case m.estimate == nil:
		return nil, hostRows{}
	}
	if m.estimate.SizeError != "" {
		// The cause is the point: wrapped, never cut.
		out = append(out, strings.Split(ansi.Wrap(Estimate(*m.estimate), max(m.width, 20), " "), "\n")...)
	} else {
		out = append(out, render.Cut(Estimate(*m.estimate), m.width))
	}
	if d := Breakdown(m.estimate.Estimate); d != "" {
		// Wrapped: its last part (often the overhead, the largest) is what a cut would lose.
		for _, l := range strings.Split(ansi.Wrap(d, max(m.width-2, 20), " "), "\n") {
			out = append(out, st.Muted.Render("  "+l))
		}
	}
	if m.showsSplit() {
		return append(out, m.splitLines()...), hostRows{}
	}
	if len(m.hosts) == 0 {
		return append(out, st.Muted.Render("no agent in the mesh to rank")), hostRows{}
	}
	cols := render.Fit(hostCols, m.width-2, 12)
	out = append(out, "  "+render.Head(st, cols))
	// The lines under the hosts: why none can take it, and a swap's question.
	var under []string
	if hint := Hint(m.hosts); hint != "" {
		for _, l := range strings.Split(ansi.Wrap("no host can take it: "+hint, max(m.width, 20), " "), "\n") {
			under = append(under, st.Warn.Render(l))
		}
	}
	if p := m.plan; p != nil && !p.Fits && noneFits(m.hosts) {
		// The split was the other way: why it is not one either (ctrl+t shows its arithmetic).
		under = append(under, st.Muted.Render(render.Cut("nor split across hosts (ctrl+t): "+api.Printable(strings.TrimPrefix(p.Reason, "refused: ")), m.width)))
	}
	if h := m.swapping; h != nil {
		// The question first, uncut by what follows it: then what the swap costs (how long
		// nothing answers, a release's defect), a line each.
		what, costs, _ := strings.Cut(trimVerdict(*h), "; ")
		under = append(under, st.Danger.Render(render.Cut(fmt.Sprintf("place on %s? it %s (y/n)", h.Host, what), m.width)))
		for c := range strings.SplitSeq(costs, "; ") {
			if c != "" {
				under = append(under, st.Warn.Render(render.Cut("  "+c, m.width)))
			}
		}
	}
	// The current host's reason (the one chosen, or the best) is wrapped under its row, whole:
	// it is the one the person reads, and a swap's or a refusal's cause is in its tail.
	reasonWidth := cols[len(cols)-1].Width
	m.hostCur.Pos = max(0, min(m.hostCur.Pos, len(m.hosts)-1))
	current := strings.Split(ansi.Wrap(trimVerdict(m.hosts[m.hostCur.Pos]), reasonWidth, " "), "\n")
	head := common.RowsOf(strings.Join(out, "\n"))
	rows := room - head - (len(current) - 1)
	if len(under) > 0 {
		rows -= common.RowsOf(strings.Join(under, "\n"))
	}
	rows = max(rows, 1)
	m.hostCur.Clamp(len(m.hosts), rows) // the ranking may have changed since the last key
	start := m.hostCur.Offset
	best := m.bestIndex()
	where := hostRows{top: head, rows: rows}
	indent := strings.Repeat(" ", max(m.width-reasonWidth, 0))
	for i := start; i < min(start+rows, len(m.hosts)); i++ {
		h := m.hosts[i]
		tag := ""
		switch {
		case h.Runs != "":
			tag = "runs" // not the best place for it: it is there already (its reason says so)
		case i == best && h.Verdict != api.VerdictRefused:
			tag = "best"
		}
		reason := []string{trimVerdict(h)}
		if i == m.hostCur.Pos {
			reason = current
		}
		line := render.Row(cols, []string{st.Verdict(h.Verdict).Render(string(h.Verdict)), h.Host, tag, reason[0]})
		selected := m.focus == fieldHosts && i == m.hostCur.Pos
		if selected {
			line = "> " + st.SelectedRow(line, m.width-2)
		} else {
			line = "  " + line
		}
		out = append(out, line)
		where.owner = append(where.owner, i)
		for _, r := range reason[1:] {
			line := indent + r
			if selected {
				line = "  " + st.SelectedRow(line[2:], m.width-2)
			}
			out = append(out, line)
			where.owner = append(where.owner, i)
		}
	}
	return append(out, under...), where
}

var splitCols = []render.Column{{Title: "HOST", Width: 12}, {Title: "ROLE", Width: 6}, {Title: "LAYERS", Width: 6, Right: true},
	{Title: "WEIGHTS", Width: 9, Right: true}, {Title: "KV", Width: 9, Right: true}, {Title: "COMPUTE", Width: 9, Right: true},
	{Title: "NEED", Width: 9, Right: true}, {Title: "FREE", Width: 9, Right: true}}

// splitLines are the split plan: what it is and how fast, each member's share against its
// budget, the hosts left out and why, and what enter does.
func (m *Model) splitLines() []string {
	st := m.ctx.Styles
	p := m.plan
	var out []string
	wrap := func(style func(...string) string, text string) {
		for _, l := range strings.Split(ansi.Wrap(api.Printable(text), max(m.width-2, 20), " "), "\n") {
			out = append(out, style("  "+l))
		}
	}
	if noneFits(m.hosts) {
		out = append(out, st.Warn.Render(render.Cut("no host holds it alone · a split across hosts (llama.cpp RPC):", m.width)))
	} else {
		out = append(out, st.Muted.Render(render.Cut("split across hosts (llama.cpp RPC) · ctrl+t: the hosts for the whole model", m.width)))
	}
	if !p.Fits {
		wrap(st.Error.Render, p.Reason)
	} else {
		speed := "speed unknown"
		if p.TokensPerS > 0 {
			speed = fmt.Sprintf("~%.1f tok/s", p.TokensPerS)
		}
		out = append(out, render.Cut(fmt.Sprintf("  %d hosts · main %s · %s", len(p.Members), api.Printable(p.Main), speed), m.width))
		if p.Basis != "" {
			wrap(st.Muted.Render, "speed: "+strings.TrimSpace(p.Basis))
		}
	}
	if len(p.Members) > 0 {
		cols := splitCols
		out = append(out, "  "+render.Head(st, cols))
		for _, mb := range p.Members {
			role := "worker"
			if mb.Main {
				role = "main"
			}
			row := render.Row(cols, []string{api.Printable(mb.Host), role, fmt.Sprintf("%d/%d", mb.Layers, p.Layers),
				render.Bytes(mb.Weights), render.Bytes(mb.KV), render.Bytes(mb.Compute), render.Bytes(mb.Reserves()), render.Bytes(mb.Free)})
			out = append(out, render.Cut("  "+row, m.width))
		}
	}
	for _, l := range p.Left {
		out = append(out, st.Muted.Render(render.Cut("  left out "+api.Printable(l.Host)+": "+api.Printable(l.Reason), m.width)))
	}
	if p.Fits {
		what := "enter places it: " + api.Printable(p.Main) + " runs llama-server, each member its share"
		switch m.focus {
		case fieldHosts:
		case fieldOut:
			what = "↓, then enter, places it: " + api.Printable(p.Main) + " is the main"
		default:
			what = "enter, then enter again, places it: " + api.Printable(p.Main) + " is the main"
		}
		out = append(out, st.Prompt.Render(render.Cut(what, m.width)))
	}
	return out
}

// methods say how an agent learned a size, in words.
var methods = map[string]string{
	api.SizeHeader:   "from the GGUF header",
	api.SizeHead:     "from the blob's size (HEAD)",
	api.SizeRange:    "from the blob's size (range request)",
	api.SizeRegistry: "from the Ollama registry manifest",
	api.SizeShow:     "from the local Ollama daemon",
	api.SizeFallback: "guessed: 1.2 × the file + 512 MiB (the header could not be read)",
}

// Estimate says what a model will cost and how that was learned.
func Estimate(r console.Ranking) string {
	e := r.Estimate
	if e.Bytes <= 0 {
		if r.SizeCode == api.CodeNotFound {
			return "no such model (asked " + r.SizedBy + "): " + r.SizeError
		}
		if r.SizeError != "" {
			return "size unknown (sized by " + r.SizedBy + "): " + r.SizeError
		}
		return "size unknown: sized by " + r.SizedBy + ", nothing will load blind"
	}
	s := "needs " + render.Bytes(e.Bytes)
	if e.Device == api.DeviceHailo {
		s += " on the Hailo-10H"
	}
	how := methods[e.Method]
	if how == "" {
		how = "by " + e.Method
	}
	return s + " · " + how + ", sized by " + r.SizedBy
}

// Breakdown is an estimate's arithmetic: the agent's own words, or its parts.
func Breakdown(e api.SizeEstimate) string {
	if e.Weights > 0 {
		parts := []string{"weights " + render.Bytes(e.Weights)}
		if e.KV > 0 {
			parts = append(parts, "KV cache "+render.Bytes(e.KV))
		}
		if e.Compute > 0 {
			parts = append(parts, "compute "+render.Bytes(e.Compute))
		}
		if e.Cache > 0 {
			parts = append(parts, "prompt cache "+render.Bytes(e.Cache))
		}
		if e.Overhead > 0 {
			parts = append(parts, "overhead "+render.Bytes(e.Overhead))
		}
		return strings.Join(parts, " + ")
	}
	return e.Detail
}

// steps a placement goes through, in order.
var steps = []api.PlacementState{api.StateSizing, api.StatePulling, api.StateLoading, api.StateReady}

func (m *Model) progressLines() []string {
	st := m.ctx.Styles
	req := m.req
	ns := req.Namespace
	if ns == "" {
		ns = api.DefaultNamespace
	}
	rt := req.Runtime
	if rt == "" {
		rt = source.RuntimeOf(req.Source)
	}
	src := cutSource(req.Source, m.width-ansi.StringWidth("Placing  on "+m.target)-1) // the host whole, then "…"
	out := []string{render.Cut(st.Bold.Render("Placing "+src+" on "+m.target)+st.Muted.Render(fmt.Sprintf(" · %s · namespace %s", rt, ns)), m.width)}
	if req.Split != nil {
		out = append(out, st.Muted.Render(render.Cut("  split across "+api.Printable(strings.Join(req.Split.Hosts, ", "))+" · "+m.target+" is the main", m.width)))
	}
	p := m.placement
	if p == nil && m.placeErr == nil {
		return append(out, st.Muted.Render("  asking "+m.target+" to admit it…"))
	}
	if p != nil {
		cur := -1
		for i, s := range steps {
			if p.State == s {
				cur = i
			}
		}
		for i, s := range steps {
			var line string
			switch {
			case cur < 0 || i > cur:
				line = st.Muted.Render("  · " + string(s))
			case i < cur || (i == cur && s == api.StateReady):
				line = st.OK.Render("  ✓ "+render.Pad(string(s), 8)) + m.stepNote(s, p)
			default:
				line = st.Warn.Render("  › "+render.Pad(string(s), 8)) + m.stepNote(s, p)
			}
			out = append(out, render.Cut(line, m.width))
			if s == api.StateSizing && i <= cur {
				for _, r := range splitReserved(p) {
					out = append(out, st.Muted.Render(render.Cut("      "+r, m.width)))
				}
			}
		}
		if cur < 0 && !p.State.Terminal() {
			out = append(out, st.State(p.State).Render("  "+string(p.State)))
		}
	}
	if m.pollErr != nil {
		out = append(out, st.Warn.Render(render.Cut("  "+m.target+" does not answer, asking again: "+m.pollErr.Error(), m.width)))
	}
	switch {
	case m.placeErr != nil:
		out = append(out, "")
		out = append(out, m.errorLines("refused", m.placeErr)...)
		out = append(out, "", st.Muted.Render("enter: change the request · esc: done"))
	case p != nil && p.State == api.StateReady && !m.placing:
		out = append(out, "", st.OK.Render(render.Cut(fmt.Sprintf("ready: %s on %s — press enter to chat with it", p.Model, p.Host), m.width)),
			st.Muted.Render("esc: done"))
	case p != nil && p.State == api.StateReady:
		// The wait goes on until the other agents route the model (console.Conn.Wait), so a
		// chat through any of them finds it; enter opens the chat only then, and says so then.
		out = append(out, "", st.Muted.Render(render.Cut("ready; waiting for the other hosts to route it · esc stops watching", m.width)))
	case m.placing:
		out = append(out, "", st.Muted.Render("esc stops watching (the placement goes on)"))
	}
	return out
}

func (m *Model) stepNote(s api.PlacementState, p *api.Placement) string {
	switch s {
	case api.StateSizing:
		if p.Split != nil && len(p.Split.Members) > 0 {
			// The main placement's own Memory is llama-server's part alone: the split reserves
			// each member's share (splitReserved, under this line), as its plan said.
			var all int64
			for _, mb := range p.Split.Members {
				all += mb.Reserves()
			}
			return fmt.Sprintf("%s reserved on %d hosts:", render.Bytes(all), len(p.Split.Members))
		}
		if p.Memory.Bytes > 0 {
			where := ""
			if p.Memory.Device == api.DeviceHailo {
				where = " on the Hailo-10H"
			}
			return render.Bytes(p.Memory.Bytes) + " reserved" + where
		}
	case api.StatePulling:
		if p.State != api.StatePulling {
			return "done"
		}
		note := render.Progress(m.ctx.Styles, min(30, max(m.width-40, 10)), p.Progress)
		if p.TotalBytes > 0 {
			note += "  " + render.Bytes(p.PulledBytes) + " of " + render.Bytes(p.TotalBytes)
		}
		return note
	case api.StateLoading:
		if p.State != api.StateLoading {
			break
		}
		if mv := p.Moving(); mv != "" {
			// A split's start is mostly its members' weights crossing the LAN.
			return render.Progress(m.ctx.Styles, min(20, max(m.width-60, 10)), p.Progress) + "  " +
				render.Bytes(p.PulledBytes) + " of " + render.Bytes(p.TotalBytes) + " " + mv
		}
		switch p.Runtime {
		case api.RuntimeLlamaServer:
			return "starting llama-server and waiting for it to answer"
		case api.RuntimeHailoOllama:
			// The daemon runs already: it loads the model onto the device.
			return "hailo-ollama loads it onto the Hailo-10H"
		}
		return string(p.Runtime) + " loads it"
	case api.StateReady:
		return p.Model + " answers on " + p.Host
	}
	return ""
}

// splitReserved says what a split placement reserves on each member, the figure its plan
// showed (NEED), and which is which: "mac-mini 7.9 GiB = llama-server 1.7 GiB + 40/80 layers
// 6.2 GiB" on the main, "tower 6.2 GiB = 40/80 layers" on a worker.
func splitReserved(p *api.Placement) []string {
	if p.Split == nil {
		return nil
	}
	var out []string
	for _, mb := range p.Split.Members {
		layers := fmt.Sprintf("%d/%d layers", mb.Layers, p.Split.Layers)
		if mb.Output {
			layers += " + output"
		}
		line := api.Printable(mb.Host) + " " + render.Bytes(mb.Reserves()) + " = "
		switch {
		case mb.MainNeed > 0 && mb.Layers > 0:
			line += "llama-server " + render.Bytes(mb.MainNeed) + " + " + layers + " " + render.Bytes(mb.Need)
		case mb.MainNeed > 0:
			line += "llama-server, no layers"
		default:
			line += layers
		}
		out = append(out, line)
	}
	return out
}

// errorLines show an error with its code, its message and what would fix it.
// formFix replaces an agent's fix that names what this form does not have (a name field, a
// "load anyway" switch) with one the user can follow from here.
func (m *Model) formFix(code api.Code) string {
	switch code {
	case api.CodeConflict:
		return "it runs there already with other settings: delete it first (2 for Models, x on it), or choose another host (esc)"
	case api.CodeMemoryCheckFailed:
		src := strings.TrimSpace(m.inputs[fieldSource].Value())
		host := m.target
		if host == "" {
			host = "HOST"
		}
		return "fix the cause above, or load it without a known size from a shell: llmkube-tui mesh place " + src + " --host " + host + " --load-anyway"
	}
	return ""
}

func (m *Model) errorLines(what string, err error) []string {
	st := m.ctx.Styles
	var out []string
	wrap := func(prefix, text string) {
		for i, l := range strings.Split(ansi.Wrap(text, max(m.width-len(prefix), 20), " "), "\n") {
			if i > 0 {
				prefix = strings.Repeat(" ", len(prefix))
			}
			out = append(out, prefix+l)
		}
	}
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		out = append(out, st.Error.Render(render.Cut("✗ "+what+": "+string(apiErr.Code), m.width)))
		wrap("  ", apiErr.Message)
		fix := apiErr.Fix
		if f := m.formFix(apiErr.Code); f != "" {
			fix = f
		}
		if fix == "" {
			fix = Hint([]api.Ranked{{Verdict: api.VerdictRefused, Code: apiErr.Code}})
		}
		if fix != "" {
			wrap("  fix: ", fix)
		}
		return out
	}
	out = append(out, st.Error.Render(render.Cut("✗ "+what, m.width)))
	wrap("  ", err.Error())
	return out
}
