// Package tui is the interactive console: a root model that owns the window, the tab bar, the
// `:` command line, help and the status line, and routes messages to one sub-model per view
// (tui/views/…). The mesh reaches it through tui/console; all I/O runs inside tea.Cmd closures.
package tui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/cmdline"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/keymap"
	"github.com/llmkube/mesh/tui/render"
	"github.com/llmkube/mesh/tui/styles"
	"github.com/llmkube/mesh/tui/views/hosts"
)

// Options tune the console.
type Options struct {
	// Renderer draws the styles; nil = lipgloss's default (which honours NO_COLOR).
	Renderer *lipgloss.Renderer
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// Tick is the sampling period of memory charts and elapsed times (default 1 s).
	Tick time.Duration
	// HistoryFile keeps the `:` command history between runs; "" keeps it for this run only
	// (Run uses cmdline.DefaultPath).
	HistoryFile string
	// QuitStops names what quitting also stops (llmkube-demo: "the demo mesh"): while models
	// run, q asks before it ends them all. "": quitting leaves the mesh as it is, q quits.
	QuitStops string
	// Note is a short line the title carries (llmkube-demo: where scripts find the mesh).
	Note string
}

// opener is a view that opens with an argument (a host, a model, a source).
type opener interface {
	Open(arg string) tea.Cmd
}

// App is the root model.
type App struct {
	ctx    *common.Context
	conn   *console.Conn
	pages  map[common.Page]common.Component
	active common.Page
	back   common.Page // where esc returns from detail and help
	width  int
	height int
	tick   time.Duration

	mouseOff bool // the terminal's own selection is back: the console gets no mouse events

	cmdline   *cmdline.Line
	cmdActive bool
	history   *cmdline.File // nil: the command history is not kept between runs
	histSeq   int

	status    string
	statusErr bool
	statusAt  time.Time

	note      string // Options.Note
	quitStops string // Options.QuitStops
	quitAsk   int    // q asked: the models quitting would stop, until the next key answers

	changed    <-chan struct{}
	stopChange func()
	events     chan api.Event
	stopEvents context.CancelFunc
}

// Messages of the root's own subscriptions.
type (
	meshChangedMsg  struct{}
	eventsClosedMsg struct{}
)

