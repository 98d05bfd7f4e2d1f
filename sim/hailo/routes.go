package hailo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/llmkube/mesh/sim/internal/simserver"
	"github.com/llmkube/mesh/sim/simtext"
)

// oatppServer is the Server header hailo-ollama's HTTP framework sends.
const oatppServer = "oatpp/1.4.0"

// maxBody bounds a request body; hailo-ollama has no limit, but a simulator need not take
// gigabytes from a broken client.
const maxBody = 16 << 20

// engineRoutes is hailo-ollama 5.1.1's whole API: every other method and path is a 404,
// including /v1/models, /v1/completions, /v1/responses, /api/embed, /api/embeddings, /health
// and /metrics.
func (s *Server) engineRoutes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /":                     s.root,
		"GET /api/version":          s.version,
		"GET /api/tags":             s.tags,
		"GET /hailo/v1/list":        s.list,
		"GET /api/ps":               s.ps,
		"POST /api/show":            s.show,
		"POST /api/pull":            s.pull,
		"DELETE /api/delete":        s.delete,
		"POST /api/generate":        s.generate,
		"POST /api/chat":            s.chat,
		"POST /v1/chat/completions": s.chatCompletions,
	}
}

func (s *Server) serveEngine(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/_sim/stats" {
		writeJSON(w, http.StatusOK, s.Stats())
		return
	}
	key := simserver.Key(r)
	s.requests.Add(key)
	w.Header().Set("Server", oatppServer)
	h, ok := s.routes[key]
	if !ok {
		oatppError(w, http.StatusNotFound, fmt.Sprintf("No mapping for HTTP-method: '%s', URL: '%s'", r.Method, r.URL.Path))
		return
	}
	h(w, r)
}

