package dialect

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/llmkube/mesh/engines"
)

// Out writes a response chunk by chunk, flushing each one unless the next is already at hand
// (see hold), with a write deadline so that a client that stops reading is cut instead of
// holding the engine. (net/http clears the deadline when the handler returns, before the
// connection's next request.)
type Out struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
	// rearm is set a quarter of the stall timeout after the deadline was last pushed forward,
	// by a timer started with the first write (atomically: the timer runs on its own). Reading
	// the clock on every write to tell it instead cost 47 ns a token on this machine (time.Now),
	// a fifth of what the agent did with a token between an Ollama engine and an OpenAI client.
	rearm   uint32
	timer   *time.Timer
	begun   bool
	holding bool  // the driver has the next chunk at hand: writes wait in the buffer for it
	held    bool  // written and not flushed
	err     error // the first write error: the client is gone or stalled
}

func NewOut(w http.ResponseWriter, stall time.Duration) Out {
	return Out{w: w, rc: http.NewResponseController(w), stall: stall}
}

// Header values every answer shares, set as they are rather than through Header.Set, which
// makes a slice for each on every answer. Each has length and capacity 1, so an Add appends to
// a new slice, never into these; net/http copies them when it writes the header.
var (
	noCache     = []string{"no-cache"}
	noBuffering = []string{"no"}
	eventStream = []string{"text/event-stream"}
	ndjsonType  = []string{"application/x-ndjson"}
	jsonType    = []string{"application/json"}
)

// begin sends the status line and headers with the first chunk.
func (o *Out) Begin(contentType string) {
	h := o.w.Header()
	switch contentType {
	case eventStream[0]:
		h["Content-Type"] = eventStream
	case ndjsonType[0]:
		h["Content-Type"] = ndjsonType
	case jsonType[0]:
		h["Content-Type"] = jsonType
	default:
		h.Set("Content-Type", contentType)
	}
	h["Cache-Control"] = noCache
	h["X-Accel-Buffering"] = noBuffering // tell a reverse proxy in front not to buffer either
	o.w.WriteHeader(http.StatusOK)
	o.begun = true
}

// send writes b and flushes it. The write deadline is pushed forward with the first write and
// then only when a quarter of the stall timeout has passed since it last was, which keeps a
// timer update and the clock off the per-token path while still cutting a stalled client after
// between 3/4 and all of the stall timeout. The answer's writer calls stop when it is done.
func (o *Out) Send(b []byte) error {
	if o.err != nil {
		return o.err
	}
	switch {
	case o.timer == nil:
		o.timer = time.AfterFunc(o.stall/4, func() { atomic.StoreUint32(&o.rearm, 1) })
		o.pushDeadline()
	case atomic.LoadUint32(&o.rearm) != 0:
		// The timer fired, so it is not pending: rearm stays 0 until it fires again.
		atomic.StoreUint32(&o.rearm, 0)
		o.timer.Reset(o.stall / 4)
		o.pushDeadline()
	}
	if _, err := o.w.Write(b); err != nil {
		o.err = err
		return err
	}
	if o.holding {
		o.held = true
		return nil
	}
	return o.flush()
}

func (o *Out) pushDeadline() {
	// An error here means the writer has no deadlines (a test recorder): writes still work.
	_ = o.rc.SetWriteDeadline(time.Now().Add(o.stall))
}

// stop ends the deadline's timer; the deadline last set stays for what net/http still writes.
func (o *Out) Stop() {
	if o.timer != nil {
		o.timer.Stop()
	}
}

// end writes the answer's last bytes without flushing them: the handler returns right after,
// and net/http then flushes them with the chunked body's terminator in one write, where a flush
// here would cost a write (and the client a read) of its own for the five bytes of "0\r\n\r\n".
func (o *Out) End(b []byte) error {
	o.holding = true
	err := o.Send(b)
	o.holding = false
	return err
}

func (o *Out) flush() error {
	o.held = false
	if err := o.rc.Flush(); err != nil {
		o.err = err
		return err
	}
	return nil
}

// hold tells whether the driver has the next chunk at hand (engines.ChatChunk.More): while it
// does, chunks are written into the buffer and go out together, one system call for several
// tokens when the engine is ahead of the client; a chunk that is not followed goes out at once.
func (o *Out) Hold(more bool) { o.holding = more }

// release sends what is held: the driver is about to wait on the engine.
func (o *Out) Release() error {
	o.holding = false
	if !o.held || o.err != nil {
		return o.err
	}
	return o.flush()
}

func (o *Out) WriteFailed() bool { return o.err != nil }

