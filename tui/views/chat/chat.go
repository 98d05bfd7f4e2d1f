// Package chat talks to any ready model of the mesh through the agents' gateway: a streaming
// transcript, a multi-line input, the host, runtime, time to first token and speed shown live,
// Esc really cancelling a generation, and each model's conversation kept while the console runs.
package chat

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textarea"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
)

// Bounds on a generation: the whole answer, and the silence between two tokens (a host that
// died mid-answer must not leave the chat waiting forever).
const (
	maxAnswer   = 10 * time.Minute
	maxSilence  = 90 * time.Second
	inputHeight = 3
)

var (
	keyModels = key.NewBinding(key.WithKeys("ctrl+o"), key.WithHelp("ctrl+o", "models"))
	keyClear  = key.NewBinding(key.WithKeys("ctrl+l"), key.WithHelp("ctrl+l", "clear"))
	keyFocus  = key.NewBinding(key.WithKeys("i", "enter"), key.WithHelp("i", "type"))
	keyBlur   = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "leave input"))
	keyChoose = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "choose"))
	keyClose  = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "close"))
	keyScroll = key.NewBinding(key.WithKeys("pgup", "pgdown"), key.WithHelp("pgup/pgdn", "scroll"))
)

// Turn is one message of a conversation.
type Turn struct {
	Role    string // "user" or "assistant"
	Text    string
	Stopped bool   // the person stopped the generation
	Err     string // why the answer failed
	Host    string
	Runtime api.Runtime
	TTFT    time.Duration
	TokPS   float64
	Took    time.Duration // the whole answer, once complete
}

// Model is the chat view.
type Model struct {
	ctx    *common.Context
	width  int
	height int

	model string            // the model chatted with
	convs map[string][]Turn // every model's conversation, kept while the console runs

	pickOpen bool
	pick     common.Cursor // the model chosen in the picker, and its scroll

	input textarea.Model
	// The transcript, rendered on each change, and where it is scrolled to: following the
	// newest line until the reader scrolls up.
	lines  []string
	scroll common.Scroll

	// The generation in flight; seq drops what a stopped one still sends.
	seq       int
	streaming bool
	cancel    context.CancelFunc
	started   time.Time
	first     time.Time
	last      time.Time
	deltas    int
}

// chunkMsg is one piece of an answer; endMsg ends it. Both carry their channel so the reader
// is re-armed for a stream even after it was stopped, until the stream closes it: the
// goroutine behind it never blocks on a send nobody reads.
type (
	chunkMsg struct {
		seq   int
		ch    <-chan tea.Msg
		delta apiclient.ChatDelta
		at    time.Time
	}
	endMsg struct {
		seq  int
		host string
		err  error
		at   time.Time
	}
)

var (
	errSilent = fmt.Errorf("no token for %s: the host stopped answering", maxSilence)
)

// New returns the chat view.
func New(ctx *common.Context) *Model {
	in := common.NewTextArea(ctx.Styles, "Message the model · enter sends · alt+enter or ctrl+j for a new line")
	in.KeyMap.InsertNewline = ctx.Keys.Newline
	in.CharLimit = 0
	in.MaxHeight = 0
	in.SetHeight(inputHeight)
	m := &Model{ctx: ctx, convs: map[string][]Turn{}, input: in, scroll: common.Scroll{Follow: true}}
	m.input.Focus()
	return m
}

func (m *Model) Init() tea.Cmd { return nil }

// Open chats with model (from Models, Place or ":chat model"); "" keeps the current one.
func (m *Model) Open(model string) tea.Cmd {
	if model != "" && model != m.model {
		if m.streaming {
			m.stop()
		}
		m.model = model
	}
	m.pickOpen = false
	m.refresh(true)
	return m.input.Focus()
}

// Chatting is the model chatted with ("" before one is chosen).
func (m *Model) Chatting() string { return m.model }

// Conversation is a model's transcript so far.
func (m *Model) Conversation(model string) []Turn { return m.convs[model] }

// Streaming reports whether an answer is being generated.
func (m *Model) Streaming() bool { return m.streaming }

