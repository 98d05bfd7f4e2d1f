// Package place is the console's placement form: choose a source (with suggestions from the
// mesh), a runtime, namespace, context size and priority; every host is ranked live below it
// with its verdict and reason; confirming one places the model there and follows it through
// pulling and loading to ready, or shows the refusal with its reason and what would fix it.
package place

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/mesh/rank"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
)

// Timings. The estimate waits for the user to stop typing; every call has its own bound so a
// dead host never holds the form up.
const (
	Debounce     = 300 * time.Millisecond
	rankTimeout  = 20 * time.Second
	placeTimeout = 30 * time.Second
	maxRecent    = 20
)

// Fields of the form, in tab order; fieldHosts is the ranked host list under it, and fieldOut
// is out of both (esc from the form): the keys are the console's, and esc there stays put, so
// esc never leads back into what it left.
const (
	fieldSource = iota
	fieldNamespace
	fieldContext
	fieldPriority
	fieldHosts
	fieldOut
)

var (
	keyRuntime = key.NewBinding(key.WithKeys("ctrl+r"), key.WithHelp("ctrl+r", "runtime"))
	keySplit   = key.NewBinding(key.WithKeys("ctrl+t"), key.WithHelp("ctrl+t", "split across hosts"))
	keyPlaceSp = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "place the split"))
	keyChoose  = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "choose host"))
	keyPlace   = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "place here"))
	keyEdit    = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "edit the form"))
	keyDone    = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "done"))
	keyChat    = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "chat with it"))
	keyLeave   = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "stop watching"))
	keyForm    = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "leave the form"))
	keyToForm  = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "edit the form"))
	keyToHosts = key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "the ranked hosts"))
)

// Model is the place view.
type Model struct {
	ctx    *common.Context
	width  int
	height int

	inputs  [4]textinput.Model
	focus   int
	runtime api.Runtime // "" = inferred from the source
	spread  bool
	sugg    int           // highlighted suggestion, -1 for none
	suggCur common.Cursor // the suggestions' scroll, which follows sugg

	// The estimate is asked of an agent when the source, runtime or context change (debounced,
	// by sequence number); the ranking is recomputed locally from it on every mesh change.
	seq      int
	sizing   bool
	estKey   string
	estimate *console.Ranking
	hosts    []api.Ranked
	rankErr  error
	hostCur  common.Cursor // the ranked host chosen, and the list's scroll
	// A split across hosts (llama.cpp RPC) is planned with every ranking of a GGUF source; it
	// is shown instead of the hosts when the user asks for it (splitAsked) or no host holds the
	// model alone and the split does.
	splitAsked bool
	plan       *api.SplitPlan
	swapping   *api.Ranked // a swap waits for a yes: it evicts the model on the device

	// A placement being followed; placeSeq drops answers for one the user stopped watching,
	// and stopWatch ends the wait behind it.
	placeSeq  int
	placing   bool
	stopWatch context.CancelFunc
	req       api.PlacementRequest
	target    string
	placement *api.Placement
	placeErr  error
	pollErr   error  // the last look failed: the host is asked again
	replaces  string // the model a confirmed swap replaces on the target's device

	// srcErr is why enter did not leave the source field: the source as the agent's own
	// validator (source.Parse) judges it, shown under the field until the next edit.
	srcErr error
}

type (
	debounceMsg struct{ seq int }
	rankedMsg   struct {
		seq     int
		ranking console.Ranking
		err     error
	}
	placedMsg struct {
		seq     int
		p       api.Placement
		existed bool // the mesh ran exactly this placement already
		err     error
	}
	// progressMsg is what one look of the wait found (a change, or why the look failed); it
	// carries its channel, so the reader is re-armed. waitedMsg ends the wait.
	progressMsg struct {
		seq int
		ch  <-chan tea.Msg
		p   api.Placement
		err error
	}
	waitedMsg struct {
		seq int
		p   api.Placement
		err error
	}
)

// New returns the place view with the source field focused.
func New(ctx *common.Context) *Model {
	st := ctx.Styles
	m := &Model{ctx: ctx, sugg: -1}
	m.inputs[fieldSource] = common.NewInput(st, "", SourceHint(ctx.Mesh))
	m.inputs[fieldNamespace] = common.NewInput(st, "", api.DefaultNamespace)
	m.inputs[fieldContext] = common.NewInput(st, "", strconv.Itoa(api.DefaultContext))
	m.inputs[fieldPriority] = common.NewInput(st, "", string(api.PriorityNormal))
	m.inputs[fieldNamespace].CharLimit = 63
	m.inputs[fieldPriority].CharLimit = 8
	m.inputs[fieldSource].Focus()
	m.layout()
	return m
}