// Stats closes an answer: token counts and timings.
type Stats struct {
	Finish string
	// StopSequence is the one of Call.MatchStop that ended the answer, "" when none did.
	StopSequence     string
	PromptTokens     int
	CompletionTokens int
	Total            time.Duration // since the request arrived
	PromptEval       time.Duration // engine start to first token
	Eval             time.Duration // first token to last
}

// Encoder writes an answer in a client's dialect.
type Encoder interface {
	// Chunk writes (or, not streaming, keeps) one piece of the answer.
	Chunk(content string) error
	// ToolCalls writes (or keeps) the tool calls the model made; the answer's finish reason
	// is then "tool_calls" in OpenAI's dialect.
	ToolCalls(calls []engines.ToolCall) error
	// Finish writes the end of the answer (all of it, not streaming). The handler returns
	// right after: a stream's last bytes are left for net/http to flush (see Out.End).
	Finish(st Stats) error
	// Started reports whether anything was written: before, the request can still fail over
	// or be answered with an error status.
	Started() bool
	// Fail reports an error after the answer started, in the dialect's in-stream form.
	Fail(f *Failure)
	// WriteFailed reports whether a write failed: the client left or stopped reading.
	WriteFailed() bool
	// Hold and Release coalesce writes while the driver has more at hand (see Out.Hold).
	Hold(more bool)
	Release() error
	// Stop is called when the answer is done with, written or not (see Out.Stop).
	Stop()
}

func NewEncoder(c *Call, w http.ResponseWriter, stall time.Duration, start time.Time) Encoder {
	o := NewOut(w, stall)
	switch c.Dialect {
	case Responses:
		return newRespEncoder(c, o, start)
	case Completions:
		return newCmplEncoder(c, o, start)
	case Anthropic:
		return newAnEncoder(c, o)
	}
	if c.Dialect == OpenAI {
		if c.Stream {
			return newOAStream(o, c, start)
		}
		return &oaWhole{Out: o, model: c.Model, created: start.Unix()}
	}
	if c.Stream {
		return &ollamaStream{Out: o, model: c.Model, generate: c.Dialect == OllamaGenerate}
	}
	return &ollamaWhole{Out: o, model: c.Model, generate: c.Dialect == OllamaGenerate}
}

// completionID is an OpenAI-style id.
func completionID() string { return string(appendCompletionID(nil)) }

// appendCompletionID appends an OpenAI-style id: "chatcmpl-" and 24 random hex digits.
func appendCompletionID(b []byte) []byte {
	var r [12]byte
	rand.Read(r[:])
	return hex.AppendEncode(append(b, "chatcmpl-"...), r[:])
}

// oaStream writes OpenAI server-sent events. Chunks are assembled from a prefix made once per
// request, so a token costs an escape and two writes into a reused buffer, no reflection.
type oaStream struct {
	Out
	prefix  []byte // `data: {"id":…,"choices":[{"index":0,"delta":{`
	head    []byte // `data: {"id":…` up to the choices, for the usage chunk
	buf     []byte
	role    bool // the role went out with the first chunk
	called  bool // tool calls went out
	usage   bool
	created int64
}