func (m *Model) SetSize(w, h int) {
	m.width, m.height = w, h
	m.input.SetWidth(max(w, 10))
	m.refresh(false) // the transcript wraps at the new width
}

// transcriptHeight is what is left between the status line and its rule above and the rule and
// the input below, as they are drawn.
func (m *Model) transcriptHeight() int {
	rule := m.rule()
	return max(m.height-common.RowsOf(m.statusLine(), rule, rule, m.input.View()), 1)
}

func (m *Model) picking() bool { return m.pickOpen || m.model == "" }

// Capturing while the message is typed. The model picker is a list, not a text field: the
// global keys (views, tab, :, ?, q) work over it.
func (m *Model) Capturing() bool { return m.input.Focused() && !m.picking() }

func (m *Model) ShortHelp() []key.Binding {
	k := m.ctx.Keys
	switch {
	case m.picking() && m.model == "":
		return []key.Binding{k.Up, k.Down, keyChoose} // nothing to go back to: esc closes nothing
	case m.picking():
		return []key.Binding{k.Up, k.Down, keyChoose, keyClose}
	case m.streaming:
		return []key.Binding{k.Stop, keyScroll}
	case m.input.Focused():
		// The way out of the input second: at 80 columns the footer keeps the first ones.
		return []key.Binding{k.Send, keyBlur, k.Newline, keyModels, keyClear, keyScroll}
	}
	return []key.Binding{keyFocus, k.Up, k.Down, keyModels}
}

// FullHelp lists every key of the view, for the help view.
func (m *Model) FullHelp() []common.HelpSection {
	k := m.ctx.Keys
	return []common.HelpSection{
		{Title: "Chat", Keys: []key.Binding{
			k.Send, k.Newline, k.Stop, keyModels, keyClear, keyScroll, keyBlur,
			common.As(keyFocus, "type (when the input is left)"), common.As(k.Up, "scroll (input left)"), common.As(k.Down, "scroll (input left)"),
		}},
		{Title: "Chat: choosing a model", Keys: []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom, keyChoose, keyClose}},
	}
}

// Choice is a ready model the picker offers, with where it runs.
type Choice struct {
	Model   string
	Hosts   []string
	Runtime api.Runtime
}

// Choices are the models ready somewhere in the mesh, by name.
func Choices(v api.MeshView) []Choice {
	byName := map[string]*Choice{}
	var out []*Choice
	for _, p := range console.Placements(v) {
		if p.State != api.StateReady {
			continue
		}
		name := p.QualifiedName() // what the gateway resolves; another namespace's is no replica
		c, ok := byName[name]
		if !ok {
			c = &Choice{Model: name, Runtime: p.Runtime}
			byName[name] = c
			out = append(out, c)
		}
		c.Hosts = append(c.Hosts, p.Host)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	res := make([]Choice, len(out))
	for i, c := range out {
		res[i] = *c
	}
	return res
}

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		return m, m.key(msg)
	case tea.MouseMsg:
		if m.picking() {
			return m, m.pickClick(msg)
		}
		m.scroll.Update(m.ctx.Keys, msg, len(m.lines), m.transcriptHeight())
		return m, nil
	case chunkMsg:
		next := common.Next(msg.ch)
		if msg.seq != m.seq || !m.streaming {
			return m, next // a stopped answer: drain it, show nothing
		}
		m.addChunk(msg)
		return m, next
	case endMsg:
		if msg.seq != m.seq || !m.streaming {
			return m, nil
		}
		m.finish(msg)
	case common.MeshMsg:
		m.pick.Clamp(len(Choices(m.ctx.Mesh)), m.pickRows())
	}
	return m, nil
}