// New builds the console over a connection (nil: the console shows that it is not connected).
func New(conn *console.Conn, opts Options) *App {
	r := opts.Renderer
	if r == nil {
		r = lipgloss.DefaultRenderer()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if opts.Tick <= 0 {
		opts.Tick = time.Second
	}
	ctx := &common.Context{
		Styles: styles.New(r),
		Keys:   keymap.Default(),
		Memory: common.NewHistory(300),
		Now:    now,
		Conn:   conn,
	}
	var viewErr error
	if conn != nil {
		ctx.Mesh, viewErr = scoped(conn)
	}
	a := &App{ctx: ctx, conn: conn, pages: map[common.Page]common.Component{}, tick: opts.Tick, quitStops: opts.QuitStops, note: opts.Note}
	a.cmdline = cmdline.New(ctx.Styles, "hosts · models · place SOURCE · chat MODEL · host NAME · … · tab completes", a.completions)
	if opts.HistoryFile != "" {
		a.history = &cmdline.File{Path: opts.HistoryFile}
	}
	for p, mk := range builtinViews() {
		a.pages[p] = mk(ctx)
	}
	if viewErr != nil {
		a.status, a.statusErr, a.statusAt = viewErr.Error(), true, now()
	}
	return a
}

// scoped is the mesh as the connection's token may see it: a namespace token sees its own
// namespace, as in the headless commands (console.Conn.ScopedView); a refused token sees no
// member, and the error says why.
func scoped(conn *console.Conn) (api.MeshView, error) {
	v, err := conn.ScopedView()
	if err != nil {
		raw := conn.View()
		return api.MeshView{Mesh: raw.Mesh, Self: raw.Self, At: raw.At}, err
	}
	return v, nil
}

// Context exposes the shared context (tests read it).
func (a *App) Context() *common.Context { return a.ctx }

// Active is the page on screen.
func (a *App) Active() common.Page { return a.active }

func (a *App) Init() tea.Cmd {
	cmds := []tea.Cmd{a.tickCmd(), a.loadHistory()}
	if a.conn != nil {
		a.changed, a.stopChange = a.conn.Subscribe()
		cmds = append(cmds, a.waitMesh())
		a.events = make(chan api.Event, 256)
		ectx, cancel := context.WithCancel(context.Background())
		a.stopEvents = cancel
		go func() {
			a.conn.Events(ectx, nil, func(ev api.Event) {
				select {
				case a.events <- ev:
				case <-ectx.Done():
				}
			})
			close(a.events)
		}()
		cmds = append(cmds, a.waitEvent())
	}
	for _, p := range a.pages {
		cmds = append(cmds, p.Init())
	}
	a.recordMemory()
	return tea.Batch(cmds...)
}

func (a *App) waitMesh() tea.Cmd {
	ch := a.changed
	return func() tea.Msg {
		if _, ok := <-ch; !ok {
			return nil
		}
		return meshChangedMsg{}
	}
}

func (a *App) waitEvent() tea.Cmd {
	ch := a.events
	return func() tea.Msg {
		ev, ok := <-ch
		if !ok {
			return eventsClosedMsg{}
		}
		return common.EventMsg{Event: ev}
	}
}

func (a *App) tickCmd() tea.Cmd {
	return tea.Tick(a.tick, func(t time.Time) tea.Msg { return common.TickMsg(t) })
}

// stop ends the root's subscriptions; the caller closes the connection (leaving the mesh).
func (a *App) stop() {
	if a.stopChange != nil {
		a.stopChange()
	}
	if a.stopEvents != nil {
		a.stopEvents()
	}
}

func (a *App) recordMemory() {
	var mm []common.MemberMemory
	for _, m := range a.ctx.Mesh.Members {
		if m.Host == nil {
			continue
		}
		mem := m.Host.Memory
		mm = append(mm, common.MemberMemory{Name: m.Name, Committed: mem.Committed, Reserved: mem.Reserved, Available: mem.Available, Budget: mem.Budget, Total: mem.Total})
	}
	a.ctx.Memory.Record(a.ctx.Now(), mm)
}

func (a *App) setSize(w, h int) {
	a.width, a.height = w, h
	a.cmdline.SetWidth(w)
	body := a.bodyHeight(a.header(), a.footer())
	for _, p := range a.pages {
		p.SetSize(w, body)
	}
}

func (a *App) page() common.Component { return a.pages[a.active] }

func (a *App) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		a.setSize(msg.Width, msg.Height)
		return a, nil
	case tea.KeyMsg:
		return a, a.keys(msg)
	case meshChangedMsg:
		var err error
		a.ctx.Mesh, err = scoped(a.conn)
		cmds := []tea.Cmd{a.broadcast(common.MeshMsg{View: a.ctx.Mesh}), a.waitMesh()}
		if err != nil {
			cmds = append(cmds, common.Status(err.Error(), true))
		}
		return a, tea.Batch(cmds...)
	case common.EventMsg:
		a.ctx.AddEvent(msg.Event)
		return a, tea.Batch(a.broadcast(msg), a.waitEvent())
	case eventsClosedMsg:
		return a, nil
	case common.TickMsg:
		a.recordMemory()
		if a.status != "" && a.ctx.Now().Sub(a.statusAt) > 8*time.Second {
			a.status = ""
		}
		return a, tea.Batch(a.broadcast(msg), a.tickCmd())
	case historyMsg:
		if msg.err != nil {
			return a, common.Status("command history: "+msg.err.Error(), true)
		}
		if msg.loaded != nil {
			a.cmdline.SetHistory(append(msg.loaded, a.cmdline.History()...))
		}
		return a, nil
	case common.StatusMsg:
		a.status, a.statusErr, a.statusAt = msg.Text, msg.Err, a.ctx.Now()
		return a, nil
	case tea.MouseMsg:
		return a, a.mouse(msg)
	}
	// Everything else is a view's own asynchronous result: every view sees it and keeps what
	// is tagged for it.
	return a, a.broadcast(msg)
}

// broadcast sends msg to every view (mesh changes, events, ticks, tagged async results).
func (a *App) broadcast(msg tea.Msg) tea.Cmd {
	var cmds []tea.Cmd
	for page := range a.pages {
		cmds = append(cmds, a.update(page, msg))
	}
	return tea.Batch(cmds...)
}

func (a *App) forward(msg tea.Msg) tea.Cmd {
	if a.page() == nil {
		return nil
	}
	return a.update(a.active, msg)
}

