package ollama

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"time"

	"github.com/llmkube/mesh/sim/internal/simserver"
	"github.com/llmkube/mesh/sim/simtext"
)

// keepAlive decodes keep_alive as Ollama's api.Duration does: a number of seconds or a Go
// duration string; negative means Forever.
type keepAlive struct{ d time.Duration }

func (k *keepAlive) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch t := v.(type) {
	case float64:
		k.d = secondsKeepAlive(t)
	case string:
		d, err := time.ParseDuration(t)
		if err != nil {
			return err
		}
		if d < 0 {
			d = Forever
		}
		k.d = d
	default:
		return fmt.Errorf("Unsupported type: '%T'", v)
	}
	return nil
}

type message struct {
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
	ToolName  string          `json:"tool_name,omitempty"`
	// Images are decoded from base64 (a malformed one fails the request's decoding, as in
	// Ollama); each takes its place in the prompt as a vision model's image tokens do.
	Images [][]byte `json:"images,omitempty"`
}

type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// shapedChat answers as a model whose template reads tools, and as Ollama's format grammar
// forces: with tools and the last message not a tool's result, a call to the first tool (in
// one chunk, arguments an object, as Ollama sends it); with format ("json" or a schema), a
// JSON document that fits. It reports false for a free-text answer.
func (s *Server) shapedChat(w http.ResponseWriter, model string, msgs []message, tools []tool, format json.RawMessage, stream bool, prompt string, begin time.Time) bool {
	last := msgs[len(msgs)-1]
	var msg message
	var pieces []string
	switch {
	case len(tools) > 0 && last.Role != "tool":
		t := tools[0].Function
		call, _ := json.Marshal([]any{map[string]any{"id": "call_" + fmt.Sprint(time.Now().UnixNano()%1e9),
			"function": map[string]any{"index": 0, "name": t.Name, "arguments": json.RawMessage(simtext.FromSchema(t.Parameters))}}})
		msg = message{Role: "assistant", ToolCalls: call}
		pieces = []string{""}
	case len(format) > 0 && string(format) != "null" && string(format) != `""`:
		schema := format
		if string(format) == `"json"` {
			schema = nil
		}
		pieces = simtext.Pieces(simtext.FromSchema(schema))
	default:
		return false
	}
	out := newNDJSON(w, stream)
	var text strings.Builder
	for _, p := range pieces {
		text.WriteString(p)
		if stream && msg.ToolCalls == nil {
			if out.send(chatResponse{Model: model, CreatedAt: time.Now().UTC(), Message: message{Role: "assistant", Content: p}}) != nil {
				return true
			}
		}
	}
	final := chatResponse{Model: model, CreatedAt: time.Now().UTC(), Message: message{Role: "assistant"}, Done: true, DoneReason: "stop",
		metrics: metrics{TotalDuration: time.Since(begin), PromptEvalCount: simtext.CountTokens(prompt), EvalCount: len(pieces), EvalDuration: time.Millisecond}}
	if msg.ToolCalls != nil {
		if stream {
			// Ollama streams a tool call whole, in a chunk of its own before the last one.
			if out.send(chatResponse{Model: model, CreatedAt: time.Now().UTC(), Message: msg}) != nil {
				return true
			}
		} else {
			final.Message = msg
		}
	} else if !stream {
		final.Message.Content = text.String()
	}
	out.finish(final)
	return true
}

