// Package models lists every placement in the mesh — model, host, runtime, namespace, memory,
// state (with a progress bar while pulling), speed and last use — and deletes one after asking.
package models

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/render"
)

// deleteTimeout bounds a delete, on top of the connection's own per-call timeout: the agent
// stops the engine before it answers.
const deleteTimeout = 30 * time.Second

// placeTimeout bounds placing a model again: the owner answers once it has admitted it.
const placeTimeout = 30 * time.Second

// Model is the models view.
type Model struct {
	ctx    *common.Context
	width  int
	height int
	cur    common.Cursor

	filter common.Filter
	sortBy int // index in sortNames

	// confirm is the placement a delete waits on a yes for.
	confirm *api.Placement
	// again is an evicted placement whose placing again waits on a yes: on its host it replaces
	// the model its one-model device runs now (a Hailo swap), as Place asks before one.
	again *againAsk
	// deleting holds the ids of deletes in flight, shown as such until the agent answers.
	deleting map[string]bool

	// intents are what the mesh keeps running, as an agent last said (intentsEvery); asking
	// says a fetch is in flight.
	intents []api.IntentStatus
	asking  bool
	askedAt time.Time
}

// intentsEvery is how often the view asks an agent for the intents (wants vs has).
const intentsEvery = 2 * time.Second

// maxIntentLines bounds the intents shown over the table.
const maxIntentLines = 3

// intentsMsg is an agent's answer to GET /v1/intents.
type intentsMsg struct {
	ins []api.IntentStatus
	err error
}

// askIntents fetches the intents when due (on the console's clock tick).
func (m *Model) askIntents() tea.Cmd {
	conn := m.ctx.Conn
	if conn == nil || m.asking || m.ctx.Now().Sub(m.askedAt) < intentsEvery {
		return nil
	}
	m.asking, m.askedAt = true, m.ctx.Now()
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), intentsEvery)
		defer cancel()
		ins, err := conn.Intents(ctx)
		return intentsMsg{ins: ins, err: err}
	}
}

// intentLines say each intent's wants and has, those not met first, at most maxIntentLines.
// A met intent of one replica says nothing the table's row does not, so it takes no line.
func (m *Model) intentLines() []string {
	ins := slices.DeleteFunc(slices.Clone(m.intents), func(in api.IntentStatus) bool {
		return in.Replicas <= 1 && in.Has == in.Replicas
	})
	slices.SortStableFunc(ins, func(a, b api.IntentStatus) int {
		return cmp.Compare(min(a.Has-a.Replicas, 0), min(b.Has-b.Replicas, 0))
	})
	var out []string
	for i, in := range ins {
		if i == maxIntentLines {
			out = append(out, fmt.Sprintf("… and %d more kept running (mesh models lists them)", len(ins)-i))
			break
		}
		if r := m.replacedOf(in); r != "" && in.Has == 0 {
			// The keeper never swaps back, so "no host can take it" would wait for nothing:
			// what happened instead (the evicted row's foot gives the key that undoes it).
			in.Note = r
		}
		out = append(out, "kept: "+api.IntentLine(in))
	}
	return out
}

// replacedOf says what replaced an intent's evicted placement on its one-model device, if a
// swap evicted one ("" otherwise).
func (m *Model) replacedOf(in api.IntentStatus) string {
	for _, p := range console.Placements(m.ctx.Mesh) {
		if p.Model == in.Name && p.Namespace == in.Namespace {
			if r := Replaced(m.ctx.Mesh, p); r != "" {
				return r
			}
		}
	}
	return ""
}

// againAsk is a placing again that waits on a yes: p is placed again on its host, where it
// replaces the model the device runs now (replaces).
type againAsk struct {
	p        api.Placement
	replaces string
}

// placedAgainMsg is the answer to placing an evicted placement again.
type placedAgainMsg struct {
	p       api.Placement // the evicted one
	placed  api.Placement
	existed bool
	err     error
}

// deletedMsg is the answer to a delete.
type deletedMsg struct {
	p   api.Placement
	err error
}

// New returns the models view.
func New(ctx *common.Context) *Model {
	return &Model{
		ctx:      ctx,
		filter:   common.NewFilter(ctx.Styles, "filter by model, host, runtime, namespace, state"),
		deleting: map[string]bool{},
	}
}