func (m *Model) Init() tea.Cmd { return nil }

// Open pre-fills the source (from ":place hailo://…") and starts ranking it. Opened without
// one (a tab switch), it gives the form back to type in, unless a placement being followed or
// its outcome is on screen.
func (m *Model) Open(src string) tea.Cmd {
	if m.placing || (src == "" && (m.placement != nil || m.placeErr != nil)) {
		return nil // a placement being followed or its outcome keeps the screen; esc leaves it first
	}
	if src == "" {
		// Coming back to the view gives the form to type in, never a list out of sight.
		return m.setFocus(fieldSource)
	}
	m.clearDone()
	m.splitAsked = false
	m.inputs[fieldSource].SetValue(src)
	m.inputs[fieldSource].CursorEnd()
	m.srcErr = nil
	if _, err := m.Request(); errors.Is(err, errIncomplete) {
		m.srcErr = sourceError(src) // ":place olama://x" says what is wrong at once
	}
	return tea.Batch(m.setFocus(fieldSource), m.changed())
}

func (m *Model) SetSize(w, h int) {
	m.width, m.height = w, h
	m.layout()
}

func (m *Model) layout() {
	m.inputs[fieldSource].Width = max(m.width-labelWidth-2, 10)
	m.inputs[fieldNamespace].Width = 14
	m.inputs[fieldContext].Width = 7
	m.inputs[fieldPriority].Width = 8
}

// Capturing while a field takes text or a swap waits for its answer.
func (m *Model) Capturing() bool {
	return m.swapping != nil || (!m.placing && m.placement == nil && m.placeErr == nil && m.inForm())
}

// inForm: a field of the form has the keys.
func (m *Model) inForm() bool { return m.focus < fieldHosts }

// choosable: there is something in the list to choose, the split or a ranked host.
func (m *Model) choosable() bool { return m.showsSplit() || len(m.hosts) > 0 }

// TakesTab while a form field is typed: tab moves to the next field there.
func (m *Model) TakesTab() bool {
	return m.swapping == nil && m.Capturing()
}

func (m *Model) ShortHelp() []key.Binding {
	k := m.ctx.Keys
	switch {
	case m.swapping != nil:
		return []key.Binding{k.Confirm, k.Cancel}
	case m.placing:
		return []key.Binding{keyLeave}
	case m.placement != nil && m.placement.State == api.StateReady:
		return []key.Binding{keyChat, keyDone}
	case m.placeErr != nil:
		return []key.Binding{keyDone}
	case m.focus == fieldHosts && m.showsSplit():
		return []key.Binding{keyPlaceSp, keySplit, keyEdit}
	case m.focus == fieldHosts:
		return []key.Binding{k.Up, k.Down, keyPlace, k.Spread, keySplit, keyEdit}
	case m.focus == fieldOut && m.choosable():
		return []key.Binding{keyToForm, keyToHosts, k.Spread, keySplit}
	case m.focus == fieldOut:
		return []key.Binding{keyToForm}
	}
	// esc first after enter: it is the way out of the form to the global keys.
	return []key.Binding{keyChoose, keyForm, k.NextFld, k.PrevFld, keyRuntime, k.Spread, keySplit}
}

// FullHelp lists every key of the view, for the help view: the form, the ranked hosts, and
// the placement being followed.
func (m *Model) FullHelp() []common.HelpSection {
	k := m.ctx.Keys
	return []common.HelpSection{
		{Title: "Place: the form", Keys: []key.Binding{
			k.NextFld, k.PrevFld, key.NewBinding(key.WithKeys("down", "up"), key.WithHelp("↓/↑", "suggestions")),
			common.As(keyChoose, "to the ranked hosts (or take a suggestion)"), keyRuntime, k.Spread,
			common.As(keySplit, "split across hosts / the ranked hosts"), keyForm,
		}},
		{Title: "Place: out of the form", Keys: []key.Binding{keyToForm, keyToHosts}},
		{Title: "Place: ranked hosts", Keys: []key.Binding{
			k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom, keyPlace, keyPlaceSp, k.Spread, keyEdit,
			common.As(k.Confirm, "yes, swap"), common.As(k.Cancel, "no swap"),
		}},
		{Title: "Place: the placement", Keys: []key.Binding{keyChat, keyLeave, keyDone}},
	}
}