func newOAStream(o Out, c *Call, start time.Time) *oaStream {
	s := &oaStream{Out: o, usage: c.usageChunk, created: start.Unix()}
	// One allocation for the head, the prefix after it and the chunks' buffer: the prefix is
	// the head and the choices' start, so it is written once and the head is its beginning.
	const choices = `,"choices":[{"index":0,"delta":{`
	b := make([]byte, 0, 640+2*len(c.Model))
	b = append(b, `data: {"id":"`...)
	b = appendCompletionID(b)
	b = append(b, `","object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, s.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, c.Model)
	b = append(b, `,"system_fingerprint":null`...)
	n := len(b)
	b = append(b, choices...)
	s.head, s.prefix = b[:n:n], b[:len(b):len(b)]
	s.buf = b[len(b):len(b)]
	return s
}

func (s *oaStream) start() {
	if !s.begun {
		s.Begin("text/event-stream")
	}
}

func (s *oaStream) Chunk(content string) error {
	s.start()
	b := append(s.buf[:0], s.prefix...)
	if !s.role {
		b = append(b, `"role":"assistant",`...)
		s.role = true
	}
	b = append(b, `"content":`...)
	b = appendJSONString(b, content)
	b = append(b, `},"finish_reason":null}]}`+"\n\n"...)
	s.buf = b
	return s.Send(b)
}

func (s *oaStream) ToolCalls(calls []engines.ToolCall) error {
	s.start()
	b := append(s.buf[:0], s.prefix...)
	if !s.role {
		b = append(b, `"role":"assistant","content":null,`...)
		s.role = true
	}
	b = append(b, `"tool_calls":`...)
	tc, err := json.Marshal(oaToolCalls(calls, true))
	if err != nil {
		return err
	}
	b = append(b, tc...)
	b = append(b, `},"finish_reason":null}]}`+"\n\n"...)
	s.buf = b
	s.called = true
	return s.Send(b)
}

func (s *oaStream) Finish(st Stats) error {
	s.start()
	b := append(s.buf[:0], s.prefix...)
	if !s.role {
		b = append(b, `"role":"assistant","content":""`...)
	}
	b = append(b, `},"finish_reason":`...)
	if s.called {
		st.Finish = "tool_calls"
	}
	b = appendJSONString(b, st.Finish)
	b = append(b, "}]}\n\n"...)
	if s.usage {
		b = append(b, s.head...)
		b = append(b, `,"choices":[],"usage":`...)
		b = appendUsage(b, st)
		b = append(b, "}\n\n"...)
	}
	b = append(b, "data: [DONE]\n\n"...)
	s.buf = b
	return s.End(b)
}

func (s *oaStream) Started() bool { return s.begun }

// comment sends an SSE comment (": loading"), which clients skip: it keeps a stream alive
// while the model loads, before the first token.
func (s *oaStream) Comment(text string) error {
	s.start()
	return s.Send([]byte(": " + text + "\n\n"))
}

func (s *oaStream) Fail(f *Failure) {
	b, _ := json.Marshal(f.openAI())
	s.Send(append(append([]byte("data: "), b...), "\n\n"...))
}

func appendUsage(b []byte, st Stats) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(st.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(st.CompletionTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(st.PromptTokens+st.CompletionTokens), 10)
	return append(b, '}')
}

// oaWhole answers an OpenAI request that did not ask to stream: one JSON document at the end.
type oaWhole struct {
	Out
	model   string
	created int64
	text    []byte
	calls   []engines.ToolCall
}

func (s *oaWhole) Chunk(content string) error {
	s.text = append(s.text, content...)
	return nil
}

func (s *oaWhole) ToolCalls(calls []engines.ToolCall) error {
	s.calls = append(s.calls, calls...)
	return nil
}

// oaStreamCall is a tool call in a stream's delta: OpenAI's, with its index.
type oaStreamCall struct {
	Index int `json:"index"`
	oaToolCall
}

// oaToolCalls writes calls in OpenAI's shape (with indexes, for a stream's delta). A call
// without an id gets one: clients send it back with the tool's result.
func oaToolCalls(calls []engines.ToolCall, indexed bool) any {
	out := make([]oaStreamCall, len(calls))
	for i, c := range calls {
		tc := oaToolCall{ID: c.ID, Type: "function"}
		if tc.ID == "" {
			tc.ID = "call_" + completionID()[len("chatcmpl-"):]
		}
		tc.Function.Name, tc.Function.Arguments = c.Name, cmp.Or(c.Arguments, "{}")
		out[i] = oaStreamCall{Index: i, oaToolCall: tc}
	}
	if indexed {
		return out
	}
	plain := make([]oaToolCall, len(out))
	for i := range out {
		plain[i] = out[i].oaToolCall
	}
	return plain
}

type oaUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type oaCompletion struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []oaChoice `json:"choices"`
	Usage   oaUsage    `json:"usage"`
}

type oaChoice struct {
	Index        int       `json:"index"`
	Message      oaAnswer  `json:"message"`
	FinishReason string    `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

type oaAnswer struct {
	Role      string  `json:"role"`
	Content   *string `json:"content"` // null for an answer made only of tool calls
	ToolCalls any     `json:"tool_calls,omitempty"`
}

func (s *oaWhole) Finish(st Stats) error {
	text := string(s.text)
	answer := oaAnswer{Role: "assistant", Content: &text}
	if len(s.calls) > 0 {
		answer.ToolCalls, st.Finish = oaToolCalls(s.calls, false), "tool_calls"
		if text == "" {
			answer.Content = nil
		}
	}
	b, err := json.Marshal(oaCompletion{
		ID: completionID(), Object: "chat.completion", Created: s.created, Model: s.model,
		Choices: []oaChoice{{Message: answer, FinishReason: st.Finish}},
		Usage:   oaUsage{st.PromptTokens, st.CompletionTokens, st.PromptTokens + st.CompletionTokens},
	})
	if err != nil {
		return err
	}
	s.w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	s.Begin("application/json")
	return s.Send(append(b, '\n'))
}

func (s *oaWhole) Started() bool { return s.begun }
func (s *oaWhole) Fail(*Failure) {}

// ollamaStream writes Ollama's NDJSON: one object per piece, then a last one with done:true
// and the counts and durations (nanoseconds) Ollama reports.
type ollamaStream struct {
	Out
	model    string
	generate bool
	buf      []byte
}