// oatppError answers as hailo-ollama's framework does when a handler throws or no route matches:
// a plain-text stack trace and a closed connection.
func oatppError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Server", oatppServer)
	w.Header().Set("Connection", "close")
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(code)
	fmt.Fprintf(w, "server=%s\ncode=%d\ndescription=%s\nstacktrace:\n  - %s\n", oatppServer, code, http.StatusText(code), msg)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // hailo-ollama writes "<|im_end|>" as is
	if err := enc.Encode(v); err != nil {
		oatppError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

type errorBody struct {
	Error string `json:"error"`
}

// notFound is 5.1.1's answer to an unknown (or not downloaded) model: HTTP 200 with an error body.
func notFound(w http.ResponseWriter, model string) {
	writeJSON(w, http.StatusOK, errorBody{"model '" + model + "' not found"})
}

// decode reads a JSON body as hailo-ollama's BODY_DTO does: a Content-Type other than
// application/json (curl's form default, text/plain…) has no mapper and is a 500; no
// Content-Type at all uses the default JSON mapper; an empty or null body is a 400; JSON that
// does not fit the fields' types is a 500.
func decode(w http.ResponseWriter, r *http.Request, param string, dst any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mime, _, _ := strings.Cut(ct, ";")
		if strings.TrimSpace(mime) != "application/json" {
			oatppError(w, http.StatusInternalServerError, "No suitable mapper found to deserialize the request body.")
			return false
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		oatppError(w, http.StatusInternalServerError, "reading body: "+err.Error())
		return false
	}
	if len(body) > maxBody {
		oatppError(w, http.StatusInternalServerError, "body larger than the simulator accepts")
		return false
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || string(t) == "null" {
		oatppError(w, http.StatusBadRequest, "Missing valid body parameter '"+param+"'")
		return false
	}
	if err := json.Unmarshal(body, dst); err != nil {
		oatppError(w, http.StatusInternalServerError, "[oatpp::json::ObjectMapper::readFromCaret()]: "+err.Error())
		return false
	}
	return true
}

// isoTime formats as hailo-ollama: UTC with nine fractional digits.
func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000Z") }

// foreverTime stands for "never expires" (keep_alive < 0) in /api/ps; hailo-ollama prints the
// clock's maximum, the simulator the latest time a nanosecond count can hold.
var foreverTime = time.Unix(0, 1<<63-1)

func (s *Server) root(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "hailo-ollama is running")
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": releases[s.cfg.Version].apiVersion})
}

type modelInfo struct {
	Name       string          `json:"name"`
	Model      string          `json:"model"`
	ModifiedAt string          `json:"modified_at"`
	Size       int64           `json:"size"`
	Details    json.RawMessage `json:"details,omitempty"`
	ExpiresAt  string          `json:"expires_at,omitempty"`
}

func (s *Server) info(name string) (modelInfo, bool) {
	m, fi, ok := s.store.downloaded(name)
	if !ok {
		return modelInfo{}, false
	}
	return modelInfo{Name: name, Model: name, ModifiedAt: isoTime(fi.ModTime()), Size: s.store.reportedSize(name, fi.Size()), Details: m.details}, true
}

func (s *Server) tags(w http.ResponseWriter, r *http.Request) {
	models := []modelInfo{}
	for _, n := range s.store.names() {
		if mi, ok := s.info(n); ok {
			models = append(models, mi)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"models": s.store.names()})
}

func (s *Server) ps(w http.ResponseWriter, r *http.Request) {
	if err := s.dev.acquire(r.Context()); err != nil {
		return
	}
	if s.dev.reap(s.clock.Now()) {
		s.count(func(st *Stats) { st.Unloads++ })
	}
	model, at, forever := s.dev.expiresAt()
	s.dev.release()
	models := []modelInfo{}
	if mi, ok := s.info(model); ok && model != "" {
		if forever {
			at = foreverTime
		}
		mi.ExpiresAt = isoTime(at)
		models = append(models, mi)
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

type modelParams struct {
	Model string `json:"model"`
}

func (s *Server) show(w http.ResponseWriter, r *http.Request) {
	var p modelParams
	if !decode(w, r, "show_params", &p) {
		return
	}
	m, fi, ok := s.store.downloaded(p.Model)
	if !ok {
		notFound(w, p.Model)
		return
	}
	var params []string
	for _, t := range m.stops {
		params = append(params, fmt.Sprintf("stop%30s", `"`)+t+`"`)
	}
	writeJSON(w, http.StatusOK, struct {
		License    *string         `json:"license,omitempty"`
		Modelfile  string          `json:"modelfile"`
		Parameters string          `json:"parameters"`
		Template   string          `json:"template,omitempty"`
		Details    json.RawMessage `json:"details,omitempty"`
		ModelInfo  string          `json:"model_info"` // a string, not Ollama's object
		ModifiedAt string          `json:"modified_at"`
	}{m.license, "", strings.Join(params, "\n"), m.chat, m.details, "", isoTime(fi.ModTime())})
}

type pullParams struct {
	Model  string `json:"model"`
	Stream *bool  `json:"stream"`
}

func (s *Server) pull(w http.ResponseWriter, r *http.Request) {
	var p pullParams
	if !decode(w, r, "pull_params", &p) {
		return
	}
	if p.Model == "" {
		// Given only Ollama's older "name" (or nothing), hailo-ollama fails on the missing
		// "model": a 500, as its public clients record.
		oatppError(w, http.StatusInternalServerError, "Missing model name")
		return
	}
	m, ok := s.store.models[p.Model]
	if !ok {
		notFound(w, p.Model)
		return
	}
	downloaded := func() { s.count(func(st *Stats) { st.Pulls++ }) }
	if p.Stream != nil && !*p.Stream {
		err := s.store.pull(r.Context(), s.client, s.libraryURL, s.cfg.LibraryVersion, m,
			func(pullEvent) error { return nil }, downloaded)
		if err != nil {
			s.log.Warn("hailo-sim pull failed", "model", p.Model, "err", err)
			oatppError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, pullEvent{Status: "success"})
		return
	}
	nd := startNDJSON(w)
	err := s.store.pull(r.Context(), s.client, s.libraryURL, s.cfg.LibraryVersion, m, func(e pullEvent) error {
		if e.Status == "success" && !s.cfg.FinalChunks {
			cut() // as hailo-ollama: the blob is in place, "success" never comes
		}
		return nd.line(e)
	}, downloaded)
	if err != nil {
		s.log.Warn("hailo-sim pull failed", "model", p.Model, "err", err)
		nd.line(errorBody{err.Error()})
	}
}

// cut ends a streamed answer the way hailo-ollama 5.1.1 does: the connection closes without the
// stream's last chunk (and without the chunked encoding's end), so the client reads
// "unexpected EOF". net/http closes the connection when a handler panics with ErrAbortHandler.
func cut() { panic(http.ErrAbortHandler) }

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	var p modelParams
	if !decode(w, r, "delete_params", &p) {
		return
	}
	gone := func() {
		writeJSON(w, http.StatusNotFound, map[string]string{"code": "not_found", "error": "model not found"})
	}
	m, ok := s.store.models[p.Model]
	if !ok {
		gone()
		return
	}
	if err := os.Remove(s.store.blobPath(m)); err != nil {
		gone()
		return
	}
	w.WriteHeader(http.StatusOK)
}

// ndjson writes hailo-ollama's streams: one JSON object per line, "\r\n"-terminated, flushed.
type ndjson struct {
	w http.ResponseWriter
	f http.Flusher
}

func startNDJSON(w http.ResponseWriter) *ndjson {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	if f != nil {
		f.Flush() // the status goes out with the stream's start, before any line
	}
	return &ndjson{w, f}
}

func (n *ndjson) line(v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b := append(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), '\r', '\n')
	if _, err := n.w.Write(b); err != nil {
		return err
	}
	if n.f != nil {
		n.f.Flush()
	}
	return nil
}

// options are the generation options hailo-ollama honours; the types are its DTO's, so a value
// of the wrong type (a negative num_predict, a string seed) fails to parse (500).
type options struct {
	Temperature      *float32 `json:"temperature"`
	Seed             *int32   `json:"seed"`
	TopK             *uint32  `json:"top_k"`
	TopP             *float32 `json:"top_p"`
	FrequencyPenalty *float32 `json:"frequency_penalty"`
	NumPredict       *uint32  `json:"num_predict"`
	UseMlock         *bool    `json:"use_mlock"`
}

type generateParams struct {
	Model     string   `json:"model"`
	Prompt    *string  `json:"prompt"`
	Options   *options `json:"options"`
	Stream    *bool    `json:"stream"`
	KeepAlive *int32   `json:"keep_alive"`
}

type chatParams struct {
	Model     string     `json:"model"`
	Messages  *[]message `json:"messages"`
	Tools     []tool     `json:"tools"` // read by 5.3 and later only
	Options   *options   `json:"options"`
	Stream    *bool      `json:"stream"`
	KeepAlive *int32     `json:"keep_alive"`
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	var p generateParams
	if !decode(w, r, "generation_params", &p) {
		return
	}
	m, _, ok := s.store.downloaded(p.Model)
	if !ok {
		notFound(w, p.Model)
		return
	}
	if p.Prompt == nil { // only an absent prompt loads or unloads; "" generates
		s.loadUnload(w, r, p.Model, s.store.blobPath(m), p.KeepAlive, false)
		return
	}
	s.complete(w, r, completion{
		model: m, prompt: m.style.render([]message{{Role: "user", Content: *p.Prompt}}), key: *p.Prompt,
		opts: p.Options, stream: p.Stream == nil || *p.Stream, keepAlive: p.KeepAlive, kind: kindResponse,
	})
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var p chatParams
	if !decode(w, r, "generation_params", &p) {
		return
	}
	m, _, ok := s.store.downloaded(p.Model)
	if !ok {
		notFound(w, p.Model)
		return
	}
	if p.Messages == nil { // only absent messages load or unload; [] generates
		s.loadUnload(w, r, p.Model, s.store.blobPath(m), p.KeepAlive, true)
		return
	}
	c := completion{
		model: m, prompt: m.style.render(*p.Messages), key: messagesKey(*p.Messages),
		opts: p.Options, stream: p.Stream == nil || *p.Stream, keepAlive: p.KeepAlive, kind: kindMessage,
	}
	if len(p.Tools) > 0 && releases[s.cfg.Version].toolsByTemplate {
		if !m.tools {
			// The wording of hailo-ollama's refusal is not in the record; the status and the
			// "does not support tools" are (issue 47), and this is Ollama's phrasing.
			writeJSON(w, http.StatusBadRequest, errorBody{p.Model + " does not support tools"})
			return
		}
		c.call = &p.Tools[0]
	}
	s.complete(w, r, c)
}

func messagesKey(msgs []message) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = m.Content
	}
	return strings.Join(parts, "\n")
}