func (m *Model) Init() tea.Cmd { return nil }

func (m *Model) SetSize(w, h int) {
	m.width, m.height = w, h
	m.filter.SetWidth(w)
	m.clamp(len(m.Rows()))
}

// Capturing: the filter takes letters, and so does a pending confirmation (a stray global key
// must not act while a delete waits for its answer).
func (m *Model) Capturing() bool { return m.filter.Active() || m.confirm != nil || m.again != nil }

var (
	keyApply = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "apply"))
	keyClear = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear"))
	keyChat  = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "chat"))
	keyLog   = key.NewBinding(key.WithKeys("l"), key.WithHelp("l", "log"))
	keyAgain = key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "place again"))
)

func (m *Model) ShortHelp() []key.Binding {
	k := m.ctx.Keys
	switch {
	case m.confirm != nil, m.again != nil:
		return []key.Binding{k.Confirm, k.Cancel}
	case m.filter.Active():
		return []key.Binding{keyApply, keyClear}
	}
	// The view's own actions first: the footer keeps what fits, and ↑/↓ go without saying. On a
	// row that will not serve by itself, placing it again is the key that matters, not chat.
	if p, ok := m.Selected(); ok {
		if p.State == api.StateEvicted || p.State == api.StateFailed || p.State == api.StateUnavailable {
			return []key.Binding{keyAgain, k.Delete, k.Filter, keyLog, k.Sort, k.Up, k.Down}
		}
	}
	return []key.Binding{keyChat, k.Delete, k.Filter, keyLog, keyAgain, k.Sort, k.Up, k.Down}
}

// FullHelp lists every key of the view, for the help view.
func (m *Model) FullHelp() []common.HelpSection {
	k := m.ctx.Keys
	return []common.HelpSection{{Title: "Models", Keys: []key.Binding{
		k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom,
		common.As(k.Open, "chat with a ready model"), k.Delete, k.Confirm, k.Cancel,
		common.As(keyLog, "its engine log (the host's detail)"), common.As(keyAgain, "place again (same host; asks before a swap)"),
		k.Filter, common.As(k.Back, "clear the filter"), common.As(k.Sort, "sort: host, memory, state"),
	}}}
}

// Sort orders of the list: by host then model (the mesh's own order), the largest first, or
// the ones that need attention first (not ready, by state).
const (
	SortHost = iota
	SortMemory
	SortState
	sortCount
)

var sortNames = [sortCount]string{"host", "memory", "state"}

// Rows are the placements shown, filtered and sorted (host then model unless s chose another).
func (m *Model) Rows() []api.Placement {
	all := slices.DeleteFunc(console.Placements(m.ctx.Mesh), func(p api.Placement) bool { return p.Part != nil })
	q := m.filter.Query()
	rows := all
	if q != "" {
		rows = nil
		for _, p := range all {
			text := strings.ToLower(strings.Join([]string{p.Model, p.Host, string(p.Runtime), p.Namespace, string(p.State), p.Source, p.ID}, " "))
			if strings.Contains(text, q) {
				rows = append(rows, p)
			}
		}
	}
	switch m.sortBy {
	case SortMemory:
		slices.SortStableFunc(rows, func(a, b api.Placement) int { return cmp.Compare(b.Memory.Bytes, a.Memory.Bytes) })
	case SortState:
		ready := func(p api.Placement) bool { return p.State == api.StateReady }
		slices.SortStableFunc(rows, func(a, b api.Placement) int {
			if ready(a) != ready(b) {
				if ready(b) {
					return -1
				}
				return 1
			}
			return strings.Compare(string(a.State), string(b.State))
		})
	}
	return rows
}