func (m *Model) key(msg tea.KeyMsg) tea.Cmd {
	k := m.ctx.Keys
	if m.picking() {
		return m.pickKey(msg)
	}
	// Only pgup and pgdown page while typing: ctrl+u and ctrl+d edit the input.
	if s := msg.String(); s == "pgup" || s == "pgdown" {
		m.scroll.Update(k, msg, len(m.lines), m.transcriptHeight())
		return nil
	}
	if m.streaming && key.Matches(msg, k.Stop) {
		m.stop()
		return nil
	}
	if key.Matches(msg, keyModels) {
		m.pickOpen = true
		choices := Choices(m.ctx.Mesh)
		m.pick = common.Cursor{}
		for i, c := range choices {
			if c.Model == m.model {
				m.pick.Pos = i
			}
		}
		m.pick.Clamp(len(choices), m.pickRows())
		return nil
	}
	if key.Matches(msg, keyClear) && !m.streaming {
		delete(m.convs, m.model)
		m.refresh(true)
		return common.Status("cleared the conversation with "+m.model, false)
	}
	if !m.input.Focused() {
		if key.Matches(msg, keyFocus) {
			return m.input.Focus()
		}
		m.scroll.Update(k, msg, len(m.lines), m.transcriptHeight())
		return nil
	}
	switch {
	case key.Matches(msg, keyBlur):
		m.input.Blur()
		return nil
	case key.Matches(msg, k.Send) && !key.Matches(msg, k.Newline):
		return m.send()
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return cmd
}

func (m *Model) pickKey(msg tea.KeyMsg) tea.Cmd {
	choices := Choices(m.ctx.Mesh)
	if m.pick.Move(m.ctx.Keys, msg, len(choices), m.pickRows()) {
		return nil
	}
	switch {
	case key.Matches(msg, keyClose):
		m.pickOpen = false
	case key.Matches(msg, keyChoose):
		if m.pick.Pos < len(choices) {
			return m.Open(choices[m.pick.Pos].Model)
		}
	}
	return nil
}

// pickerHead is the picker's question, over a blank line.
func (m *Model) pickerHead() string { return m.ctx.Styles.Bold.Render("Chat with which model?") + "\n" }

// pickerTop is the line of the first model in the picker: under the status line, the rule and
// the question, as drawn.
func (m *Model) pickerTop() int { return common.RowsOf(m.statusLine(), m.rule(), m.pickerHead()) }

// pickRows is how many models the picker shows at a time.
func (m *Model) pickRows() int { return max(m.transcriptHeight()-common.RowsOf(m.pickerHead()), 1) }

// pickClick chooses with the mouse: a click selects a model, a second click on it opens it;
// the wheel moves the choice.
func (m *Model) pickClick(msg tea.MouseMsg) tea.Cmd {
	choices := Choices(m.ctx.Mesh)
	if hit, again := m.pick.Click(msg, m.pickerTop(), len(choices), m.pickRows()); hit {
		if again {
			return m.Open(choices[m.pick.Pos].Model)
		}
		return nil
	}
	m.pick.Move(m.ctx.Keys, msg, len(choices), m.pickRows())
	return nil
}

// send starts an answer: the conversation gains the person's turn and an empty answer, and a
// command starts the stream.
func (m *Model) send() tea.Cmd {
	text := strings.TrimSpace(m.input.Value())
	if text == "" || m.streaming {
		return nil
	}
	model := m.model
	var msgs []apiclient.ChatMessage
	for _, t := range m.convs[model] {
		if t.Err == "" && t.Text != "" {
			msgs = append(msgs, apiclient.ChatMessage{Role: t.Role, Content: t.Text})
		}
	}
	msgs = append(msgs, apiclient.ChatMessage{Role: "user", Content: text})
	answer := Turn{Role: "assistant"}
	if target, err := console.ChatTarget(m.ctx.Mesh, model); err == nil {
		answer.Host = target.Name
		for _, p := range target.Placements {
			if p.QualifiedName() == model {
				answer.Runtime = p.Runtime
			}
		}
	}
	m.convs[model] = append(m.convs[model], Turn{Role: "user", Text: text}, answer)
	m.input.Reset()

	m.seq++
	m.streaming = true
	m.started, m.first, m.last, m.deltas = m.ctx.Now(), time.Time{}, time.Time{}, 0
	cctx, cancel := context.WithTimeout(context.Background(), maxAnswer)
	m.cancel = cancel
	m.refresh(true)
	return stream(cctx, cancel, m.ctx.Conn, m.ctx.Now, m.seq, model, msgs)
}

// stream runs the request in a goroutine started by the command (the view's Update does no
// I/O) and returns its first message; each later one is read by a re-armed command.
func stream(ctx context.Context, cancel context.CancelFunc, conn *console.Conn, now func() time.Time, seq int, model string, msgs []apiclient.ChatMessage) tea.Cmd {
	return func() tea.Msg {
		ch := make(chan tea.Msg, 64)
		go func() {
			defer close(ch)
			defer cancel()
			if conn == nil {
				ch <- endMsg{seq: seq, err: common.ErrNotConnected, at: now()}
				return
			}
			// A watchdog ends a stream that falls silent: a host that died mid-answer.
			sctx, silent := context.WithCancelCause(ctx)
			defer silent(nil)
			watchdog := time.AfterFunc(maxSilence, func() { silent(errSilent) })
			defer watchdog.Stop()
			host, err := conn.Chat(sctx, model, msgs, apiclient.ChatOptions{}, func(d apiclient.ChatDelta) error {
				watchdog.Reset(maxSilence)
				select {
				case ch <- chunkMsg{seq: seq, ch: ch, delta: d, at: now()}:
					return nil
				case <-sctx.Done():
					return sctx.Err()
				}
			})
			switch {
			case err == nil:
			case errors.Is(context.Cause(sctx), errSilent):
				err = errSilent
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				err = fmt.Errorf("no complete answer within %s", maxAnswer)
			}
			ch <- endMsg{seq: seq, host: host, err: err, at: now()}
		}()
		return <-ch
	}
}

func (m *Model) answer() *Turn {
	t := m.convs[m.model]
	if len(t) == 0 {
		return nil
	}
	return &t[len(t)-1]
}

func (m *Model) addChunk(c chunkMsg) {
	a := m.answer()
	if a == nil {
		return
	}
	if c.delta.Content != "" {
		if m.first.IsZero() {
			m.first = c.at
			a.TTFT = c.at.Sub(m.started)
		}
		m.deltas++
		m.last = c.at
		a.Text += c.delta.Content
	}
	a.TokPS = speed(m.deltas, m.first, m.last, c.delta.Usage)
	m.refresh(false)
}

// minSpan is the least time the pieces after the first must span to measure a speed. Pieces
// that arrive closer together came in a burst, held somewhere on the way (a busy machine, a
// buffer): their spacing says nothing of the engine's speed. Measured across one, 24 pieces in
// 78 µs made "308773 tok/s".
const minSpan = 250 * time.Millisecond

// speed is tokens per second after the first token: the gateway's count when it gives one,
// else the number of pieces received (close to one token each); 0 (unknown) until the pieces
// span minSpan.
func speed(deltas int, first, last time.Time, usage *apiclient.ChatUsage) float64 {
	span := last.Sub(first)
	if span < minSpan {
		return 0
	}
	gen := span.Seconds()
	tokens := deltas - 1 // the first piece marks the start of the clock
	if usage != nil && usage.CompletionTokens > 0 {
		tokens = usage.CompletionTokens - 1
	}
	return float64(max(tokens, 0)) / gen
}

func (m *Model) finish(e endMsg) {
	m.streaming = false
	if m.cancel != nil {
		m.cancel()
		m.cancel = nil
	}
	if a := m.answer(); a != nil {
		if e.host != "" {
			a.Host = e.host
		}
		if e.err != nil {
			a.Err = e.err.Error()
		} else if a.Text == "" {
			a.Err = "the model answered nothing"
		} else {
			a.Took = m.ctx.Now().Sub(m.started)
		}
	}
	m.refresh(false)
}

// stop cancels the generation: the context ends the HTTP request, so the gateway and the
// engine stop too. What arrived stays, marked as stopped.
func (m *Model) stop() {
	if m.cancel != nil {
		m.cancel()
		m.cancel = nil
	}
	m.streaming = false
	m.seq++
	if a := m.answer(); a != nil {
		a.Stopped = true
	}
	m.refresh(false)
}

// refresh re-renders the transcript; follow brings its newest line into view (and keeps it
// there). Without it the scroll stays where the reader left it: a reader at the bottom follows
// already.
func (m *Model) refresh(follow bool) {
	m.lines = strings.Split(m.transcript(), "\n")
	if follow {
		m.scroll.Follow = true
	}
}
