package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/internal/tuitest"
	"github.com/llmkube/mesh/tui/render"
)

var now = tuitest.Now

func testCtx() *common.Context {
	return tuitest.Context()
}

func keyMsg(k string) tea.KeyMsg {
	switch k {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "alt+enter":
		return tea.KeyMsg{Type: tea.KeyEnter, Alt: true}
	case "ctrl+j":
		return tea.KeyMsg{Type: tea.KeyCtrlJ}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "up":
		return tea.KeyMsg{Type: tea.KeyUp}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	case "ctrl+o":
		return tea.KeyMsg{Type: tea.KeyCtrlO}
	case "ctrl+l":
		return tea.KeyMsg{Type: tea.KeyCtrlL}
	case "pgup":
		return tea.KeyMsg{Type: tea.KeyPgUp}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

func press(m *Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		_, cmd = m.Update(keyMsg(k))
	}
	return cmd
}

func typeText(m *Model, s string) {
	for _, r := range s {
		m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
}

// More ready models than rows: the picker scrolls to keep the choice in view, and a click
// chooses the model drawn where it lands.
func TestPickerScrolls(t *testing.T) {
	ctx := testCtx()
	for i := range ctx.Mesh.Members {
		if mb := &ctx.Mesh.Members[i]; mb.Name == "tower" {
			for n := range 30 {
				mb.Placements = append(mb.Placements, api.Placement{ID: fmt.Sprint("p-x", n), Host: "tower", Model: fmt.Sprintf("model-%02d", n),
					Namespace: api.DefaultNamespace, Runtime: api.RuntimeOllama, State: api.StateReady})
			}
		}
	}
	m := New(ctx)
	m.SetSize(80, 24)
	choices := Choices(ctx.Mesh)
	require.Greater(t, len(choices), 30)
	for range 25 {
		press(m, "down")
	}
	view := m.View()
	assert.Contains(t, view, "> "+choices[25].Model, "the choice is in view")
	assert.NotContains(t, view, choices[0].Model+" ", "the first ones scrolled away")
	assert.Equal(t, 24, strings.Count(view, "\n")+1, "the picker stays within the view")

	press(m, "G")
	assert.Contains(t, m.View(), "> "+choices[len(choices)-1].Model)

	// The first row shown is under the status line, the rule and the question.
	y := m.pickerTop()
	first := m.pick.Offset
	m.Update(tea.MouseMsg{X: 4, Y: y, Action: tea.MouseActionPress, Button: tea.MouseButtonLeft})
	assert.Equal(t, first, m.pick.Pos)
	assert.Contains(t, m.View(), "> "+choices[first].Model)
	m.Update(tea.MouseMsg{X: 4, Y: y, Action: tea.MouseActionPress, Button: tea.MouseButtonLeft})
	assert.Equal(t, choices[first].Model, m.Chatting(), "a second click opens it")
}

func TestPickerOffersReadyModels(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	assert.False(t, m.Capturing(), "the picker is a list: the global keys work over it")
	var names []string
	for _, c := range Choices(m.ctx.Mesh) {
		names = append(names, c.Model)
	}
	assert.Equal(t, []string{"llama3.2:3b", "qwen2.5-coder-7b", "qwen2:1.5b"}, names, "ready models only, by name")
	assert.Contains(t, m.View(), "Chat with which model?")
	assert.NotContains(t, helpKeys(m), "esc", "no model yet: esc has nothing to go back to")
	press(m, "down", "down", "enter")
	assert.Equal(t, "qwen2:1.5b", m.Chatting())
	assert.Contains(t, m.View(), "qwen2:1.5b · on pi5 · hailo-ollama")

	press(m, "ctrl+o")
	assert.Contains(t, m.View(), "Chat with which model?")
	assert.Contains(t, helpKeys(m), "esc", "esc goes back to the chat")
	press(m, "esc")
	assert.Equal(t, "qwen2:1.5b", m.Chatting(), "closing the picker keeps the model")
}

func helpKeys(m *Model) []string {
	var out []string
	for _, b := range m.ShortHelp() {
		out = append(out, b.Help().Key)
	}
	return out
}

func TestOpenPreselects(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("llama3.2:3b")
	assert.Equal(t, "llama3.2:3b", m.Chatting())
	assert.True(t, m.Capturing(), "the input is ready for typing")
	assert.Contains(t, m.View(), "Say something to llama3.2:3b. It runs on tower.")
}

func TestNewlineDoesNotSend(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("qwen2:1.5b")
	typeText(m, "first line")
	assert.Nil(t, press(m, "alt+enter"))
	press(m, "ctrl+j")
	typeText(m, "third")
	assert.Equal(t, "first line\n\nthird", m.input.Value())
	assert.Empty(t, m.Conversation("qwen2:1.5b"))
	assert.Nil(t, press(m, "esc"), "esc leaves the input")
	assert.False(t, m.Capturing(), "global keys work again")
	press(m, "i")
	assert.True(t, m.Capturing())
}

func TestSendWithoutConnectionSaysSo(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("qwen2:1.5b")
	typeText(m, "hello")
	cmd := press(m, "enter")
	require.NotNil(t, cmd)
	assert.True(t, m.Streaming())
	assert.Empty(t, m.input.Value(), "the input empties on send")
	m.Update(cmd())
	assert.False(t, m.Streaming())
	turns := m.Conversation("qwen2:1.5b")
	require.Len(t, turns, 2)
	assert.Equal(t, "not connected to a mesh", turns[1].Err)
	assert.Contains(t, m.View(), "✗ not connected to a mesh")
	assert.Nil(t, press(m, "enter"), "an empty input sends nothing")
}

func TestStreamingMeasuresTTFTAndSpeed(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("qwen2:1.5b")
	typeText(m, "Why is the sky blue?")
	press(m, "enter")
	ch := make(chan tea.Msg)
	at := func(ms int) time.Time { return now.Add(time.Duration(ms) * time.Millisecond) }
	for i, piece := range []string{"Rayleigh", " scattering", ":", " blue", " light"} {
		_, cmd := m.Update(chunkMsg{seq: m.seq, ch: ch, delta: apiclient.ChatDelta{Content: piece}, at: at(320 + 100*i)})
		assert.NotNil(t, cmd, "the reader is re-armed after each piece")
	}
	a := m.Conversation("qwen2:1.5b")[1]
	assert.Equal(t, "Rayleigh scattering: blue light", a.Text)
	assert.Equal(t, 320*time.Millisecond, a.TTFT, "time to the first piece")
	assert.InDelta(t, 10.0, a.TokPS, 0.01, "4 pieces in 0.4 s after the first")
	assert.Contains(t, m.View(), "TTFT 320 ms · 10.0 tok/s")
	assert.Contains(t, m.View(), "generating (esc stops)")

	m.Update(chunkMsg{seq: m.seq, ch: ch, delta: apiclient.ChatDelta{FinishReason: "stop", Usage: &apiclient.ChatUsage{CompletionTokens: 9}}, at: at(800)})
	assert.InDelta(t, 20.0, m.Conversation("qwen2:1.5b")[1].TokPS, 0.01, "the gateway's token count wins when given")
	m.Update(endMsg{seq: m.seq, host: "pi5", at: at(800)})
	assert.False(t, m.Streaming())
	assert.NotContains(t, m.View(), "generating")

	// An answer whose pieces all came at once measures no speed: their spacing is the network's.
	typeText(m, "Again?")
	press(m, "enter")
	for i, piece := range []string{"Rayleigh", " scattering", " again"} {
		m.Update(chunkMsg{seq: m.seq, ch: ch, delta: apiclient.ChatDelta{Content: piece}, at: at(1400).Add(time.Duration(i) * 30 * time.Microsecond)})
	}
	m.Update(chunkMsg{seq: m.seq, ch: ch, delta: apiclient.ChatDelta{FinishReason: "stop", Usage: &apiclient.ChatUsage{CompletionTokens: 24}}, at: at(1401)})
	m.Update(endMsg{seq: m.seq, host: "pi5", at: at(1401)})
	burst := m.Conversation("qwen2:1.5b")[3]
	assert.Zero(t, burst.TokPS)
	var head string
	for _, l := range strings.Split(m.View(), "\n") {
		if strings.Contains(l, "TTFT "+render.Millis(1400)) {
			head = l
		}
	}
	require.NotEmpty(t, head, "the answer's line")
	assert.NotContains(t, head, "tok/s", head)
}

func TestStaleChunksAreDrained(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("qwen2:1.5b")
	typeText(m, "hi")
	press(m, "enter")
	ch := make(chan tea.Msg)
	m.Update(chunkMsg{seq: m.seq, ch: ch, delta: apiclient.ChatDelta{Content: "Hel"}, at: now})
	old := m.seq
	press(m, "esc")
	assert.False(t, m.Streaming())
	_, cmd := m.Update(chunkMsg{seq: old, ch: ch, delta: apiclient.ChatDelta{Content: "lo"}, at: now})
	assert.NotNil(t, cmd, "a stopped stream is still read until it closes")
	a := m.Conversation("qwen2:1.5b")[1]
	assert.Equal(t, "Hel", a.Text, "but nothing it sends is shown")
	assert.True(t, a.Stopped)
	assert.Contains(t, m.View(), "[stopped]")
	m.Update(endMsg{seq: old, err: context.Canceled})
	assert.Empty(t, m.Conversation("qwen2:1.5b")[1].Err, "a stop is not an error")
}

func TestConversationsKeptPerModel(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("qwen2:1.5b")
	m.convs["qwen2:1.5b"] = []Turn{{Role: "user", Text: "hi"}, {Role: "assistant", Text: "Hello!"}}
	m.Open("llama3.2:3b")
	assert.Empty(t, m.Conversation("llama3.2:3b"))
	m.Open("qwen2:1.5b")
	assert.Len(t, m.Conversation("qwen2:1.5b"), 2)
	assert.Contains(t, m.View(), "Hello!")
	press(m, "ctrl+l")
	assert.Empty(t, m.Conversation("qwen2:1.5b"))
}

func TestNotReadyModelSaysSo(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("mistral:7b")
	assert.Contains(t, m.View(), "not ready anywhere now")
}

// gateway is an agent's API on loopback: the mesh view (every agent's API is this server) and a
// streaming chat that sends the given pieces, then either finishes or holds the request open
// until the client goes away.
type gateway struct {
	pieces    []string
	hold      bool
	cancelled chan struct{}

	mu       sync.Mutex
	requests [][]apiclient.ChatMessage
}

func (g *gateway) start(t *testing.T) *console.Conn {
	t.Helper()
	g.cancelled = make(chan struct{})
	var addr string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/mesh", func(w http.ResponseWriter, r *http.Request) {
		v := tuitest.SampleMesh(now)
		for i := range v.Members {
			if h := v.Members[i].Host; h != nil {
				h.APIAddr = addr
			}
		}
		_ = json.NewEncoder(w).Encode(v)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []apiclient.ChatMessage `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		g.mu.Lock()
		g.requests = append(g.requests, body.Messages)
		g.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, p := range g.pieces {
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]string{"content": p}}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
			w.(http.Flusher).Flush()
		}
		if g.hold {
			<-r.Context().Done()
			close(g.cancelled)
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	addr = srv.Listener.Addr().String()
	conn, err := console.Connect(context.Background(), console.Options{AgentURL: srv.URL, Token: "t", Poll: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// run feeds a command's messages back into the view until the stream closes.
func run(t *testing.T, m *Model, cmd tea.Cmd) {
	t.Helper()
	for i := 0; cmd != nil; i++ {
		require.Less(t, i, 100)
		msg := cmd()
		if msg == nil {
			return
		}
		_, cmd = m.Update(msg)
	}
}

func TestChatsThroughTheGateway(t *testing.T) {
	g := &gateway{pieces: []string{"Hel", "lo", "!"}}
	ctx := testCtx()
	ctx.Conn = g.start(t)
	m := New(ctx)
	m.SetSize(80, 24)
	m.Open("qwen2:1.5b")
	typeText(m, "hi")
	run(t, m, press(m, "enter"))
	assert.False(t, m.Streaming())
	turns := m.Conversation("qwen2:1.5b")
	require.Len(t, turns, 2)
	assert.Equal(t, "Hello!", turns[1].Text)
	assert.Empty(t, turns[1].Err)
	assert.Equal(t, "pi5", turns[1].Host)

	typeText(m, "again")
	run(t, m, press(m, "enter"))
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Len(t, g.requests, 2)
	assert.Equal(t, []apiclient.ChatMessage{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "Hello!"}, {Role: "user", Content: "again"}},
		g.requests[1], "the conversation so far goes with each message")
}

func TestEscReallyCancelsTheRequest(t *testing.T) {
	g := &gateway{pieces: []string{"Once upon"}, hold: true}
	ctx := testCtx()
	ctx.Conn = g.start(t)
	m := New(ctx)
	m.SetSize(80, 24)
	m.Open("qwen2:1.5b")
	typeText(m, "tell me a long story")
	cmd := press(m, "enter")
	_, next := m.Update(cmd())
	require.True(t, m.Streaming())
	assert.Equal(t, "Once upon", m.Conversation("qwen2:1.5b")[1].Text)

	press(m, "esc")
	assert.False(t, m.Streaming())
	select {
	case <-g.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway never saw the request cancelled")
	}
	run(t, m, next) // the stopped stream drains and closes
	a := m.Conversation("qwen2:1.5b")[1]
	assert.True(t, a.Stopped)
	assert.Empty(t, a.Err)
	assert.True(t, m.Capturing(), "the input is still there for the next message")
}

func TestView(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			m := New(testCtx())
			m.SetSize(size[0], size[1])
			m.Open("qwen2:1.5b")
			m.convs["qwen2:1.5b"] = []Turn{
				{Role: "user", Text: "What is a Hailo-10H?"},
				{Role: "assistant", Host: "pi5", TTFT: 320 * time.Millisecond, TokPS: 8.2,
					Text: "The Hailo-10H is an AI accelerator on an M.2 card with 8 GB of its own memory. On a Raspberry Pi 5 it runs small language models such as Qwen2 1.5B through hailo-ollama."},
				{Role: "user", Text: "Tell me a story about it.\nMake it long."},
				{Role: "assistant", Host: "pi5", TTFT: 290 * time.Millisecond, TokPS: 8.0, Text: "Once upon a time, in a small workshop,", Stopped: true},
				{Role: "user", Text: "And in one line?"},
				{Role: "assistant", Host: "pi5", Err: "EngineError: hailo-ollama answered 500: device busy"},
			}
			m.refresh(true)
			typeText(m, "Try again, please")
			golden.RequireEqual(t, []byte(m.View()))
		})
	}
}

func TestViewStreaming(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("qwen2.5-coder-7b")
	typeText(m, "Write a Go function that reverses a string.")
	press(m, "enter")
	ch := make(chan tea.Msg)
	for i, p := range []string{"func Reverse(s string) string {\n", "\tr := []rune(s)\n", "\tfor i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {"} {
		m.Update(chunkMsg{seq: m.seq, ch: ch, delta: apiclient.ChatDelta{Content: p}, at: now.Add(145*time.Millisecond + time.Duration(i)*150*time.Millisecond)})
	}
	golden.RequireEqual(t, []byte(m.View()))
}

// An answer's first token starts with a space, as most tokenizers give it: the answer starts
// under the indent, in the column of the question.
func TestAnswerStartsInItsColumn(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("qwen2:1.5b")
	m.convs["qwen2:1.5b"] = []Turn{{Role: "user", Text: "hi"}, {Role: "assistant", Text: " Hello there"}}
	m.refresh(true)
	assert.Contains(t, m.View(), "\n  hi ")
	assert.Contains(t, m.View(), "\n  Hello there ")
	assert.Equal(t, " Hello there", m.convs["qwen2:1.5b"][1].Text, "the conversation the model is sent keeps its text")
}

func TestViewPicker(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	press(m, "down")
	golden.RequireEqual(t, []byte(m.View()))
}

func TestWheelAndPagesScrollTheTranscript(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("qwen2:1.5b")
	for i := range 20 {
		m.convs["qwen2:1.5b"] = append(m.convs["qwen2:1.5b"], Turn{Role: "user", Text: fmt.Sprint("question ", i)}, Turn{Role: "assistant", Text: fmt.Sprint("answer ", i)})
	}
	m.refresh(true)
	assert.Contains(t, m.View(), "answer 19", "the newest is in view")
	bottom := m.scroll.Offset
	m.Update(tea.MouseMsg{Button: tea.MouseButtonWheelUp, Action: tea.MouseActionPress})
	assert.Equal(t, bottom-common.WheelLines, m.scroll.Offset, "the wheel scrolls")
	press(m, "pgup")
	assert.Equal(t, bottom-common.WheelLines-(m.transcriptHeight()-1), m.scroll.Offset, "a page keeps one line of the last in view")
	assert.NotContains(t, m.View(), "answer 19")
	press(m, "pgdown", "pgdown")
	assert.Contains(t, m.View(), "answer 19", "back at the bottom")

	// A new piece of an answer does not pull a reader who scrolled up back down.
	typeText(m, "more")
	press(m, "enter")
	m.Update(tea.MouseMsg{Button: tea.MouseButtonWheelUp, Action: tea.MouseActionPress})
	view, offset := m.View(), m.scroll.Offset
	m.Update(chunkMsg{seq: m.seq, ch: make(chan tea.Msg), delta: apiclient.ChatDelta{Content: "x"}, at: now})
	assert.Equal(t, offset, m.scroll.Offset)
	assert.Equal(t, view, m.View())

	// With the input left, the list keys scroll too.
	press(m, "esc", "esc", "g") // stop the answer, leave the input, go to the top
	assert.Equal(t, 0, m.scroll.Offset)
	assert.Contains(t, m.View(), "question 0")
	press(m, "G")
	assert.True(t, m.scroll.Follow, "at the bottom it follows again")
}