type completionParams struct {
	Model               string     `json:"model"`
	Messages            *[]message `json:"messages"`
	FrequencyPenalty    *float32   `json:"frequency_penalty"`
	MaxCompletionTokens *int64     `json:"max_completion_tokens"`
	MaxTokens           *int64     `json:"max_tokens"`
	Temperature         *float32   `json:"temperature"`
	Seed                *int32     `json:"seed"`
	TopP                *float32   `json:"top_p"`
	Stream              bool       `json:"stream"`
	N                   *int8      `json:"n"`
}

// chatCompletions is 5.1.1's OpenAI route: non-streaming only, every error an HTTP 200.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var p completionParams
	if !decode(w, r, "generation_params", &p) {
		return
	}
	switch {
	case p.Messages == nil:
		writeJSON(w, http.StatusOK, errorBody{"messages field is required"})
		return
	case p.N != nil && *p.N != 1:
		writeJSON(w, http.StatusOK, errorBody{"only n == 1 is supported"})
		return
	case p.Stream:
		writeJSON(w, http.StatusOK, errorBody{"streaming not supported on this endpoint. Use /api/chat endpoint instead."})
		return
	}
	m, _, ok := s.store.downloaded(p.Model)
	if !ok {
		notFound(w, p.Model)
		return
	}
	opts := &options{Temperature: p.Temperature, Seed: p.Seed, TopP: p.TopP, FrequencyPenalty: p.FrequencyPenalty}
	for _, limit := range []*int64{p.MaxTokens, p.MaxCompletionTokens} { // the latter wins
		if limit != nil {
			n := uint32(max(0, min(*limit, 1<<32-1)))
			opts.NumPredict = &n
		}
	}
	s.complete(w, r, completion{
		model: m, prompt: m.style.render(*p.Messages), key: messagesKey(*p.Messages),
		opts: opts, kind: kindCompletion,
	})
}