// update hands msg to one view and keeps the model its Update returns, as bubbletea's
// contract has it: a view may answer with a new value rather than change itself. A page switch
// the view asked for is made here, before the next message (the next key) is handled.
func (a *App) update(page common.Page, msg tea.Msg) tea.Cmd {
	next, cmd := a.pages[page].Update(msg)
	if c, ok := next.(common.Component); ok {
		a.pages[page] = c
	}
	if nav, ok := a.ctx.TakeNavigation(); ok {
		return tea.Batch(cmd, a.navigate(nav.Page, nav.Arg))
	}
	return cmd
}

func (a *App) navigate(p common.Page, arg string) tea.Cmd {
	if _, ok := a.pages[p]; !ok {
		return common.Status(p.Title()+" is not available in this build", true)
	}
	if p == common.PageHelp && a.active != common.PageHelp {
		if h, ok := a.pages[p].(interface{ Show([]common.HelpSection) }); ok {
			h.Show(a.helpFor(a.active))
		}
	}
	if p == common.PageHostDetail || p == common.PageHelp {
		if a.active != common.PageHostDetail && a.active != common.PageHelp {
			a.back = a.active
		}
	}
	a.active = p
	if o, ok := a.pages[p].(opener); ok {
		return o.Open(arg)
	}
	return nil
}

// keys handles one key message. Bubbletea v1 delivers printable keys that arrive in one read
// (a fast typist, tmux send-keys, a key repeat under load) as one message with several runes,
// which no binding matches: each rune is handled as its own key press, in order, so `jj` moves
// two rows and `2j` switches to Models and moves there. A paste (bracketed, msg.Paste) stays
// one message: it is text for a text field, never a burst of commands.
//
// Esc followed at once by a key arrives as that key with Alt (tmux, ssh, a quick hand): it is
// the two presses it was, but in a text field for the letters its word chords use (alt+b and
// alt+f move by words): esc then 1 in the place form leaves it for Hosts, not "1" typed.
func (a *App) keys(msg tea.KeyMsg) tea.Cmd {
	var cmds []tea.Cmd
	if msg.Type == tea.KeyRunes && msg.Alt && !msg.Paste && (!a.typing() || !wordChord(msg.Runes)) {
		cmds = append(cmds, a.key(tea.KeyMsg{Type: tea.KeyEsc}))
		msg.Alt = false
		if len(msg.Runes) < 2 {
			return tea.Batch(append(cmds, a.key(msg))...)
		}
	}
	if msg.Type != tea.KeyRunes || len(msg.Runes) < 2 || msg.Paste {
		return a.key(msg)
	}
	for _, r := range msg.Runes {
		cmds = append(cmds, a.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: msg.Alt}))
	}
	return tea.Batch(cmds...)
}

// wordChord: alt with these runes edits a text field (bubbles' textinput and textarea: words
// forward, backward, deleted, capitalised, lower and upper case; the start and the end).
func wordChord(runes []rune) bool {
	return len(runes) == 1 && strings.ContainsRune("bfdclu<>", runes[0])
}

// typing reports whether a text field has the keys: the command line or a view's.
func (a *App) typing() bool {
	p := a.page()
	return a.cmdActive || (p != nil && p.Capturing())
}

// tabTaker is a view whose text fields use tab themselves (the place form's next field), so
// tab does not switch views while one of them is being typed.
type tabTaker interface{ TakesTab() bool }

// helpFor is the help of a page: its own keys first, then the ones of every view and the
// command line.
func (a *App) helpFor(p common.Page) []common.HelpSection {
	var secs []common.HelpSection
	switch v := a.pages[p].(type) {
	case common.FullHelper:
		secs = v.FullHelp()
	case common.Component:
		secs = []common.HelpSection{{Title: p.Title(), Keys: v.ShortHelp()}}
	}
	k := a.ctx.Keys
	secs = append(secs, common.HelpSection{Title: "Everywhere", Keys: append(k.Global(), k.PrevTab,
		common.As(k.Back, "back from a host or the help"), k.Mouse, key.NewBinding(key.WithHelp("ctrl+c", "quit, also while typing")))})
	return append(secs, commandHelp())
}