// metrics are Ollama's timing fields, durations in nanoseconds.
type metrics struct {
	TotalDuration      time.Duration `json:"total_duration,omitempty"`
	LoadDuration       time.Duration `json:"load_duration,omitempty"`
	PromptEvalCount    int           `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration time.Duration `json:"prompt_eval_duration,omitempty"`
	EvalCount          int           `json:"eval_count,omitempty"`
	EvalDuration       time.Duration `json:"eval_duration,omitempty"`
}

type chatResponse struct {
	Model      string    `json:"model"`
	CreatedAt  time.Time `json:"created_at"`
	Message    message   `json:"message"`
	DoneReason string    `json:"done_reason,omitempty"`
	Done       bool      `json:"done"`
	metrics
}

type generateResponse struct {
	Model      string    `json:"model"`
	CreatedAt  time.Time `json:"created_at"`
	Response   string    `json:"response"`
	Done       bool      `json:"done"`
	DoneReason string    `json:"done_reason,omitempty"`
	Context    []int     `json:"context,omitempty"`
	metrics
}

// options are the request options the simulator honours.
type options struct {
	seed       *int64
	numPredict int
	numCtx     int
}

// parseOptions reads seed, num_predict and num_ctx; like Ollama, a value of the wrong type is an
// error (a 500 there, as it surfaces while scheduling the runner).
func (s *Server) parseOptions(raw map[string]any) (options, error) {
	o := options{numPredict: -1, numCtx: s.cfg.NumCtx}
	num := func(key string) (int64, bool, error) {
		v, ok := raw[key]
		if !ok || v == nil {
			return 0, false, nil
		}
		f, isNum := v.(float64)
		if !isNum {
			return 0, false, fmt.Errorf("option %q must be of type integer", key)
		}
		return int64(f), true, nil
	}
	if v, ok, err := num("seed"); err != nil {
		return o, err
	} else if ok && v != -1 { // -1 is Ollama's "random"; the simulator keeps its own seed
		o.seed = &v
	}
	if v, ok, err := num("num_predict"); err != nil {
		return o, err
	} else if ok {
		o.numPredict = int(v)
	}
	if v, ok, err := num("num_ctx"); err != nil {
		return o, err
	} else if ok && v > 0 {
		o.numCtx = int(v)
	}
	return o, nil
}

func (s *Server) keepOf(k *keepAlive) time.Duration {
	if k == nil {
		return s.cfg.KeepAlive
	}
	return k.d
}

func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
	var req struct {
		Model     string         `json:"model"`
		Prompt    string         `json:"prompt"`
		System    string         `json:"system"`
		Stream    *bool          `json:"stream"`
		KeepAlive *keepAlive     `json:"keep_alive"`
		Options   map[string]any `json:"options"`
	}
	if !decode(w, r, &req) {
		return
	}
	p := s.pulledSpec(req.Model)
	if p == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", req.Model))
		return
	}
	opts, err := s.parseOptions(req.Options)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	keep := s.keepOf(req.KeepAlive)
	// An empty prompt loads, and with keep_alive 0 unloads; plain Ollama treats "prompt":""
	// like an absent prompt (hailo-ollama does not).
	if req.Prompt == "" && req.KeepAlive != nil && keep == 0 {
		s.unload(p.name)
		writeJSON(w, http.StatusOK, generateResponse{Model: req.Model, CreatedAt: time.Now().UTC(), Done: true, DoneReason: "unload"})
		return
	}
	if req.Prompt == "" {
		if err := s.load(r.Context(), p.name, opts.numCtx, keep); err != nil {
			return // the client left while the model loaded
		}
		writeJSON(w, http.StatusOK, generateResponse{Model: req.Model, CreatedAt: time.Now().UTC(), Done: true, DoneReason: "load"})
		return
	}

	system := req.System
	if system == "" {
		system = p.spec.system
	}
	prompt := render(system, []message{{Role: "user", Content: req.Prompt}})
	stream := req.Stream == nil || *req.Stream
	out := newNDJSON(w, stream)
	var text strings.Builder
	res, err := s.generate(r.Context(), p.name, prompt, opts, keep, func(tok string) error {
		if !stream {
			text.WriteString(tok)
			return nil
		}
		return out.send(generateResponse{Model: req.Model, CreatedAt: time.Now().UTC(), Response: tok})
	})
	if err != nil {
		return
	}
	final := generateResponse{
		Model: req.Model, CreatedAt: time.Now().UTC(), Response: text.String(), Done: true,
		DoneReason: res.finish, Context: contextTokens(prompt, res.promptTokens+res.evalCount), metrics: res.metrics(begin),
	}
	out.finish(final)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
	var req struct {
		Model     string          `json:"model"`
		Messages  []message       `json:"messages"`
		Stream    *bool           `json:"stream"`
		KeepAlive *keepAlive      `json:"keep_alive"`
		Options   map[string]any  `json:"options"`
		Tools     []tool          `json:"tools"`
		Format    json.RawMessage `json:"format"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Model == "" {
		writeError(w, http.StatusBadRequest, "model is required")
		return
	}
	p := s.pulledSpec(req.Model)
	if p == nil {
		writeError(w, http.StatusNotFound, notPulled(req.Model))
		return
	}
	opts, err := s.parseOptions(req.Options)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	keep := s.keepOf(req.KeepAlive)
	if len(req.Messages) == 0 {
		reason := "load"
		if req.KeepAlive != nil && keep == 0 {
			s.unload(p.name)
			reason = "unload"
		} else if err := s.load(r.Context(), p.name, opts.numCtx, keep); err != nil {
			return
		}
		writeJSON(w, http.StatusOK, chatResponse{
			Model: req.Model, CreatedAt: time.Now().UTC(), Message: message{Role: "assistant"}, Done: true, DoneReason: reason,
		})
		return
	}

	prompt := render(p.spec.system, req.Messages)
	stream := req.Stream == nil || *req.Stream
	if s.shapedChat(w, req.Model, req.Messages, req.Tools, req.Format, stream, prompt, begin) {
		return
	}
	out := newNDJSON(w, stream)
	var text strings.Builder
	res, err := s.generate(r.Context(), p.name, prompt, opts, keep, func(tok string) error {
		if !stream {
			text.WriteString(tok)
			return nil
		}
		return out.send(chatResponse{Model: req.Model, CreatedAt: time.Now().UTC(), Message: message{Role: "assistant", Content: tok}})
	})
	if err != nil {
		return
	}
	out.finish(chatResponse{
		Model: req.Model, CreatedAt: time.Now().UTC(), Message: message{Role: "assistant", Content: text.String()},
		Done: true, DoneReason: res.finish, metrics: res.metrics(begin),
	})
}