type finalChunk struct {
	Model         string   `json:"model"`
	CreatedAt     string   `json:"created_at"`
	Response      *string  `json:"response,omitempty"`
	Message       *message `json:"message,omitempty"`
	Done          bool     `json:"done"`
	DoneReason    string   `json:"done_reason,omitempty"`
	TotalDuration *int64   `json:"total_duration,omitempty"`
	EvalCount     *int     `json:"eval_count,omitempty"`
}

// shaped puts text where the route's answers carry it: "response" or "message".
func shaped(c finalChunk, asMessage bool, text string) finalChunk {
	if asMessage {
		c.Message = &message{Role: "assistant", Content: text}
	} else {
		c.Response = &text
	}
	return c
}

// loadUnload is a generate or chat without prompt or messages: keep_alive 0 takes whatever model
// is loaded off the device, anything else loads this one.
func (s *Server) loadUnload(w http.ResponseWriter, r *http.Request, model, blob string, keepAlive *int32, asMessage bool) {
	if err := s.dev.acquire(r.Context()); err != nil {
		return
	}
	defer s.dev.release()
	reason := "load"
	if keepAlive != nil && *keepAlive == 0 {
		reason = "unload"
		if s.dev.reset() {
			s.count(func(st *Stats) { st.Unloads++ })
		}
	} else if _, err := s.load(r.Context(), model, blob, keepAlive); err != nil {
		return // the client went away or the simulator is closing
	}
	writeJSON(w, http.StatusOK, shaped(finalChunk{
		Model: model, CreatedAt: isoTime(s.clock.Now()), Done: true, DoneReason: reason,
	}, asMessage, ""))
}

type completionKind int

const (
	kindResponse   completionKind = iota // /api/generate
	kindMessage                          // /api/chat
	kindCompletion                       // /v1/chat/completions
)

type completion struct {
	call      *tool // the tool the simulated model calls instead of answering in text
	model     manifest
	prompt    string // as the chat template lays it out: what counts against the context
	key       string // what the answer is derived from
	opts      *options
	stream    bool
	keepAlive *int32
	kind      completionKind
}

