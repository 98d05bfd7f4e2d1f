package llamaserver

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/sim/internal/simserver"
	"github.com/llmkube/mesh/sim/simtext"
)

type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	NPredict            *int            `json:"n_predict"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int            `json:"n"`
	Tools               []tool          `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ResponseFormat      *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
		Schema json.RawMessage `json:"schema"` // llama-server's own short form
	} `json:"response_format"`
}

type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// shape is how an answer is formed beyond free text: a tool call, or a JSON document.
type shape struct {
	tool   string // the function called; "" for text
	callID string
	text   string // the whole shaped answer: the call's arguments, or the JSON document
}

// shaped decides the answer's shape as a model with a tool-capable template and llama-server's
// grammar would: with tools (the jinja template reads them) and the last message not a tool
// result, a call to the tool tool_choice names, or the first; with response_format, a JSON
// document that fits the schema. The real model chooses; the simulator always calls.
func (s *Server) shaped(req chatRequest) (shape, bool) {
	last := req.Messages[len(req.Messages)-1]
	choice := strings.Trim(string(req.ToolChoice), `"`)
	if s.cfg.Jinja && len(req.Tools) > 0 && last.Role != "tool" && choice != "none" {
		t := req.Tools[0]
		var named struct {
			Function struct{ Name string } `json:"function"`
		}
		if json.Unmarshal(req.ToolChoice, &named) == nil && named.Function.Name != "" {
			for _, c := range req.Tools {
				if c.Function.Name == named.Function.Name {
					t = c
				}
			}
		}
		return shape{tool: t.Function.Name, callID: "call_" + completionID()[9:21], text: simtext.FromSchema(t.Function.Parameters)}, true
	}
	if rf := req.ResponseFormat; rf != nil && (rf.Type == "json_object" || rf.Type == "json_schema") {
		schema := rf.Schema
		if rf.JSONSchema != nil {
			schema = rf.JSONSchema.Schema
		}
		return shape{text: simtext.FromSchema(schema)}, true
	}
	return shape{}, false
}

// text returns a message's content: a string, or the text parts of an array of parts.
func (m chatMessage) text() (string, error) {
	return simserver.ContentText(m.Content, "message content must be a string or an array of content parts")
}

// stops decodes "stop": a string or an array of strings.
func (r chatRequest) stops() ([]string, error) {
	if len(r.Stop) == 0 || string(r.Stop) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(r.Stop, &one); err == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(r.Stop, &many); err != nil {
		return nil, errors.New("\"stop\" must be a string or an array of strings")
	}
	return many, nil
}

// limit is the request's token limit (-1 = none), falling back to the server's -n.
func (r chatRequest) limit(def int) int {
	for _, p := range []*int{r.MaxCompletionTokens, r.MaxTokens, r.NPredict} {
		if p != nil {
			return *p
		}
	}
	return def
}

// render turns messages into the prompt text the simulator "evaluates", in the shape of a chat
// template, so prompt token counts grow with every message like the real ones.
func render(msgs []chatMessage) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		t, err := m.text()
		if err != nil {
			return "", err
		}
		if len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
			t += string(m.ToolCalls) // a template renders the calls the assistant made
		}
		fmt.Fprintf(&b, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", m.Role, t)
	}
	b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	return b.String(), nil
}

// handleApplyTemplate answers {"prompt":…}: the chat's messages through the template, as
// handleChat renders them.
func (s *Server) handleApplyTemplate(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "parse error: "+err.Error(), nil)
		return
	}
	prompt, err := render(req.Messages)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
}