func (a *App) key(msg tea.KeyMsg) tea.Cmd {
	k := a.ctx.Keys
	if msg.String() == "ctrl+c" {
		return a.quit()
	}
	if a.quitAsk > 0 {
		a.quitAsk = 0
		if key.Matches(msg, k.Confirm) {
			return a.quit()
		}
		return common.Status("not quitting: "+a.quitStops+" runs on", false)
	}
	if key.Matches(msg, k.Mouse) {
		return a.toggleMouse()
	}
	if a.cmdActive {
		return a.commandKey(msg)
	}
	// A view taking text gets every key but ctrl+c, and tab unless its fields use tab.
	if p := a.page(); p != nil && p.Capturing() {
		tt, ok := p.(tabTaker)
		tabs := key.Matches(msg, k.NextTab) || key.Matches(msg, k.PrevTab)
		if !tabs || (ok && tt.TakesTab()) {
			return a.forward(msg)
		}
	}
	switch {
	case key.Matches(msg, k.Quit):
		if n := a.running(); n > 0 && a.quitStops != "" {
			a.quitAsk = n // a stray q in text meant for a field must not end every placement
			return nil
		}
		return a.quit()
	case key.Matches(msg, k.Command):
		a.cmdActive = true
		return a.cmdline.Focus()
	case key.Matches(msg, k.Help):
		if a.active == common.PageHelp {
			a.active = a.back
			return nil
		}
		return a.navigate(common.PageHelp, "")
	case key.Matches(msg, k.Back) && (a.active == common.PageHostDetail || a.active == common.PageHelp):
		a.active = a.back
		return nil
	case key.Matches(msg, k.NextTab):
		return a.navigate(a.tabStep(1), "")
	case key.Matches(msg, k.PrevTab):
		return a.navigate(a.tabStep(-1), "")
	case key.Matches(msg, k.Hosts):
		return a.navigate(common.PageHosts, "")
	case key.Matches(msg, k.Models):
		return a.navigate(common.PageModels, "")
	case key.Matches(msg, k.Place):
		return a.navigate(common.PagePlace, "")
	case key.Matches(msg, k.Chat):
		return a.navigate(common.PageChat, "")
	case key.Matches(msg, k.Events):
		return a.navigate(common.PageEvents, "")
	case key.Matches(msg, k.Doctor):
		return a.navigate(common.PageDoctor, "")
	}
	return a.forward(msg)
}

// commandKey is a key typed into the `:` command line.
func (a *App) commandKey(msg tea.KeyMsg) tea.Cmd {
	switch msg.String() {
	case "esc":
		a.cmdActive = false
		a.cmdline.Close()
		return nil
	case "enter":
		line := a.cmdline.Value()
		a.cmdActive = false
		a.cmdline.Close()
		var save tea.Cmd
		if a.cmdline.Remember(line) {
			save = a.saveHistory()
		}
		return tea.Batch(a.command(line), save)
	}
	return a.cmdline.Key(msg)
}

// tabStep is the tab d steps from the one in front; from a host's detail or the help, from
// the tab they were opened over.
func (a *App) tabStep(d int) common.Page {
	from := a.active
	if from == common.PageHostDetail || from == common.PageHelp {
		from = a.back
	}
	i := 0
	for j, p := range common.Tabs {
		if p == from {
			i = j
		}
	}
	n := len(common.Tabs)
	return common.Tabs[((i+d)%n+n)%n]
}

// running counts the models the mesh holds as this console sees it: a failed or evicted
// placement holds nothing, and quitting stops nothing of it.
func (a *App) running() int {
	n := 0
	for _, m := range a.ctx.Mesh.Members {
		n += hosts.Held(m)
	}
	return n
}

func (a *App) quit() tea.Cmd {
	a.stop()
	return tea.Quit
}

func (a *App) View() string {
	if a.width == 0 {
		return "starting…"
	}
	body := ""
	if p := a.page(); p != nil {
		body = p.View()
	}
	top, bottom := a.header(), a.footer()
	body = render.Place(body, a.width, a.bodyHeight(top, bottom))
	return top + "\n" + body + "\n" + bottom
}

// The chrome around a view is measured from what its styles draw, never counted as lines: a
// border or padding given to one of them moves the view, and what the mouse hits, with it.

// bodyHeight is the rows left to the view between the header and the footer as drawn.
func (a *App) bodyHeight(top, bottom string) int {
	return max(a.height-common.RowsOf(top, bottom), 1)
}

// titleLine is the header's first line: the console, the mesh, and how it is reached.
func (a *App) titleLine() string {
	st := a.ctx.Styles
	mode := "not connected"
	if a.conn != nil {
		if a.conn.Mode() == console.ModeAgent {
			mode = "via one agent's API"
		} else {
			mode = "joined as a console"
		}
	}
	mesh := a.ctx.Mesh.Mesh
	if mesh == "" {
		mesh = "—"
	}
	line := st.Title.Render("llmkube mesh") + st.Muted.Render(" · "+mesh+" · "+mode)
	if a.mouseOff {
		line += st.Warn.Render(" · mouse off (ctrl+y)")
	}
	if a.note == "" {
		return render.Cut(line, a.width)
	}
	if with := line + st.Muted.Render(" · "+a.note); lipgloss.Width(with) <= a.width {
		return with
	}
	// The note is for copying (where scripts find the demo mesh): on a line of its own rather
	// than cut, and if even that is too narrow, its end (the file's name) is kept.
	return render.Cut(line, a.width) + "\n" + st.Muted.Render(render.CutMiddle(a.note, a.width/3, a.width))
}