// Selected is the placement under the cursor.
func (m *Model) Selected() (api.Placement, bool) {
	rows := m.Rows()
	if m.cur.Pos < 0 || m.cur.Pos >= len(rows) {
		return api.Placement{}, false
	}
	return rows[m.cur.Pos], true
}

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		return m, m.key(msg)
	case tea.MouseMsg:
		n := len(m.Rows())
		if hit, again := m.cur.Click(msg, m.firstRow(), n, m.tableHeight()); hit {
			if again {
				return m, m.key(tea.KeyMsg{Type: tea.KeyEnter})
			}
			return m, nil
		}
		m.cur.Move(m.ctx.Keys, msg, n, m.tableHeight())
	case common.MeshMsg:
		// A placement that left the mesh is no longer being deleted, it is gone.
		present := map[string]bool{}
		for _, p := range console.Placements(m.ctx.Mesh) {
			present[p.ID] = true
		}
		for id := range m.deleting {
			if !present[id] {
				delete(m.deleting, id)
			}
		}
		m.clamp(len(m.Rows()))
	case common.TickMsg:
		return m, m.askIntents()
	case intentsMsg:
		m.asking = false
		// An agent that cannot be asked now keeps the last answer on screen; one without
		// intents (an older version) answers NotFound, and nothing is shown.
		var e *api.Error
		switch {
		case msg.err == nil:
			m.intents = msg.ins
		case errors.As(msg.err, &e) && e.Code == api.CodeNotFound:
			m.intents = nil
		}
		m.clamp(len(m.Rows()))
	case placedAgainMsg:
		p := msg.p
		switch {
		case msg.err != nil:
			return m, common.Status(fmt.Sprintf("placing %s again on %s failed: %v", p.Model, p.Host, msg.err), true)
		case msg.existed:
			return m, common.Status(fmt.Sprintf("%s is already placed on %s (%s)", p.Model, p.Host, msg.placed.State), false)
		}
		return m, common.Status(fmt.Sprintf("placing %s again on %s: %s", p.Model, p.Host, msg.placed.State), false)
	case deletedMsg:
		if msg.err != nil {
			delete(m.deleting, msg.p.ID)
			return m, common.Status(fmt.Sprintf("delete %s on %s failed: %v", msg.p.Model, msg.p.Host, msg.err), true)
		}
		return m, common.Status(fmt.Sprintf("deleted %s on %s", msg.p.Model, msg.p.Host), false)
	}
	return m, nil
}

func (m *Model) key(msg tea.KeyMsg) tea.Cmd {
	k := m.ctx.Keys
	if m.confirm != nil {
		p := *m.confirm
		m.confirm = nil
		if key.Matches(msg, k.Confirm) {
			m.deleting[p.ID] = true
			return m.deleteCmd(p)
		}
		return common.Status("kept "+p.Model+" on "+p.Host, false)
	}
	if m.again != nil {
		a := *m.again
		m.again = nil
		if key.Matches(msg, k.Confirm) {
			return m.placeAgainCmd(a.p)
		}
		return common.Status("not placed again: "+a.replaces+" stays on "+a.p.Host, false)
	}
	if m.filter.Active() {
		changed, cmd := m.filter.Key(msg)
		if changed {
			m.cur = common.Cursor{}
		}
		m.clamp(len(m.Rows()))
		return cmd
	}
	if m.cur.Move(k, msg, len(m.Rows()), m.tableHeight()) {
		return nil
	}
	switch {
	case key.Matches(msg, k.Filter):
		return m.filter.Start()
	case key.Matches(msg, k.Sort):
		m.sortBy = (m.sortBy + 1) % sortCount
		return common.Status("sorted by "+sortNames[m.sortBy], false)
	case key.Matches(msg, k.Back):
		m.filter.Clear()
	case key.Matches(msg, k.Delete):
		if p, ok := m.Selected(); ok {
			if m.deleting[p.ID] {
				return common.Status(p.Model+" on "+p.Host+" is already being deleted", false)
			}
			m.confirm = &p
		}
	case key.Matches(msg, keyLog):
		if p, ok := m.Selected(); ok {
			m.ctx.Navigate(common.PageHostDetail, p.Host) // its log tail is there
			return nil
		}
	case key.Matches(msg, keyAgain):
		if p, ok := m.Selected(); ok {
			return m.placeAgain(p)
		}
	case key.Matches(msg, k.Open):
		if p, ok := m.Selected(); ok {
			if p.State != api.StateReady && p.State != api.StateSleeping { // a chat wakes a sleeping model
				text, stuck := NotReady(p)
				return common.Status(text, stuck)
			}
			m.ctx.Navigate(common.PageChat, p.Model)
			return nil
		}
	}
	m.clamp(len(m.Rows()))
	return nil
}