// Request is the placement request the form describes, or why it is not one yet.
func (m *Model) Request() (api.PlacementRequest, error) {
	req := api.PlacementRequest{
		Source:    strings.TrimSpace(m.inputs[fieldSource].Value()),
		Runtime:   m.runtime,
		Namespace: strings.TrimSpace(m.inputs[fieldNamespace].Value()),
		Priority:  api.Priority(strings.TrimSpace(m.inputs[fieldPriority].Value())),
	}
	if !LooksLikeSource(req.Source) {
		return req, errIncomplete
	}
	if err := sourceError(req.Source); err != nil {
		return req, err
	}
	if c := strings.TrimSpace(m.inputs[fieldContext].Value()); c != "" {
		n, err := api.ParseContext(c) // 8192, 8k, 0: as the CLI's --context reads it
		if err != nil {
			return req, err
		}
		req.Context = n
	}
	if req.Priority.Level() < 0 {
		return req, fmt.Errorf("priority %q is not one of batch, low, normal, high, critical", req.Priority)
	}
	return req, nil
}

// Runtime is the runtime the request will use: the override, or the source's.
func (m *Model) Runtime() (rt api.Runtime, inferred bool) {
	if m.runtime != "" {
		return m.runtime, false
	}
	return source.RuntimeOf(m.inputs[fieldSource].Value()), true
}

func estimateKey(req api.PlacementRequest) string {
	return req.Source + "\x00" + string(req.Runtime) + "\x00" + strconv.Itoa(req.Context)
}

// changed reacts to an edit: a new estimate after a pause if the size may differ, else a new
// ranking from the one already known.
func (m *Model) changed() tea.Cmd {
	req, err := m.Request()
	if err != nil {
		m.seq++ // whatever is in flight describes another request
		m.sizing, m.estimate, m.hosts, m.rankErr, m.estKey = false, nil, nil, nil, ""
		return nil
	}
	if k := estimateKey(req); k != m.estKey {
		m.seq++
		m.estKey = k
		m.sizing, m.estimate, m.hosts, m.rankErr = true, nil, nil, nil
		seq := m.seq
		return tea.Tick(Debounce, func(time.Time) tea.Msg { return debounceMsg{seq: seq} })
	}
	m.rerank()
	return nil
}

// rerank ranks every host again from the known estimate: a pure function of the view.
func (m *Model) rerank() {
	if m.estimate == nil {
		return
	}
	req, err := m.Request()
	if err != nil {
		return
	}
	m.hosts = rank.Rank(m.ctx.Mesh.Members, m.estimate.Request(req, m.spread))
	m.hostCur.Pos = max(0, min(m.hostCur.Pos, len(m.hosts)-1))
	m.plan = nil
	if m.estimate.Estimate.Layers > 0 {
		plan := m.estimate.Split(m.ctx.Mesh.Members, req, nil, "")
		m.plan = &plan
	}
}

// showsSplit: the split plan is on screen in place of the ranked hosts.
func (m *Model) showsSplit() bool {
	if m.plan == nil {
		return false
	}
	return m.splitAsked || (m.plan.Fits && noneFits(m.hosts))
}

// noneFits: every host refuses the model on its own.
func noneFits(hosts []api.Ranked) bool {
	for _, h := range hosts {
		if h.Verdict != api.VerdictRefused {
			return false
		}
	}
	return true
}

func (m *Model) rankCmd(seq int) tea.Cmd {
	req, err := m.Request()
	if err != nil {
		return nil
	}
	conn, spread := m.ctx.Conn, m.spread
	return func() tea.Msg {
		if conn == nil {
			return rankedMsg{seq: seq, err: common.ErrNotConnected}
		}
		ctx, cancel := context.WithTimeout(context.Background(), rankTimeout)
		defer cancel()
		r, err := conn.Rank(ctx, req, spread)
		return rankedMsg{seq: seq, ranking: r, err: err}
	}
}

// sourceError is what the agent's validator says of s: the same words as the CLI's, so a bare
// "qwen2.5:0.5b" gets "did you mean ollama://qwen2.5:0.5b" and "olama://x" its unknown scheme.
func sourceError(s string) error {
	if _, err := source.Parse(strings.TrimSpace(s)); err != nil {
		return errors.New(apiMessage(err))
	}
	return nil
}