// tabLabel is a tab's label as the tab bar draws it.
func (a *App) tabLabel(t tab) string {
	if t.page == a.active {
		return a.ctx.Styles.TabActive.Render(t.label)
	}
	return a.ctx.Styles.TabIdle.Render(t.label)
}

// header is the title line over the tab bar.
func (a *App) header() string {
	var labels []string
	for i, t := range a.tabs() {
		if i > 0 {
			labels = append(labels, tabGap)
		}
		labels = append(labels, a.tabLabel(t))
	}
	return a.titleLine() + "\n" + render.CutLines(lipgloss.JoinHorizontal(lipgloss.Top, labels...), a.width)
}

func (a *App) footer() string {
	st := a.ctx.Styles
	if a.quitAsk > 0 {
		models := "models"
		if a.quitAsk == 1 {
			models = "model"
		}
		return render.Cut(st.Danger.Render(fmt.Sprintf("quit? it stops %s and its %d %s (y/n)", a.quitStops, a.quitAsk, models)), a.width)
	}
	if a.cmdActive {
		// bubbles pads the line to its width before the completion: what passes the width is
		// that padding, cut without an ellipsis.
		return ansi.Truncate(a.cmdline.View(), a.width, "")
	}
	if a.status != "" {
		if a.statusErr {
			return render.Cut(st.Error.Render(a.status), a.width)
		}
		return render.Cut(st.OK.Render(a.status), a.width)
	}
	return render.Cut(a.drawHelp(a.footerKeys()), a.width)
}

// helpSep separates the keys of the footer.
const helpSep = " · "

// drawHelp draws keys as the footer shows them.
func (a *App) drawHelp(bs []key.Binding) string {
	st := a.ctx.Styles
	parts := make([]string, len(bs))
	for i, b := range bs {
		h := b.Help()
		parts[i] = st.HelpKey.Render(h.Key) + " " + st.HelpDesc.Render(h.Desc)
	}
	return strings.Join(parts, st.Muted.Render(helpSep))
}

// footerKeys are the keys the footer offers at this width. The way out and the way to help
// are always there; the view's keys fill what is left, most important first. Typing in a text
// field, q and ? are text: ctrl+c is the way out.
func (a *App) footerKeys() []key.Binding {
	k := a.ctx.Keys
	tail := []key.Binding{k.Command, k.Help, k.Quit}
	var binds []key.Binding
	if p := a.page(); p != nil {
		binds = p.ShortHelp()
		if p.Capturing() {
			tail = []key.Binding{keyQuitTyping}
		}
	}
	if lipgloss.Width(a.drawHelp(tail)) > a.width && len(tail) > 2 {
		tail = tail[1:] // ":" goes first, "? help · q quit" stay
	}
	n := 0
	for n < len(binds) && lipgloss.Width(a.drawHelp(append(binds[:n+1:n+1], tail...))) <= a.width {
		n++
	}
	return append(binds[:n:n], tail...)
}

// keyQuitTyping is the way out while a text field has the keys.
var keyQuitTyping = key.NewBinding(key.WithKeys("ctrl+c"), key.WithHelp("ctrl+c", "quit"))

// Run shows the console on the terminal until the person quits or ctx ends. Logs must already
// go to a file: the terminal belongs to the console. The caller, who connected, closes conn
// afterwards (leaving the mesh gracefully).
func Run(ctx context.Context, conn *console.Conn, opts Options) error {
	if opts.HistoryFile == "" {
		if p, err := cmdline.DefaultPath(); err == nil {
			opts.HistoryFile = p
		}
	}
	app := New(conn, opts)
	ctx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	stopWatch := watchHangup(os.Stdin, hangUp)
	defer stopWatch()
	p := tea.NewProgram(app, tea.WithAltScreen(), tea.WithMouseCellMotion(), tea.WithContext(ctx))
	_, err := p.Run()
	app.stop()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil // a signal, or the terminal gone: the caller cleans up as after q
	}
	return err
}