// NotReady says why a placement cannot be chatted with and what to do; stuck is true when it
// will not become ready by itself (failed, evicted, its host gone, being stopped).
func NotReady(p api.Placement) (text string, stuck bool) {
	why := ""
	if p.Reason != "" {
		why = " (" + p.Reason + ")"
	}
	switch p.State {
	case api.StateSizing, api.StatePulling, api.StateLoading, api.StateRestarting:
		return fmt.Sprintf("%s on %s is %s: chat opens once it is ready", p.Model, p.Host, p.State), false
	case api.StateEvicted:
		return fmt.Sprintf("%s on %s was evicted%s: place it again (r), or x removes it from the list", p.Model, p.Host, why), true
	case api.StateUnavailable:
		return fmt.Sprintf("%s on %s is unavailable%s: it comes back with its host, or place it elsewhere (r)", p.Model, p.Host, why), true
	case api.StateStopping:
		return fmt.Sprintf("%s on %s is being stopped", p.Model, p.Host), true
	}
	return fmt.Sprintf("%s on %s is %s%s: place it again (r), or x removes it", p.Model, p.Host, p.State, why), true
}

// placeAgain places an evicted placement again as it was asked for, on the host it was
// evicted from, asking first when that replaces the model its one-model device runs now. Any
// other row opens Place with its source: a failed or unavailable one may need another host or
// other settings, and Place ranks the hosts.
func (m *Model) placeAgain(p api.Placement) tea.Cmd {
	if p.State != api.StateEvicted || p.Split != nil {
		m.ctx.Navigate(common.PagePlace, p.Source)
		return nil
	}
	if on := console.LoadedOn(m.ctx.Mesh, p.Host); p.Memory.Device == api.DeviceHailo && on != "" && on != p.Model {
		m.again = &againAsk{p: p, replaces: on}
		return nil
	}
	return m.placeAgainCmd(p)
}

// AgainRequest is the request that placed p, as its placement records it.
func AgainRequest(p api.Placement) api.PlacementRequest {
	return api.PlacementRequest{
		Source: p.Source, Runtime: p.Runtime, Namespace: p.Namespace, Context: p.Context,
		Priority: p.Priority, Name: p.Model, Protected: p.Protected, MemoryCheck: p.MemoryCheck,
		SHA256: p.SHA256, Args: p.Args, TTL: p.TTL,
	}
}

func (m *Model) placeAgainCmd(p api.Placement) tea.Cmd {
	conn := m.ctx.Conn
	return func() tea.Msg {
		if conn == nil {
			return placedAgainMsg{p: p, err: common.ErrNotConnected}
		}
		ctx, cancel := context.WithTimeout(context.Background(), placeTimeout)
		defer cancel()
		placed, existed, err := conn.PlaceOnce(ctx, p.Host, AgainRequest(p))
		return placedAgainMsg{p: p, placed: placed, existed: existed, err: err}
	}
}

// deleteCmd deletes by id, so a second placement of the same model is never hit by mistake.
func (m *Model) deleteCmd(p api.Placement) tea.Cmd {
	conn := m.ctx.Conn
	return func() tea.Msg {
		if conn == nil {
			return deletedMsg{p: p, err: common.ErrNotConnected}
		}
		ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
		defer cancel()
		_, err := conn.Delete(ctx, p.ID)
		return deletedMsg{p: p, err: err}
	}
}

func (m *Model) clamp(n int) { m.cur.Clamp(n, m.tableHeight()) }

// firstRow is the line of the first placement: under the intro and the column titles, as drawn
// (the titles' height is their style's, whatever the columns).
func (m *Model) firstRow() int { return common.RowsOf(m.intro(), render.Head(m.ctx.Styles, nil)) }

// tableHeight is the rows left between the column titles and the foot, a blank row above it.
func (m *Model) tableHeight() int { return max(m.height-m.firstRow()-1-common.RowsOf(m.foot()), 1) }

// intro is the line over the table: the summary, or the filter.
func (m *Model) intro() string {
	if m.filter.Shown() {
		return render.Cut(m.filter.View(), m.width)
	}
	intro := m.ctx.Styles.Header.Render(render.Cut(Summary(m.Rows()), m.width))
	for _, l := range m.intentLines() {
		intro += "\n" + m.ctx.Styles.Muted.Render(render.Cut(l, m.width))
	}
	return intro
}