// apiMessage is an API error's message without its code, which the form does not need.
func apiMessage(err error) string {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		return apiErr.Message
	}
	return err.Error()
}

var (
	// errIncomplete: the source field does not hold a source yet (being typed); nothing is
	// asked of the mesh for it.
	errIncomplete = errors.New("a source looks like hailo://name:tag, ollama://name:tag, hf://owner/repo/file.gguf, https://…/file.gguf or /abs/file.gguf")
)

// schemes a source may start with; anything else must be an absolute path.
var schemes = []string{"hailo://", "ollama://", "hf://", "https://", "http://", "file://"}

// LooksLikeSource is a cheap check of a source's shape, so half-typed text is not sent to an
// agent to be sized; the agent's validation stays the authority.
func LooksLikeSource(s string) bool {
	low := strings.ToLower(s)
	for _, p := range schemes {
		if strings.HasPrefix(low, p) {
			return len(s) > len(p)
		}
	}
	return strings.HasPrefix(s, "/") && len(s) > 1
}

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		return m, m.key(msg)
	case tea.MouseMsg:
		if cmd, ok := m.click(msg); ok {
			return m, cmd
		}
		if m.focus == fieldHosts && !m.placing {
			_, where := m.screen()
			m.hostCur.Move(m.ctx.Keys, msg, len(m.hosts), where.rows)
		}
	case common.MeshMsg:
		m.inputs[fieldSource].Placeholder = m.ctx.Styles.Placeholder(SourceHint(m.ctx.Mesh))
		m.rerank()
	case debounceMsg:
		if msg.seq == m.seq {
			return m, m.rankCmd(msg.seq)
		}
	case rankedMsg:
		if msg.seq != m.seq {
			return m, nil // an answer for what the form said before
		}
		m.sizing = false
		if msg.err != nil {
			m.rankErr = msg.err
			return m, nil
		}
		r := msg.ranking
		m.estimate, m.rankErr = &r, nil
		m.rerank()
		m.hostCur.Pos = m.bestIndex()
	case placedMsg:
		if msg.seq != m.placeSeq {
			return m, nil
		}
		if msg.err != nil {
			m.placing, m.placeErr = false, msg.err
			return m, nil
		}
		p := msg.p
		m.placement = &p
		if msg.existed {
			return m, tea.Batch(m.watch(), common.Status(fmt.Sprintf("already placed: %s on %s (%s), nothing new placed", p.Model, p.Host, p.ID), false))
		}
		return m, m.watch()
	case progressMsg:
		if msg.seq != m.placeSeq || !m.placing {
			return m, nil // a wait given up: stopWatch has ended it
		}
		if msg.err != nil {
			m.pollErr = msg.err // the agent may be busy: the wait asks again
		} else {
			p := msg.p
			m.placement, m.pollErr = &p, nil
		}
		return m, common.Next(msg.ch)
	case waitedMsg:
		if msg.seq != m.placeSeq || !m.placing {
			return m, nil
		}
		return m, m.waited(msg)
	}
	return m, nil
}