// notPulled is Ollama's answer to a chat with a model it does not have.
func notPulled(model string) string {
	return fmt.Sprintf("model %q not found, try pulling it first", model)
}

// ndjson writes a streamed answer line by line (each flushed at once), or, not streaming, only
// the final object.
type ndjson struct {
	w       http.ResponseWriter
	f       http.Flusher
	stream  bool
	started bool
}

func newNDJSON(w http.ResponseWriter, stream bool) *ndjson {
	f, _ := w.(http.Flusher)
	return &ndjson{w: w, f: f, stream: stream}
}

func (n *ndjson) send(v any) error {
	if !n.started {
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.WriteHeader(http.StatusOK)
		n.started = true
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		return err
	}
	if n.f != nil {
		n.f.Flush()
	}
	return nil
}

func (n *ndjson) finish(v any) {
	if n.stream {
		n.send(v)
		return
	}
	writeJSON(n.w, http.StatusOK, v)
}

// render is the prompt the simulated model "evaluates": the system prompt and messages in a
// chat-template shape, so prompt_eval_count grows with the conversation like the real one.
func render(system string, msgs []message) string {
	var b strings.Builder
	if system != "" {
		fmt.Fprintf(&b, "<|system|>\n%s\n", system)
	}
	for _, m := range msgs {
		fmt.Fprintf(&b, "<|%s|>\n", m.Role)
		for _, img := range m.Images {
			fmt.Fprintf(&b, "<|image|>%x<|/image|>", sha256.Sum256(img))
		}
		fmt.Fprintf(&b, "%s%s\n", m.Content, m.ToolCalls)
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// contextTokens stands in for /api/generate's "context": n token ids derived from the text.
func contextTokens(text string, n int) []int {
	h := fnv.New32a()
	h.Write([]byte(text))
	x := h.Sum32()
	ids := make([]int, n)
	for i := range ids {
		x = x*1664525 + 1013904223
		ids[i] = int(x % 128000)
	}
	return ids
}

// result is one generation's outcome.
type result struct {
	loadDur, promptDur, evalDur time.Duration
	promptTokens, evalCount     int
	finish                      string
}

func (r result) metrics(begin time.Time) metrics {
	return metrics{
		TotalDuration: time.Since(begin), LoadDuration: r.loadDur, PromptEvalCount: r.promptTokens,
		PromptEvalDuration: r.promptDur, EvalCount: r.evalCount, EvalDuration: r.evalDur,
	}
}

// generate loads the model if needed, then emits the answer's tokens at the configured pace.
// An error means the client left (or the server closed): nothing more is to be written.
func (s *Server) generate(ctx context.Context, name, prompt string, o options, keep time.Duration, emit func(string) error) (result, error) {
	lm, loadDur, err := s.acquire(ctx, name, o.numCtx)
	if err != nil {
		return result{}, err
	}
	defer s.release(lm, keep)
	seed := s.cfg.Seed
	if o.seed != nil {
		seed = *o.seed
	}
	toks, finish := simserver.Answer(seed, prompt, o.numPredict, s.cfg.LongestAnswer)
	res := result{loadDur: loadDur, promptTokens: simtext.CountTokens(prompt), finish: finish}
	p := simserver.Pacer{Start: time.Now(), TTFT: s.cfg.TTFT, Rate: s.cfg.TokensPerSec}
	var first time.Time
	for i, tok := range toks {
		err := p.Wait(ctx, i)
		if err == nil {
			if i == 0 {
				first = time.Now()
				res.promptDur = first.Sub(p.Start)
			}
			res.evalCount++
			if s.cfg.StampTokens {
				tok = simtext.Stamp(tok, time.Now())
			}
			err = emit(tok)
		}
		if err != nil {
			s.mu.Lock()
			s.stats.Cancelled++
			s.mu.Unlock()
			return res, err
		}
	}
	if !first.IsZero() {
		res.evalDur = time.Since(first)
	}
	s.mu.Lock()
	s.stats.Generations++
	s.mu.Unlock()
	return res, nil
}

// errNotPulled is returned by acquire when the model was deleted while a request waited.
var errNotPulled = errors.New("model not pulled")

// load loads a model without generating (an empty prompt) and starts its keep-alive.
func (s *Server) load(ctx context.Context, name string, numCtx int, keep time.Duration) error {
	lm, _, err := s.acquire(ctx, name, numCtx)
	if err != nil {
		return err
	}
	s.release(lm, keep)
	return nil
}

// acquire returns the loaded model, loading it first (cfg.LoadDelay) if needed, and marks it in
// use so it does not expire mid-answer. A model loaded with another num_ctx is reloaded, as
// Ollama does when load-time options change, unless it is busy.
func (s *Server) acquire(ctx context.Context, name string, numCtx int) (*loadedModel, time.Duration, error) {
	start := time.Now()
	s.mu.Lock()
	for {
		if lm, ok := s.loaded[name]; ok {
			if lm.numCtx == numCtx || lm.inUse > 0 {
				lm.inUse++
				lm.gen++ // a pending expiry no longer applies
				if lm.timer != nil {
					lm.timer.Stop()
				}
				s.mu.Unlock()
				return lm, time.Since(start), nil
			}
			s.unloadLocked(lm)
		}
		ch, ok := s.loading[name]
		if !ok {
			break
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		s.mu.Lock()
	}
	p := s.pulled[name]
	if p == nil {
		s.mu.Unlock()
		return nil, 0, errNotPulled
	}
	ch := make(chan struct{})
	s.loading[name] = ch
	s.mu.Unlock()

	err := simserver.Sleep(ctx, s.cfg.LoadDelay)

	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.loading, name)
	close(ch)
	if err != nil {
		return nil, 0, err
	}
	s.evictLocked()
	lm := &loadedModel{name: name, spec: p.spec, numCtx: numCtx, inUse: 1, expires: time.Now().Add(s.cfg.KeepAlive)}
	s.loaded[name] = lm
	s.stats.Loads++
	return lm, time.Since(start), nil
}

// release ends a request's use of lm and starts its keep-alive: keep 0 unloads it now (once no
// other request uses it), Forever never.
func (s *Server) release(lm *loadedModel, keep time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lm.inUse--
	if s.loaded[lm.name] != lm || lm.inUse > 0 {
		return
	}
	if keep == 0 || lm.unloadWanted {
		s.unloadLocked(lm)
		return
	}
	lm.expires = time.Now().Add(keep) // Forever lands in the 2300s, as in Ollama's /api/ps
	lm.gen++
	if keep == Forever {
		return
	}
	gen := lm.gen
	lm.timer = time.AfterFunc(keep, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.loaded[lm.name] == lm && lm.gen == gen && lm.inUse == 0 {
			s.unloadLocked(lm)
		}
	})
}

// unload answers keep_alive 0: the model goes now, or when its last request ends.
func (s *Server) unload(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lm, ok := s.loaded[name]
	if !ok {
		return
	}
	if lm.inUse > 0 {
		lm.unloadWanted = true
		return
	}
	s.unloadLocked(lm)
}

func (s *Server) unloadLocked(lm *loadedModel) {
	if lm.timer != nil {
		lm.timer.Stop()
	}
	delete(s.loaded, lm.name)
	s.stats.Unloads++
}

// evictLocked makes room for one more model: the idle model expiring soonest goes.
func (s *Server) evictLocked() {
	for len(s.loaded) >= s.cfg.MaxLoaded {
		var victim *loadedModel
		for _, lm := range s.loaded {
			if lm.inUse == 0 && (victim == nil || lm.expires.Before(victim.expires)) {
				victim = lm
			}
		}
		if victim == nil {
			return // every model is busy: Ollama would queue; the simulator overcommits
		}
		s.unloadLocked(victim)
	}
}

// maxEmbedDims bounds the simulator's vectors (a model's embedding length can be thousands).
const maxEmbedDims = 256

// handleEmbed is POST /api/embed {"model","input"}: one deterministic vector per input (a
// string or an array of strings), as long as the model's embedding length (at most
// maxEmbedDims here).
func (s *Server) handleEmbed(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	if !decode(w, r, &req) {
		return
	}
	p := s.pulledSpec(req.Model)
	if p == nil {
		writeError(w, http.StatusNotFound, notPulled(req.Model))
		return
	}
	var inputs []string
	var one string
	if json.Unmarshal(req.Input, &one) == nil {
		inputs = []string{one}
	} else if err := json.Unmarshal(req.Input, &inputs); err != nil {
		writeError(w, http.StatusBadRequest, "invalid input type")
		return
	}
	out := make([][]float32, len(inputs))
	tokens := 0
	for i, in := range inputs {
		out[i] = simtext.Vector(in, min(p.spec.embed, maxEmbedDims))
		tokens += simtext.CountTokens(in)
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": req.Model, "embeddings": out,
		"total_duration": time.Since(begin), "load_duration": 0, "prompt_eval_count": tokens})
}