// foot is the line under the table: the selected placement's detail, or a delete's question.
func (m *Model) foot() string {
	st := m.ctx.Styles
	switch sel, ok := m.Selected(); {
	case m.confirm != nil:
		return st.Danger.Render(render.Cut(fmt.Sprintf("delete %s on %s? (y/n)", m.confirm.Model, m.confirm.Host), m.width))
	case m.again != nil:
		// The question first, uncut by what follows it.
		a := m.again
		return st.Danger.Render(render.Cut(fmt.Sprintf("place again (y/n)? %s on %s, replacing %s", a.p.Model, a.p.Host, a.replaces), m.width))
	case ok:
		detail := st.Muted.Render(render.WrapLines(Detail(sel), m.width, footLines))
		if r := Replaced(m.ctx.Mesh, sel); r != "" {
			return st.Warn.Render(render.Cut(r+" · r places it again", m.width)) + "\n" + detail
		}
		return detail
	}
	return ""
}

// footLines is the most the selected placement's detail takes under the table: its reason (why
// it failed, what replaced it) and a split's members are at its end.
const footLines = 3

// Summary counts placements by state.
func Summary(ps []api.Placement) string {
	if len(ps) == 0 {
		return "no placements"
	}
	counts := map[api.PlacementState]int{}
	for _, p := range ps {
		counts[p.State]++
	}
	parts := []string{fmt.Sprintf("%d placement%s", len(ps), plural(len(ps)))}
	for _, st := range []api.PlacementState{api.StateReady, api.StateSizing, api.StatePulling, api.StateLoading, api.StateRestarting,
		api.StateStopping, api.StateSleeping, api.StateFailed, api.StateEvicted, api.StateUnavailable} {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return strings.Join(parts, " · ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// columns of the models table, in order. On a narrow terminal the least telling go first
// (when it was used, the time to first token, the namespace); the model, its host and its
// state stay whole.
func (m *Model) columns() []render.Col[api.Placement] {
	now := m.ctx.Now()
	text := func(f func(api.Placement) string) func(api.Placement, int) string {
		return func(p api.Placement, _ int) string { return f(p) }
	}
	return []render.Col[api.Placement]{
		{Title: "MODEL", Min: 12, Priority: 95, Cell: text(func(p api.Placement) string { return p.Model })},
		{Title: "HOST", Min: 8, Priority: 90, Cell: text(hostOf)},
		{Title: "RUNTIME", Min: 6, Priority: 50, Cell: text(func(p api.Placement) string { return string(p.Runtime) })},
		{Title: "NAMESPACE", Min: 9, Max: 16, Priority: 20, Cell: text(func(p api.Placement) string { return p.Namespace })},
		{Title: "MEMORY", Min: 7, Priority: 60, Right: true, Cell: text(func(p api.Placement) string { return render.Bytes(memoryOf(p)) })},
		{Title: "STATE", Min: 8, Max: 24, Priority: 85,
			Cell: func(p api.Placement, w int) string { return StateCell(m.ctx, p, m.deleting[p.ID], w) },
			Want: func(p api.Placement) int {
				if p.State == api.StatePulling && !m.deleting[p.ID] {
					return len(p.State) + 1 + 12 // the word and a bar with its percentage
				}
				return ansi.StringWidth(StateCell(m.ctx, p, m.deleting[p.ID], 1<<10))
			}},
		{Title: "TTFT", Min: 7, Priority: 15, Right: true, Cell: text(func(p api.Placement) string { return render.Millis(p.TTFTMillis) })},
		{Title: "TOK/S", Min: 5, Priority: 40, Right: true, Cell: text(func(p api.Placement) string {
			return strings.TrimSuffix(render.Speed(p.TokensPerS), " tok/s")
		})},
		{Title: "USED", Min: 4, Priority: 10, Right: true, Cell: text(func(p api.Placement) string { return render.Ago(now, p.LastUsed) })},
	}
}

// gutter marks the row under the cursor in characters, not only in reverse video: with
// NO_COLOR the renderer drops every attribute, and the cursor must still show.
const gutter = "  "

func mark(selected bool) string {
	if selected {
		return "> "
	}
	return gutter
}

// StateCell spells a placement's state in width cells, coloured, with a progress bar while
// pulling and the code of a failure.
func StateCell(ctx *common.Context, p api.Placement, deleting bool, width int) string {
	st := ctx.Styles
	if deleting {
		return st.Warn.Render(render.Cut("deleting…", width))
	}
	word := string(p.State)
	if p.Moving() != "" {
		if width >= len(word)+7 {
			return st.State(p.State).Render(word) + " " + render.Progress(st, width-len(word)-1, p.Progress)
		}
		return st.State(p.State).Render(render.Cut(fmt.Sprintf("%s %d%%", word, int(p.Progress*100+0.5)), width))
	}
	switch p.State {
	case api.StateFailed, api.StateEvicted:
		if p.Code != "" {
			word += " (" + string(p.Code) + ")"
		}
	case api.StateRestarting:
		if p.Restarts > 0 {
			word += fmt.Sprintf(" ×%d", p.Restarts)
		}
	}
	return st.State(p.State).Render(render.Cut(word, width))
}

// Replaced says what took an evicted placement's place on its one-model device ("replaced on
// pi5-hailo by qwen2.5:1.5b"); "" for a placement no swap evicted.
func Replaced(v api.MeshView, p api.Placement) string {
	if p.State != api.StateEvicted || p.ReplacedBy == "" {
		return ""
	}
	by := p.ReplacedBy
	for _, o := range console.Placements(v) {
		if o.ID == p.ReplacedBy {
			by = o.Model
		}
	}
	return api.Printable("replaced on " + p.Host + " by " + by)
}

// Detail is one line about a placement: where it comes from and what it is doing.
func Detail(p api.Placement) string {
	parts := []string{p.Host + "/" + p.ID, p.Source, fmt.Sprintf("ctx %d", p.Context), "priority " + string(p.Priority)}
	if p.Memory.Device == api.DeviceHailo {
		parts = append(parts, "on the Hailo-10H")
	}
	if m := p.Moving(); m != "" && p.TotalBytes > 0 {
		parts = append(parts, render.Bytes(p.PulledBytes)+" of "+render.Bytes(p.TotalBytes)+" "+m)
	}
	if s := splitDetail(p); s != "" {
		parts = append(parts, s)
	}
	if p.Reason != "" {
		parts = append(parts, p.Reason)
	}
	if p.Protected {
		parts = append(parts, "protected")
	}
	return strings.Join(parts, " · ")
}

func (m *Model) View() string {
	st := m.ctx.Styles
	rows := m.Rows()
	var b strings.Builder
	b.WriteString(m.intro())
	b.WriteString("\n")
	all := console.Placements(m.ctx.Mesh)
	if len(all) == 0 {
		b.WriteString("\n" + st.Bold.Render("No models placed yet.") + "\n\n")
		b.WriteString(render.Cut("  Press p to place one: pick a source, see which hosts it fits, confirm.", m.width))
		if m.ctx.Conn == nil {
			b.WriteString("\n\n" + st.Muted.Render("not connected to a mesh"))
		}
		return render.Place(b.String(), m.width, m.height)
	}
	// Sized over every row, shown or not, so widths do not change as the list scrolls.
	cols, kept := render.LayoutRows(m.columns(), all, m.width-len(gutter))
	b.WriteString(gutter + render.Head(st, cols))
	end := min(m.cur.Offset+m.tableHeight(), len(rows))
	for i := m.cur.Offset; i < end; i++ {
		line := mark(i == m.cur.Pos) + render.Row(cols, render.Cells(cols, kept, rows[i]))
		b.WriteString("\n")
		if i == m.cur.Pos {
			b.WriteString(st.SelectedRow(line, m.width))
		} else {
			b.WriteString(line)
		}
	}
	if len(rows) == 0 {
		b.WriteString("\n" + st.Muted.Render("no model matches the filter (esc clears it)"))
	}
	foot := m.foot()
	body := render.Place(b.String(), m.width, max(m.height-common.RowsOf(foot), 0))
	return body + "\n" + render.Place(foot, m.width, common.RowsOf(foot))
}