// watch follows the admitted placement with the call `place --wait` makes (console.Conn.Wait),
// in a goroutine the command starts (Update does no I/O); the view hears each change through
// a re-armed read. Unlike a script, the view asks again when a look fails: the person sees why
// and may stop watching (esc), which ends the wait.
func (m *Model) watch() tea.Cmd {
	ctx, cancel := context.WithCancel(context.Background())
	m.stopWatch = cancel
	conn, p, seq := m.ctx.Conn, *m.placement, m.placeSeq
	return func() tea.Msg {
		if conn == nil {
			cancel()
			return waitedMsg{seq: seq, p: p, err: common.ErrNotConnected}
		}
		ch := make(chan tea.Msg, 1)
		send := func(msg tea.Msg) error {
			select {
			case ch <- msg:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		go func() {
			defer close(ch)
			defer cancel()
			final, err := conn.Wait(ctx, p, func(p api.Placement, err error) error {
				return send(progressMsg{seq: seq, ch: ch, p: p, err: err})
			})
			_ = send(waitedMsg{seq: seq, p: final, err: err})
		}()
		return <-ch
	}
}

// waited shows how the wait ended: ready, failed with its code, or gone.
func (m *Model) waited(msg waitedMsg) tea.Cmd {
	m.placing, m.stopWatch, m.pollErr = false, nil, nil
	if msg.p.ID != "" {
		p := msg.p
		m.placement = &p
	}
	var apiErr *api.Error
	switch {
	case errors.As(msg.err, &apiErr) && apiErr.Code == api.CodeNotFound:
		m.placeErr = fmt.Errorf("the placement is gone from %s: it was deleted", m.target)
		return nil
	case msg.err != nil:
		m.placeErr = msg.err
		return nil
	}
	m.remember(m.req.Source)
	if m.replaces != "" && m.replaces != m.placement.Model {
		return common.Status(fmt.Sprintf("replaced %s on %s by %s, ready", m.replaces, m.placement.Host, m.placement.Model), false)
	}
	return common.Status(fmt.Sprintf("%s is ready on %s", m.placement.Model, m.placement.Host), false)
}

func (m *Model) remember(source string) {
	recent := []string{source}
	for _, s := range m.ctx.Recent {
		if s != source && len(recent) < maxRecent {
			recent = append(recent, s)
		}
	}
	m.ctx.Recent = recent
}

// place sends the request to host; split, when set, asks host to be the main of a split.
func (m *Model) place(host string, split *api.SplitAsk) tea.Cmd {
	req, err := m.Request()
	if err != nil {
		return common.Status(err.Error(), true)
	}
	req.Split = split
	m.placeSeq++
	m.placing, m.req, m.target, m.replaces = true, req, host, ""
	m.placement, m.placeErr, m.pollErr = nil, nil, nil
	seq, conn := m.placeSeq, m.ctx.Conn
	return func() tea.Msg {
		if conn == nil {
			return placedMsg{seq: seq, err: common.ErrNotConnected}
		}
		ctx, cancel := context.WithTimeout(context.Background(), placeTimeout)
		defer cancel()
		p, existed, err := conn.PlaceOnce(ctx, host, req)
		return placedMsg{seq: seq, p: p, existed: existed, err: err}
	}
}

func (m *Model) clearDone() {
	m.placement, m.placeErr, m.pollErr, m.swapping = nil, nil, nil, nil
}

// bestIndex is the host the list starts at: the best that fits or swaps or, when none does,
// the one that came nearest, whose reason (wrapped whole under its row) is the cause to act on.
func (m *Model) bestIndex() int {
	for i, h := range m.hosts {
		if h.Verdict != api.VerdictRefused {
			return i
		}
	}
	if near, ok := console.Nearest(m.hosts); ok {
		for i, h := range m.hosts {
			if h.Host == near.Host {
				return i
			}
		}
	}
	return 0
}

func (m *Model) setFocus(f int) tea.Cmd {
	m.focus = f
	var cmd tea.Cmd
	for i := range m.inputs {
		if i == f {
			cmd = m.inputs[i].Focus()
		} else {
			m.inputs[i].Blur()
		}
	}
	if f != fieldSource {
		m.sugg = -1
	}
	return cmd
}

func (m *Model) key(msg tea.KeyMsg) tea.Cmd {
	k := m.ctx.Keys
	if m.swapping != nil {
		h := *m.swapping
		m.swapping = nil
		if key.Matches(msg, k.Confirm) {
			cmd := m.place(h.Host, nil)
			m.replaces = console.LoadedOn(m.ctx.Mesh, h.Host)
			return cmd
		}
		return common.Status("not placed on "+h.Host, false)
	}
	if m.placing {
		if key.Matches(msg, keyLeave) {
			m.placeSeq++
			m.placing = false
			if m.stopWatch != nil {
				m.stopWatch()
				m.stopWatch = nil
			}
			m.clearDone()
			return common.Status(fmt.Sprintf("still placing on %s: follow it in Models", m.target), false)
		}
		return nil
	}
	if m.placement != nil || m.placeErr != nil {
		switch {
		case key.Matches(msg, keyChat) && m.placement != nil && m.placement.State == api.StateReady:
			model := m.placement.Model
			m.clearDone()
			m.ctx.Navigate(common.PageChat, model)
			return nil
		case key.Matches(msg, keyDone):
			// Done: out of the form, the console's keys (2 for Models is a key, not text in
			// the source field); enter edits the form to place another.
			m.clearDone()
			return m.setFocus(fieldOut)
		case key.Matches(msg, k.Open):
			m.clearDone()
			return m.setFocus(fieldSource)
		}
		return nil
	}
	if key.Matches(msg, k.Spread) {
		m.spread = !m.spread
		m.rerank()
		m.hostCur.Pos = m.bestIndex()
		mode := "best fit: the tightest host first"
		if m.spread {
			mode = "spread: the host with the most room first"
		}
		return common.Status(mode, false)
	}
	if key.Matches(msg, keySplit) {
		return m.toggleSplit()
	}
	if key.Matches(msg, keyRuntime) {
		m.runtime = nextRuntime(m.runtime)
		return m.changed()
	}
	switch {
	case m.focus == fieldOut:
		return m.outKey(msg)
	case m.focus == fieldHosts && m.showsSplit():
		return m.splitKey(msg)
	case m.focus == fieldHosts:
		return m.hostsKey(msg)
	}
	return m.formKey(msg)
}

// toggleSplit shows the split plan in place of the ranked hosts, or the hosts again.
func (m *Model) toggleSplit() tea.Cmd {
	if m.showsSplit() {
		m.splitAsked = false
		if m.showsSplit() {
			return common.Status("no host holds it alone: the split is the only way to place it", false)
		}
		return common.Status("the ranked hosts, each for the whole model", false)
	}
	m.splitAsked = true
	if m.plan == nil {
		return common.Status("a split needs a GGUF model sized from its header (its layers): rank one first", false)
	}
	return common.Status("split across hosts: each holds a share of the layers (llama.cpp RPC)", false)
}

// click selects a ranked host under a left click (moving out of the form to the list); a
// click on the selected one places there, as enter does.
func (m *Model) click(msg tea.MouseMsg) (tea.Cmd, bool) {
	if msg.Action != tea.MouseActionPress || msg.Button != tea.MouseButtonLeft || m.swapping != nil {
		return nil, false
	}
	_, where := m.screen()
	line := msg.Y - where.top
	if line < 0 || line >= len(where.owner) {
		return nil, false
	}
	i := where.owner[line]
	if m.focus == fieldHosts && i == m.hostCur.Pos {
		return m.hostsKey(tea.KeyMsg{Type: tea.KeyEnter}), true
	}
	m.hostCur.Pos = i
	return m.setFocus(fieldHosts), true
}

// nextRuntime cycles inferred → each runtime → inferred.
func nextRuntime(rt api.Runtime) api.Runtime {
	if rt == "" {
		return api.Runtimes[0]
	}
	for i, r := range api.Runtimes {
		if r == rt && i+1 < len(api.Runtimes) {
			return api.Runtimes[i+1]
		}
	}
	return ""
}

// outKey is a key out of the form: enter edits it again, ↓ goes to what there is to choose;
// esc (and every other key the console leaves to the view) changes nothing.
func (m *Model) outKey(msg tea.KeyMsg) tea.Cmd {
	switch {
	case key.Matches(msg, keyToForm):
		return m.setFocus(fieldSource)
	case key.Matches(msg, keyToHosts) && m.choosable():
		m.hostCur.Pos = m.bestIndex()
		return m.setFocus(fieldHosts)
	}
	return nil
}

func (m *Model) hostsKey(msg tea.KeyMsg) tea.Cmd {
	k := m.ctx.Keys
	if key.Matches(msg, k.Up) && m.hostCur.Pos == 0 {
		return m.setFocus(fieldPriority) // above the first host is the form
	}
	if _, where := m.screen(); m.hostCur.Move(k, msg, len(m.hosts), where.rows) {
		return nil
	}
	switch {
	case key.Matches(msg, k.Back):
		return m.setFocus(fieldSource)
	case key.Matches(msg, k.Open):
		if m.hostCur.Pos >= len(m.hosts) {
			return m.setFocus(fieldSource) // nothing to choose: back to the form
		}
		h := m.hosts[m.hostCur.Pos]
		switch h.Verdict {
		case api.VerdictRefused:
			return common.Status(h.Host+" cannot take it: "+trimVerdict(h), true)
		case api.VerdictSwap:
			m.swapping = &h
			return nil
		}
		return m.place(h.Host, nil)
	}
	return nil
}

// splitKey is a key while the split plan is shown: enter sends it to its main, with the plan's
// members, as `mesh place --split --hosts …` does; the main plans and admits it again with
// every member, so what is placed is what the plan showed or a refusal saying why not.
func (m *Model) splitKey(msg tea.KeyMsg) tea.Cmd {
	k := m.ctx.Keys
	switch {
	case key.Matches(msg, k.Up):
		return m.setFocus(fieldPriority)
	case key.Matches(msg, k.Back):
		return m.setFocus(fieldSource)
	case key.Matches(msg, k.Open):
		if !m.plan.Fits {
			return common.Status("the split cannot be placed: "+strings.TrimPrefix(m.plan.Reason, "refused: "), true)
		}
		hosts := make([]string, len(m.plan.Members))
		for i, mb := range m.plan.Members {
			hosts[i] = mb.Host
		}
		return m.place(m.plan.Main, &api.SplitAsk{Hosts: hosts})
	}
	return nil
}

func (m *Model) formKey(msg tea.KeyMsg) tea.Cmd {
	sugg := m.Suggestions()
	switch msg.String() {
	case "tab":
		if m.focus == fieldSource && m.sugg < 0 && len(sugg) == 1 && m.inputs[fieldSource].Value() != "" {
			m.sugg = 0 // what was typed names one source: tab completes it, as a shell does
		}
		if m.focus == fieldSource && m.sugg >= 0 && m.sugg < len(sugg) {
			m.inputs[fieldSource].SetValue(sugg[m.sugg].Source)
			m.inputs[fieldSource].CursorEnd()
			m.sugg = -1
			return m.changed()
		}
		return m.setFocus(m.focus + 1)
	case "shift+tab":
		return m.setFocus(max(m.focus-1, fieldSource))
	case "down":
		if m.focus == fieldSource && len(sugg) > 0 && m.sugg < len(sugg)-1 {
			m.sugg++
			return nil
		}
		return m.setFocus(m.focus + 1)
	case "up":
		if m.focus == fieldSource && m.sugg >= 0 {
			m.sugg--
			return nil
		}
		return m.setFocus(max(m.focus-1, fieldSource))
	case "enter":
		if m.focus == fieldSource && m.sugg >= 0 && m.sugg < len(sugg) {
			m.inputs[fieldSource].SetValue(sugg[m.sugg].Source)
			m.inputs[fieldSource].CursorEnd()
			m.sugg = -1
			return m.changed()
		}
		return m.enter()
	case "esc":
		// Leaving the form gives the global keys back (tab to other views, q).
		return m.setFocus(fieldOut)
	}
	before := m.inputs[m.focus].Value()
	var cmd tea.Cmd
	m.inputs[m.focus], cmd = m.inputs[m.focus].Update(msg)
	if m.inputs[m.focus].Value() == before {
		return cmd
	}
	if m.focus == fieldSource {
		m.sugg, m.srcErr = -1, nil
	}
	return tea.Batch(cmd, m.changed())
}

// enter in the form moves to the ranked hosts, and only when there are some to choose: an
// invalid source keeps the focus in its field with the reason under it, and a ranking still
// on its way says so. Text typed on then stays text, never a burst of global keys.
func (m *Model) enter() tea.Cmd {
	_, err := m.Request()
	switch {
	case errors.Is(err, errIncomplete):
		m.srcErr = sourceError(m.inputs[fieldSource].Value())
		if m.srcErr == nil {
			m.srcErr = errIncomplete
		}
		return m.setFocus(fieldSource)
	case err != nil:
		return nil // the form shows why under its fields
	case m.sizing:
		return common.Status("still sizing the model: enter again once the hosts are ranked", false)
	case len(m.hosts) == 0 && !m.showsSplit():
		return nil // why there is nothing to choose is on screen (cannot size it, no agent)
	}
	m.hostCur.Pos = m.bestIndex()
	return m.setFocus(fieldHosts)
}

// SourceHint is the source field's placeholder: examples of each kind of source, or, when every
// agent is offline (a local mesh, which refuses hf:// and https://), what its hosts hold.
func SourceHint(v api.MeshView) string {
	const examples = "hailo://qwen2:1.5b · ollama://llama3.2:3b · hf://owner/repo/file.gguf · /path/x.gguf"
	kindOf := map[api.Runtime]string{api.RuntimeHailoOllama: "hailo://", api.RuntimeOllama: "ollama://", api.RuntimeLlamaServer: "GGUF files"}
	agents := console.Agents(v)
	var kinds []string
	for _, a := range agents {
		if !a.Host.Offline {
			return examples
		}
		for _, e := range a.Host.Engines {
			if k := kindOf[e.Runtime]; e.Present && k != "" && !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	if len(kinds) == 0 {
		return examples
	}
	slices.Sort(kinds) // the same whatever the hosts' order
	return "offline mesh: ↓ lists its " + strings.Join(kinds, ", ")
}

// Suggestion is a source the form offers, with where it comes from.
type Suggestion struct {
	Source string
	Note   string
}

// Suggestions are sources that match what is typed: recent ones first, then the Hailo zoo of
// hosts running hailo-ollama, then Ollama's local tags; the exact text typed is not repeated.
func (m *Model) Suggestions() []Suggestion {
	all := Suggest(m.ctx.Mesh, m.ctx.Recent)
	typed := strings.ToLower(strings.TrimSpace(m.inputs[fieldSource].Value()))
	var out []Suggestion
	for _, s := range all {
		low := strings.ToLower(s.Source)
		if low == typed || (typed != "" && !strings.Contains(low, typed)) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// Suggest lists every source the mesh offers without a pull, and the recent ones.
func Suggest(v api.MeshView, recent []string) []Suggestion {
	var out []Suggestion
	seen := map[string]int{}
	for _, r := range recent {
		if _, ok := seen[r]; !ok {
			seen[r] = len(out)
			out = append(out, Suggestion{Source: r, Note: "recent"})
		}
	}
	type offer struct{ source, what, host string }
	var offers []offer
	for _, a := range console.Agents(v) {
		for _, e := range a.Host.Engines {
			if !e.Present {
				continue
			}
			for _, name := range e.Models {
				switch e.Runtime {
				case api.RuntimeHailoOllama:
					offers = append(offers, offer{"hailo://" + name, "zoo", a.Name})
				case api.RuntimeOllama:
					offers = append(offers, offer{"ollama://" + name, "local", a.Name})
				case api.RuntimeLlamaServer:
					// A GGUF file on that host: a file:// source places it there without a pull.
					offers = append(offers, offer{"file://" + name, "file", a.Name})
				}
			}
		}
	}
	sort.SliceStable(offers, func(i, j int) bool {
		if offers[i].what != offers[j].what {
			return offers[i].what > offers[j].what // the zoo first (it is what a Hailo runs), then local tags and files
		}
		return offers[i].source < offers[j].source
	})
	for _, o := range offers {
		if i, ok := seen[o.source]; ok {
			if out[i].Note != "recent" && !strings.Contains(out[i].Note, o.host) {
				out[i].Note += ", " + o.host
			}
			continue
		}
		seen[o.source] = len(out)
		out = append(out, Suggestion{Source: o.source, Note: o.what + " on " + o.host})
	}
	return out
}

// trimVerdict is a host's reason without the verdict word the table already shows.
func trimVerdict(h api.Ranked) string {
	return strings.TrimPrefix(h.Reason, string(h.Verdict)+": ")
}

// Hint says what would make a refused request fit, by the refusal of the host that came
// nearest to taking it (console.Nearest: the cause, not the most common verdict).
func Hint(hosts []api.Ranked) string {
	near, ok := console.Nearest(hosts)
	if !ok {
		return ""
	}
	switch near.Code {
	case api.CodeInsufficientMemory:
		return "free memory (delete a model in Models), or pick a smaller quantisation or context"
	case api.CodeAcceleratorMissing:
		return "hailo:// models need a host with a Hailo-10H running hailo-ollama"
	case api.CodeEngineUnavailable:
		return "install the runtime on a host (Hosts → enter shows how), or pick a source for one that is there"
	case api.CodeNamespaceNotAllow:
		return "use a namespace the hosts allow (Hosts → enter lists them)"
	case api.CodeRuntimeMismatch:
		return "ctrl+r until the runtime is inferred from the source"
	case api.CodeMemoryCheckFailed:
		return "the size could not be read before pulling: check the source"
	case api.CodeContextLimit:
		return "lower the context (tab to it) to the one the model was trained for"
	case api.CodeNotFound:
		return "check the model's name and tag: ↓ in the source field lists what the hosts offer"
	case api.CodeInvalidSource:
		return "sources look like hailo://name:tag, ollama://name:tag, hf://owner/repo/file.gguf or /abs/file.gguf"
	}
	return ""
}