// handleTokenize answers {"tokens":[…]}: as many as the simulator counts for the content when
// it evaluates a prompt (simtext.CountTokens).
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Content string `json:"content"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "parse error: "+err.Error(), nil)
		return
	}
	toks := make([]int, simtext.CountTokens(req.Content))
	for i := range toks {
		toks[i] = i + 1
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": toks})
}

// completion is one generation's outcome, for timings and counters.
type completion struct {
	kv           *lease // its share of a context the slots share
	failed       error  // the server's own failure, sent to the client (not a cancellation)
	promptTokens int
	predicted    int
	content      strings.Builder
	finish       string
	promptTime   time.Duration
	predictTime  time.Duration
}

func (c *completion) timings() map[string]any {
	// llama-server measures real work, never zero; the floor keeps the rates finite.
	pms := math.Max(float64(c.promptTime)/float64(time.Millisecond), 1e-3)
	gms := math.Max(float64(c.predictTime)/float64(time.Millisecond), 1e-3)
	perTok := func(ms float64, n int) float64 {
		if n == 0 {
			return 0
		}
		return ms / float64(n)
	}
	perSec := func(ms float64, n int) float64 { return 1e3 / ms * float64(n) }
	return map[string]any{
		"cache_n":                0,
		"prompt_n":               c.promptTokens,
		"prompt_ms":              pms,
		"prompt_per_token_ms":    perTok(pms, c.promptTokens),
		"prompt_per_second":      perSec(pms, c.promptTokens),
		"predicted_n":            c.predicted,
		"predicted_ms":           gms,
		"predicted_per_token_ms": perTok(gms, c.predicted),
		"predicted_per_second":   perSec(gms, c.predicted),
	}
}

func (c *completion) usage() map[string]int {
	return map[string]int{
		"completion_tokens": c.predicted,
		"prompt_tokens":     c.promptTokens,
		"total_tokens":      c.predicted + c.promptTokens,
	}
}

// answer is what the simulator generates for a prompt in a context of nCtx tokens.
type answer struct {
	promptTokens, limit int
	toks                []string
	finish              string
}

// answer refuses, as llama-server does, a prompt that fills the context of nCtx tokens, and
// otherwise generates the request's answer: at most its token limit, and never past the
// context. false: the refusal is written.
func (s *Server) answer(w http.ResponseWriter, req chatRequest, prompt string, nCtx int) (answer, bool) {
	a := answer{promptTokens: simtext.CountTokens(prompt)}
	if a.promptTokens >= nCtx {
		writeError(w, http.StatusBadRequest, "exceed_context_size_error",
			fmt.Sprintf("request (%d tokens) exceeds the available context size (%d tokens), try increasing it", a.promptTokens, nCtx),
			map[string]any{"n_prompt_tokens": a.promptTokens, "n_ctx": nCtx})
		return answer{}, false
	}
	a.limit = req.limit(s.cfg.NPredict)
	if room := nCtx - a.promptTokens; a.limit < 0 || a.limit > room {
		a.limit = room // generation stops when the context is full
	}
	seed := s.cfg.Seed
	if req.Seed != nil {
		seed = *req.Seed
	}
	a.toks, a.finish = simserver.Answer(seed, prompt, a.limit, s.cfg.LongestAnswer)
	return a, true
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		// llama-server's JSON parser throws, which its handler wrapper turns into a 500.
		writeError(w, http.StatusInternalServerError, "server_error", "parse error: "+err.Error(), nil)
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "'messages' is required", nil)
		return
	}
	if req.N != nil && *req.N != 1 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "Only one completion choice is allowed", nil)
		return
	}
	stops, err := req.stops()
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}
	prompt, err := render(req.Messages)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}
	a, ok := s.answer(w, req, prompt, s.cfg.slotCtx())
	if !ok {
		return
	}
	promptTokens, limit, toks, finish := a.promptTokens, a.limit, a.toks, a.finish
	sh, isShaped := s.shaped(req)
	if isShaped {
		toks, finish, stops = simtext.Pieces(sh.text), "stop", nil
		if sh.tool != "" {
			finish = "tool_calls"
		}
		if limit >= 0 && len(toks) > limit {
			toks, finish = toks[:limit], "length"
		}
	}

	ctx := r.Context()
	if !s.acquireSlot(ctx) {
		s.noteCancelled()
		return
	}
	defer s.releaseSlot()

	model := req.Model
	if model == "" {
		model = s.modelID()
	}
	c := &completion{promptTokens: promptTokens, finish: finish, kv: s.kv.lease()}
	defer c.kv.release()
	var genErr error
	if req.Stream {
		genErr = s.stream(ctx, w, model, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, toks, stops, sh, c)
	} else {
		genErr = s.generate(ctx, toks, stops, c)
		if errors.Is(genErr, errContextFull) {
			writeError(w, http.StatusInternalServerError, "server_error", genErr.Error(), nil)
			genErr = nil
		}
		if genErr == nil && c.failed == nil {
			msg := map[string]any{"role": "assistant", "content": c.content.String()}
			if sh.tool != "" {
				msg["content"] = nil
				msg["tool_calls"] = []any{map[string]any{"id": sh.callID, "type": "function",
					"function": map[string]any{"name": sh.tool, "arguments": c.content.String()}}}
			}
			writeJSON(w, http.StatusOK, map[string]any{
				"choices": []any{map[string]any{
					"finish_reason": c.finish, "index": 0,
					"message": msg,
				}},
				"created":            time.Now().Unix(),
				"model":              model,
				"system_fingerprint": "b5000-llmsim00",
				"object":             "chat.completion",
				"usage":              c.usage(),
				"id":                 completionID(),
				"timings":            c.timings(),
			})
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}
	s.finish(ctx, c, genErr)
}

// errContextFull is llama-server's error for a slot whose shared context is full.
var errContextFull = errors.New("Context size has been exceeded.")

// room takes the context the next step needs from the shared cache: the prompt before the
// first token, one cell per token after it.
func (c *completion) room(i int) error {
	n := 1
	if i == 0 {
		n += c.promptTokens
	}
	if !c.kv.take(n) {
		c.failed = errContextFull
		return c.failed
	}
	return nil
}

// generate produces the whole answer at the configured pace.
func (s *Server) generate(ctx context.Context, toks, stops []string, c *completion) error {
	p := simserver.Pacer{Start: time.Now(), TTFT: s.cfg.TTFT, Rate: s.cfg.TokensPerSec}
	st := stopper{stops: stops}
	var first time.Time
	for i, tok := range toks {
		if err := p.Wait(ctx, i); err != nil {
			return err
		}
		if err := c.room(i); err != nil {
			return err
		}
		if i == 0 {
			first = time.Now()
			c.promptTime = first.Sub(p.Start)
		}
		c.predicted++
		out, stopped := st.add(tok)
		c.content.WriteString(out)
		if stopped {
			c.finish = "stop"
			break
		}
	}
	c.content.WriteString(st.flush())
	if !first.IsZero() {
		c.predictTime = time.Since(first)
	}
	return nil
}

// stream sends the answer as llama-server's server-sent events: a role chunk with the first
// token, one chunk per piece of text, a final chunk with finish_reason and timings (or, with
// include_usage, one more chunk carrying usage and timings), then "data: [DONE]".
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, model string, includeUsage bool, toks, stops []string, sh shape, c *completion) error {
	s.closeAfter(ctx)
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	id, created := completionID(), time.Now().Unix()
	chunk := func(delta any, finish any) *streamEvent {
		return &streamEvent{Choices: []streamChoice{{FinishReason: finish, Delta: delta}},
			Created: created, ID: id, Model: model, SystemFingerprint: "b5000-llmsim00", Object: "chat.completion.chunk"}
	}
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}

	p := simserver.Pacer{Start: time.Now(), TTFT: s.cfg.TTFT, Rate: s.cfg.TokensPerSec}
	st := stopper{stops: stops}
	var first time.Time
	stopped := false
	// fail ends the stream as llama-server does when a slot fails mid-answer: an error event
	// after the content, and no [DONE].
	fail := func(msg string) error {
		return send(map[string]any{"error": map[string]any{"code": 500, "message": msg, "type": "server_error"}})
	}
	for i, tok := range toks {
		if err := p.Wait(ctx, i); err != nil {
			return err
		}
		if err := c.room(i); err != nil {
			return fail(err.Error())
		}
		if n := s.cfg.StreamErrorAfter; n > 0 && i == n {
			c.failed = fmt.Errorf("simulated failure after %d tokens (%s)", n, EnvStreamError)
			return fail(c.failed.Error())
		}
		if i == 0 {
			first = time.Now()
			c.promptTime = first.Sub(p.Start)
			first := roleDelta{Role: "assistant"}
			if sh.tool != "" {
				// A tool call streams as llama-server's: the call's id and name first, then its
				// arguments piece by piece, all at index 0.
				first.ToolCalls = []any{map[string]any{"index": 0, "id": sh.callID, "type": "function",
					"function": map[string]any{"name": sh.tool, "arguments": ""}}}
			}
			if err := send(chunk(first, nil)); err != nil {
				return err
			}
		}
		c.predicted++
		var out string
		out, stopped = st.add(tok)
		if out != "" {
			c.content.WriteString(out)
			if s.cfg.StampTokens {
				out = simtext.Stamp(out, time.Now())
			}
			delta := map[string]any{"content": out}
			if sh.tool != "" {
				delta = map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": out}}}}
			}
			if err := send(chunk(delta, nil)); err != nil {
				return err
			}
		}
		if stopped {
			c.finish = "stop"
			break
		}
	}
	if rest := st.flush(); rest != "" {
		c.content.WriteString(rest)
		if err := send(chunk(map[string]any{"content": rest}, nil)); err != nil {
			return err
		}
	}
	if !first.IsZero() {
		c.predictTime = time.Since(first)
	}
	final := chunk(struct{}{}, c.finish)
	if includeUsage {
		if err := send(final); err != nil {
			return err
		}
		final = chunk(nil, nil)
		final.Choices, final.Usage = []streamChoice{}, c.usage()
	}
	final.Timings = c.timings()
	if err := send(final); err != nil {
		return err
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		return err
	}
	if flusher != nil {
		flusher.Flush()
	}
	return nil
}

// streamEvent is one event of a streamed chat, its keys in llama-server's order (build 9749:
// the choice's finish reason and index before its delta), which a client reading the bytes
// rather than decoding them meets on the real server.
type streamEvent struct {
	Choices           []streamChoice `json:"choices"`
	Created           int64          `json:"created"`
	ID                string         `json:"id"`
	Model             string         `json:"model"`
	SystemFingerprint string         `json:"system_fingerprint"`
	Object            string         `json:"object"`
	Usage             any            `json:"usage,omitempty"`
	Timings           any            `json:"timings,omitempty"`
}

type streamChoice struct {
	FinishReason any `json:"finish_reason"`
	Index        int `json:"index"`
	Delta        any `json:"delta"`
}

// roleDelta is the first event's delta: {"role":"assistant","content":null}, with a tool
// call's id and name when the answer is one.
type roleDelta struct {
	Role      string  `json:"role"`
	Content   *string `json:"content"`
	ToolCalls any     `json:"tool_calls,omitempty"`
}

func completionID() string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 32)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return "chatcmpl-" + string(b)
}

// acquireSlot waits for a free slot, counting the request as deferred meanwhile.
func (s *Server) acquireSlot(ctx context.Context) bool {
	select {
	case s.slots <- struct{}{}:
	default:
		s.deferred.Add(1)
		defer s.deferred.Add(-1)
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return false
		}
	}
	s.processing.Add(1)
	return true
}

func (s *Server) releaseSlot() {
	s.processing.Add(-1)
	<-s.slots
}

func (s *Server) noteCancelled() {
	s.mu.Lock()
	s.stats.Cancelled++
	s.mu.Unlock()
}

// finish records a generation in the stats and metrics and, when it is the CrashAfter-th,
// arms the crash for the moment its answer has been written out.
func (s *Server) finish(ctx context.Context, c *completion, genErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if genErr != nil {
		s.stats.Cancelled++
		s.log.Debug("generation stopped", "err", genErr)
	}
	s.stats.Completions++
	s.stats.PromptTokens += int64(c.promptTokens)
	s.stats.PredictedTokens += int64(c.predicted)
	s.totals.promptSeconds += c.promptTime.Seconds()
	s.totals.predictedSeconds += c.predictTime.Seconds()
	s.totals.nDecode += int64(c.predicted)
	s.totals.nTokensMax = max(s.totals.nTokensMax, int64(c.promptTokens+c.predicted))
	if s.cfg.CrashAfter > 0 && s.stats.Completions == s.cfg.CrashAfter {
		if conn, ok := ctx.Value(connKey{}).(net.Conn); ok {
			s.crashConn = conn
		} else {
			go s.crash()
		}
	}
}

// formatFloat writes metric values as llama-server does: integers without a fraction.
func formatFloat(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// embeddingSize is the length of the simulator's vectors.
const embeddingSize = 64

// handleEmbeddings is llama-server's OpenAI /v1/embeddings: 501 unless started with
// --embeddings, 400 with --pooling none (not OpenAI-compatible), else one deterministic
// vector per input (floats, or base64 of little-endian float32s).
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Embedding {
		writeError(w, http.StatusNotImplemented, "not_supported_error", "This server does not support embeddings. Start it with `--embeddings`", nil)
		return
	}
	if s.cfg.Pooling == "none" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "Pooling type 'none' is not OAI compatible. Please use a different pooling type", nil)
		return
	}
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "parse error: "+err.Error(), nil)
		return
	}
	var inputs []string
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		inputs = []string{one}
	} else if err := json.Unmarshal(req.Input, &inputs); err != nil || len(inputs) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "\"input\" must be a string or an array of strings", nil)
		return
	}
	data := make([]any, len(inputs))
	tokens := 0
	for i, in := range inputs {
		tokens += simtext.CountTokens(in)
		v := simtext.Vector(in, embeddingSize)
		var emb any = v
		if req.EncodingFormat == "base64" {
			emb = simtext.Base64Floats(v)
		}
		data[i] = map[string]any{"embedding": emb, "index": i, "object": "embedding"}
	}
	model := req.Model
	if model == "" {
		model = s.modelID()
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": model, "object": "list", "data": data,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens}})
}

// handleCompletions is llama-server's OpenAI /v1/completions: the prompt continued as it is
// (no chat template), whole or as server-sent events of choices[].text, on one of the slots.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req struct {
		chatRequest
		Prompt json.RawMessage `json:"prompt"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "parse error: "+err.Error(), nil)
		return
	}
	var prompt string
	if err := json.Unmarshal(req.Prompt, &prompt); err != nil || prompt == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "\"prompt\" must be a string", nil)
		return
	}
	a, ok := s.answer(w, req.chatRequest, prompt, s.cfg.ctxSize())
	if !ok {
		return
	}
	promptTokens, toks, finish := a.promptTokens, a.toks, a.finish
	ctx := r.Context()
	if !s.acquireSlot(ctx) {
		s.noteCancelled()
		return
	}
	defer s.releaseSlot()
	id, created, model := completionID(), time.Now().Unix(), cmp.Or(req.Model, s.modelID())
	usage := map[string]int{"prompt_tokens": promptTokens, "completion_tokens": len(toks), "total_tokens": promptTokens + len(toks)}
	doc := func(text string, finish any) map[string]any {
		return map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"choices": []any{map[string]any{"text": text, "index": 0, "logprobs": nil, "finish_reason": finish}}}
	}
	p := simserver.Pacer{Start: time.Now(), TTFT: s.cfg.TTFT, Rate: s.cfg.TokensPerSec}
	if !req.Stream {
		var text strings.Builder
		for i, tok := range toks {
			if p.Wait(ctx, i) != nil {
				return
			}
			text.WriteString(tok)
		}
		d := doc(text.String(), finish)
		d["usage"] = usage
		writeJSON(w, http.StatusOK, d)
		return
	}
	s.closeAfter(ctx)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		_, err := fmt.Fprintf(w, "data: %s\n\n", b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return err == nil
	}
	for i, tok := range toks {
		if p.Wait(ctx, i) != nil || !send(doc(tok, nil)) {
			return
		}
	}
	last := doc("", finish)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		last["usage"] = usage
	}
	if send(last) {
		io.WriteString(w, "data: [DONE]\n\n")
	}
}