// appendOllamaHead writes `{"model":…,"created_at":…,` — the start of every Ollama answer.
func appendOllamaHead(b []byte, model string) []byte {
	b = append(b, `{"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"created_at":"`...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, `",`...)
}

func appendOllamaContent(b []byte, generate bool, content string) []byte {
	return appendOllamaMessage(b, generate, content, nil)
}

// appendOllamaMessage writes the answer's part: "response" for generate, else "message" with
// the tool calls the model made (arguments an object, as Ollama writes them).
func appendOllamaMessage(b []byte, generate bool, content string, calls []engines.ToolCall) []byte {
	if generate {
		b = append(b, `"response":`...)
		return appendJSONString(b, content)
	}
	b = append(b, `"message":{"role":"assistant","content":`...)
	b = appendJSONString(b, content)
	if len(calls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, c := range calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"function":{"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"name":`...)
			b = appendJSONString(b, c.Name)
			b = append(b, `,"arguments":`...)
			args := strings.TrimSpace(c.Arguments)
			if args == "" || !json.Valid([]byte(args)) || args[0] != '{' {
				args = "{}" // Ollama's arguments are an object; an engine's broken JSON is not passed on
			}
			b = append(b, args...)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendOllamaDone(b []byte, st Stats) []byte {
	b = append(b, `,"done_reason":`...)
	b = appendJSONString(b, st.Finish)
	b = append(b, `,"done":true,"total_duration":`...)
	b = strconv.AppendInt(b, st.Total.Nanoseconds(), 10)
	b = append(b, `,"load_duration":0,"prompt_eval_count":`...)
	b = strconv.AppendInt(b, int64(st.PromptTokens), 10)
	b = append(b, `,"prompt_eval_duration":`...)
	b = strconv.AppendInt(b, st.PromptEval.Nanoseconds(), 10)
	b = append(b, `,"eval_count":`...)
	b = strconv.AppendInt(b, int64(st.CompletionTokens), 10)
	b = append(b, `,"eval_duration":`...)
	b = strconv.AppendInt(b, st.Eval.Nanoseconds(), 10)
	return append(b, "}\n"...)
}

func (s *ollamaStream) start() {
	if !s.begun {
		s.Begin("application/x-ndjson")
	}
}

func (s *ollamaStream) Chunk(content string) error {
	s.start()
	b := appendOllamaHead(s.buf[:0], s.model)
	b = appendOllamaContent(b, s.generate, content)
	b = append(b, `,"done":false}`+"\n"...)
	s.buf = b
	return s.Send(b)
}

func (s *ollamaStream) ToolCalls(calls []engines.ToolCall) error {
	s.start()
	b := appendOllamaHead(s.buf[:0], s.model)
	b = appendOllamaMessage(b, s.generate, "", calls)
	b = append(b, `,"done":false}`+"\n"...)
	s.buf = b
	return s.Send(b)
}

func (s *ollamaStream) Finish(st Stats) error {
	s.start()
	b := appendOllamaHead(s.buf[:0], s.model)
	b = appendOllamaContent(b, s.generate, "")
	b = appendOllamaDone(b, st)
	s.buf = b
	return s.End(b)
}

func (s *ollamaStream) Started() bool { return s.begun }

func (s *ollamaStream) Fail(f *Failure) {
	b, _ := json.Marshal(ollamaErrorBody{Error: f.Msg})
	s.Send(append(b, '\n'))
}

// ollamaWhole answers an Ollama request with "stream": false.
type ollamaWhole struct {
	Out
	model    string
	generate bool
	text     []byte
	calls    []engines.ToolCall
}

func (s *ollamaWhole) Chunk(content string) error {
	s.text = append(s.text, content...)
	return nil
}

func (s *ollamaWhole) ToolCalls(calls []engines.ToolCall) error {
	s.calls = append(s.calls, calls...)
	return nil
}

func (s *ollamaWhole) Finish(st Stats) error {
	b := appendOllamaHead(make([]byte, 0, len(s.text)+256), s.model)
	b = appendOllamaMessage(b, s.generate, string(s.text), s.calls)
	b = appendOllamaDone(b, st)
	s.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	s.Begin("application/json")
	return s.Send(b)
}

func (s *ollamaWhole) Started() bool { return s.begun }
func (s *ollamaWhole) Fail(*Failure) {}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, and U+2028 and
// U+2029 are escaped, as encoding/json does; HTML characters are left alone (these are API
// answers, not pages).
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AnswerLoad answers an Ollama load request (no messages, no prompt) done for reason ("load",
// "unload").
func AnswerLoad(w http.ResponseWriter, call *Call, reason string) {
	b := appendOllamaHead(nil, call.Model)
	b = appendOllamaContent(b, call.Dialect == OllamaGenerate, "")
	b = append(b, `,"done_reason":"`+reason+`","done":true}`+"\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}