// complete runs one generation on the device, holding it from the load to the last token.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, c completion) {
	ctx := r.Context()
	if err := s.dev.acquire(ctx); err != nil {
		return
	}
	defer s.dev.release()
	if _, err := s.load(ctx, c.model.name, s.store.blobPath(c.model), c.keepAlive); err != nil {
		return
	}
	promptTokens := simtext.CountTokens(c.prompt)
	if promptTokens > s.cfg.ContextTokens {
		oatppError(w, http.StatusInternalServerError, fmt.Sprintf(
			"Failed to generate: prompt of %d tokens exceeds the context of %d tokens", promptTokens, s.cfg.ContextTokens))
		return
	}
	var seed int64
	if c.opts != nil && c.opts.Seed != nil && *c.opts.Seed != -1 {
		seed = int64(*c.opts.Seed)
	}
	n, reason := simtext.AnswerLengthUpTo(seed, c.key, s.cfg.LongestAnswer), "stop"
	if c.opts != nil && c.opts.NumPredict != nil && int64(*c.opts.NumPredict) < int64(n) {
		n, reason = int(*c.opts.NumPredict), "length"
	}
	if room := s.cfg.ContextTokens - promptTokens; n > room {
		n, reason = room, "length"
	}
	tokens := simtext.Generate(seed, c.key, n)
	if len(tokens) > 0 && s.dev.isDegraded() {
		tokens[0] = DegradedMarker + tokens[0]
	}
	pace := s.timing(c.model.name)
	begin := s.clock.Now()
	name := c.model.name
	if c.call != nil {
		s.callTool(w, c, name)
		return
	}

	var nd *ndjson
	if c.stream {
		nd = startNDJSON(w)
	}
	var text strings.Builder
	for i, tok := range tokens {
		wait := pace.interval
		if i == 0 {
			wait = pace.ttft
		}
		if err := s.clock.Sleep(ctx, wait); err != nil {
			return
		}
		if s.cfg.StampTokens {
			tok = simtext.Stamp(tok, time.Now())
		}
		if nd != nil {
			chunk := shaped(finalChunk{Model: name, CreatedAt: isoTime(s.clock.Now())}, c.kind == kindMessage, tok)
			if err := nd.line(chunk); err != nil {
				return // the client went away: stop generating, free the device
			}
		} else {
			text.WriteString(tok)
		}
	}
	total := s.clock.Now().Sub(begin).Nanoseconds()
	count := len(tokens)
	switch {
	case nd != nil && !s.cfg.FinalChunks:
		cut() // as hailo-ollama: the answer is all there, its last chunk never comes
	case nd != nil:
		nd.line(shaped(finalChunk{Model: name, CreatedAt: isoTime(s.clock.Now()), Done: true,
			DoneReason: reason, TotalDuration: &total, EvalCount: &count}, c.kind == kindMessage, ""))
	case c.kind == kindCompletion:
		type choice struct {
			Index        int     `json:"index"`
			Message      message `json:"message"`
			FinishReason string  `json:"finish_reason"`
		}
		writeJSON(w, http.StatusOK, struct {
			ID      string   `json:"id"`
			Object  string   `json:"object"`
			Created int64    `json:"created"` // nanoseconds, as hailo-ollama writes it
			Model   string   `json:"model"`
			Choices []choice `json:"choices"`
		}{
			ID: fmt.Sprintf("chatcmpl-%d", rand.Int32()), Object: "chat.completion",
			Created: s.clock.Now().UnixNano(), Model: name,
			Choices: []choice{{0, message{Role: "assistant", Content: text.String()}, reason}},
		})
	default:
		writeJSON(w, http.StatusOK, shaped(finalChunk{Model: name, CreatedAt: isoTime(s.clock.Now()), Done: true,
			DoneReason: reason, TotalDuration: &total, EvalCount: &count}, c.kind == kindMessage, text.String()))
	}
}

// DegradedMarker begins every answer of a release with the swap defect once a model has been
// loaded after another in the same process: the defect made visible, since a simulated answer
// has no quality to lose.
const DegradedMarker = "[hailo-sim: degraded after a back-to-back load] "

// tool is one entry of a request's "tools", of which the simulator reads the function's name.
type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

// toolCall is how 5.3 answers a parsed call on /api/chat: a function with its name and its
// arguments as an object (src/library/utils/dto_json.cpp; /v1 would give them as a string).
type toolCall struct {
	Function struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	} `json:"function"`
}

// toolsBranch is the tools branch a tool-capable template opens with (shortened from the
// upstream templates): hailo-ollama 5.3 finds it, and the simulator reads it back, to decide
// whether a request with tools is served.
const toolsBranch = "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}{{- '</tools><|im_end|>\\n' }}{%- endif %}"

// callTool answers a chat that offered tools to a tool-capable model: the simulated model calls
// the first tool, with no arguments, in one message (streamed or not).
func (s *Server) callTool(w http.ResponseWriter, c completion, name string) {
	var call toolCall
	call.Function.Name = c.call.Function.Name
	call.Function.Arguments = map[string]any{}
	msg := &message{Role: "assistant", ToolCalls: []toolCall{call}}
	chunk := finalChunk{Model: name, CreatedAt: isoTime(s.clock.Now()), Message: msg}
	if !c.stream {
		chunk.Done, chunk.DoneReason = true, "stop"
		writeJSON(w, http.StatusOK, chunk)
		return
	}
	nd := startNDJSON(w)
	if err := nd.line(chunk); err != nil {
		return
	}
	if !s.cfg.FinalChunks {
		cut()
	}
	nd.line(finalChunk{Model: name, CreatedAt: isoTime(s.clock.Now()), Message: &message{Role: "assistant"}, Done: true, DoneReason: "stop"})
}
