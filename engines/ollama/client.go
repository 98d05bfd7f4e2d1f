package ollama

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/stream"
)

// Client speaks the HTTP API that Ollama and hailo-ollama share. It is written to the stricter
// of the two dialects, so one client serves both drivers:
//   - every request carries Content-Type: application/json (hailo-ollama fails a body of any
//     other type with a 500);
//   - load and unload requests have no prompt field at all (hailo-ollama generates for a present
//     "prompt": "");
//   - an "error" in any answer is an error whatever the status (hailo-ollama 5.1.x answers
//     unknown models with HTTP 200 {"error": …}), and APIError matches engines.ErrNotFound
//     when the daemon does not know the model.
//
// Errors are *engines.Error: EngineUnavailable when the daemon does not answer, PullFailed for
// pulls, EngineError otherwise.
type Client struct {
	base   string
	daemon string // "Ollama" or "hailo-ollama", for messages
	hc     *http.Client
	// finish is how long an answer the caller ended itself (emit's engines.ErrEnough) is read
	// on, unwritten, before its connection is cut; 0 cuts at once. Ollama needs it (see New and
	// finishAnswer). Any other emit error, or ctx's end, cuts at once.
	finish time.Duration
}

// NewClient returns a client of the daemon at baseURL ("http://127.0.0.1:11434"). daemon names
// it in messages. A nil hc means a client without proxy (the daemon is on the LAN or loopback)
// and without overall timeout (answers stream for minutes); requests end with their context.
func NewClient(baseURL, daemon string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("%s URL %q: want http://host:port", daemon, baseURL)
	}
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:       nil,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			// The gateway streams many chats to one daemon at once; keeping their connections
			// saves a dial per request under load (net/http's default keeps 2).
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	return &Client{base: strings.TrimSuffix(u.String(), "/"), daemon: daemon, hc: hc}, nil
}

// URL is the daemon's base URL.
func (c *Client) URL() string { return c.base }

// APIError is an error the daemon answered with.
type APIError struct {
	Daemon  string
	Status  int // HTTP status; 200 for hailo-ollama's errors in a 200 answer
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s: %s (HTTP %d)", e.Daemon, e.Message, e.Status)
}

// Is makes an unknown-model answer match engines.ErrNotFound. Ollama says `model "x" not
// found, try pulling it first` (404) or, pulling, "file does not exist"; hailo-ollama says
// "model 'x' not found" (200).
func (e *APIError) Is(target error) bool {
	if target != engines.ErrNotFound {
		return false
	}
	m := strings.ToLower(e.Message)
	return strings.Contains(m, "not found") || strings.Contains(m, "file does not exist")
}

// errorField reads an "error" member, which Ollama writes as a string and some proxies as an
// object with a message.
type errorField struct {
	Error json.RawMessage `json:"error"`
}

func (f errorField) message() string {
	if len(f.Error) == 0 || string(f.Error) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(f.Error, &s) == nil {
		return s
	}
	var o struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(f.Error, &o) == nil && o.Message != "" {
		return o.Message
	}
	return string(f.Error)
}

func (c *Client) unavailable(err error) error {
	return &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("%s at %s does not answer: %w", c.daemon, c.base, err)}
}

// do sends one request. A transport failure is EngineUnavailable; the caller reads the answer.
func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, &engines.Error{Code: api.CodeInternal, Err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, &engines.Error{Code: api.CodeInternal, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, application/x-ndjson")
	// Every call to a daemon (chat, generate, show, pull, delete) may be sent again when a reused
	// connection was closed before any answer: none has an effect that repeating would double.
	engines.Replayable(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, c.unavailable(err)
	}
	return resp, nil
}

// statusError turns a non-200 answer into an APIError carrying the daemon's own words: a JSON
// error member, or the first line of a text body (hailo-ollama's framework answers text).
func (c *Client) statusError(code api.Code, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var f errorField
	msg := ""
	if json.Unmarshal(b, &f) == nil {
		msg = f.message()
	}
	if msg == "" {
		msg = strings.TrimSpace(string(b))
		if line, _, ok := strings.Cut(msg, "\n"); ok {
			msg = line
		}
		if msg == "" {
			msg = resp.Status
		}
	}
	if code == api.CodeEngineError && (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotImplemented) {
		// The request asked for what this model cannot do ("does not support tools", an
		// embedding from a model whose runner does not embed): the client's to change.
		code = api.CodeBadRequest
	}
	return &engines.Error{Code: code, Err: &APIError{Daemon: c.daemon, Status: resp.StatusCode, Message: msg}}
}

// call sends a request and decodes a single JSON answer into out (which may be nil).
func (c *Client) call(ctx context.Context, code api.Code, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c.statusError(code, resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return c.unavailable(err)
	}
	var f errorField
	if json.Unmarshal(b, &f) == nil {
		if msg := f.message(); msg != "" {
			return &engines.Error{Code: code, Err: &APIError{Daemon: c.daemon, Status: resp.StatusCode, Message: msg}}
		}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return &engines.Error{Code: code, Err: fmt.Errorf("%s %s %s: unreadable answer: %w", c.daemon, method, path, err)}
	}
	return nil
}

// maxAnswer bounds a single JSON answer (a tag list of many models is still far smaller).
const maxAnswer = 16 << 20

// GetJSON fetches path and decodes its JSON answer into out.
func (c *Client) GetJSON(ctx context.Context, path string, out any) error {
	return c.call(ctx, api.CodeEngineError, http.MethodGet, path, nil, out)
}

// Root is GET /, the only liveness probe both daemons have ("Ollama is running",
// "hailo-ollama is running"); it returns the text.
func (c *Client) Root(ctx context.Context) (string, error) {
	resp, err := c.do(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", c.statusError(api.CodeEngineUnavailable, resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return "", c.unavailable(err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Version is GET /api/version.
func (c *Client) Version(ctx context.Context) (string, error) {
	var v struct {
		Version string `json:"version"`
	}
	err := c.GetJSON(ctx, "/api/version", &v)
	return v.Version, err
}

// HailoList is GET /hailo/v1/list, the route only hailo-ollama has: isHailo is false when the
// daemon answers it with a 404 (plain Ollama), and models lists its zoo.
func (c *Client) HailoList(ctx context.Context) (models []string, isHailo bool, err error) {
	resp, err := c.do(ctx, http.MethodGet, "/hailo/v1/list", nil)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return nil, false, nil
	default:
		return nil, false, c.statusError(api.CodeEngineError, resp)
	}
	var l struct {
		Models []string `json:"models"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(&l); err != nil {
		return nil, false, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("%s /hailo/v1/list: unreadable answer: %w", c.daemon, err)}
	}
	return l.Models, true, nil
}

// Tag is a pulled model, from /api/tags.
type Tag struct {
	Name    string           `json:"name"`
	Model   string           `json:"model"`
	Size    int64            `json:"size"`
	Details api.ModelDetails `json:"details"`
}

// maxDetail bounds each string of a daemon's model details: they are shown to clients.
const maxDetail = 64

// Describe is what the daemon lists of model in /api/tags: size and details (family,
// parameter size, quantisation), each string bounded.
func (c *Client) Describe(ctx context.Context, model string) (api.ModelDetails, error) {
	tags, err := c.Tags(ctx)
	if err != nil {
		return api.ModelDetails{}, err
	}
	for _, t := range tags {
		if !SameModel(t.Name, model) && !SameModel(t.Model, model) {
			continue
		}
		d := t.Details
		d.Format, d.Family = bounded(d.Format), bounded(d.Family)
		d.ParameterSize, d.QuantizationLevel = bounded(d.ParameterSize), bounded(d.QuantizationLevel)
		if len(d.Families) > 8 {
			d.Families = d.Families[:8]
		}
		for i := range d.Families {
			d.Families[i] = bounded(d.Families[i])
		}
		d.Size = max(t.Size, 0)
		return d, nil
	}
	return api.ModelDetails{}, fmt.Errorf("%s: %q is not in /api/tags: %w", c.daemon, model, engines.ErrNotFound)
}

// bounded keeps a remote string short, valid UTF-8 and free of control characters.
func bounded(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	if len(s) > maxDetail {
		s = strings.ToValidUTF8(s[:maxDetail], "")
	}
	return s
}

// Has reports whether the daemon already has model (GET /api/tags, names compared as the
// daemon does, "x" being "x:latest"), and its size on disk.
func (c *Client) Has(ctx context.Context, model string) (int64, bool, error) {
	tags, err := c.Tags(ctx)
	if err != nil {
		return 0, false, err
	}
	for _, t := range tags {
		if SameModel(t.Name, model) || SameModel(t.Model, model) {
			return max(t.Size, 0), true, nil
		}
	}
	return 0, false, nil
}

// Tags is GET /api/tags: the models present locally.
func (c *Client) Tags(ctx context.Context) ([]Tag, error) { return getModels[Tag](ctx, c, "/api/tags") }

// TagNames is the names of the models Tags lists.
func (c *Client) TagNames(ctx context.Context) ([]string, error) {
	tags, err := c.Tags(ctx)
	return names(tags, err, func(t Tag) string { return t.Name })
}

// Running is a loaded model, from /api/ps.
type Running struct {
	Name      string `json:"name"`
	Model     string `json:"model"`
	Size      int64  `json:"size"`
	SizeVRAM  int64  `json:"size_vram"`
	ExpiresAt string `json:"expires_at"`
}

// PS is GET /api/ps: the models loaded now.
func (c *Client) PS(ctx context.Context) ([]Running, error) {
	return getModels[Running](ctx, c, "/api/ps")
}

// getModels fetches a list the daemons answer as {"models": […]} (/api/tags, /api/ps).
func getModels[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	var l struct {
		Models []T `json:"models"`
	}
	err := c.GetJSON(ctx, path, &l)
	return l.Models, err
}

// PSNames is the names of the models PS lists.
func (c *Client) PSNames(ctx context.Context) ([]string, error) {
	running, err := c.PS(ctx)
	return names(running, err, func(r Running) string { return r.Name })
}

// names is the name of each model in a list, unless listing it failed with err. On success it
// is empty rather than nil, so that an encoded empty list reads [] and not null.
func names[T any](l []T, err error, name func(T) string) ([]string, error) {
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(l))
	for _, m := range l {
		out = append(out, name(m))
	}
	return out, nil
}

// SameModel reports whether two model names are the same model to Ollama: "llama3.2" is
// "llama3.2:latest", and "library/x" and "registry.ollama.ai/library/x" are "x".
func SameModel(a, b string) bool { return canonical(a) == canonical(b) }

func canonical(n string) string {
	n = strings.ToLower(strings.TrimSpace(n))
	n = strings.TrimPrefix(n, "registry.ollama.ai/")
	n = strings.TrimPrefix(n, "library/")
	if i := strings.LastIndex(n, "/"); !strings.Contains(n[i+1:], ":") {
		n += ":latest"
	}
	return n
}

// Listed reports whether name is among the running models.
func Listed(running []Running, name string) bool {
	for _, r := range running {
		if SameModel(r.Name, name) || SameModel(r.Model, name) {
			return true
		}
	}
	return false
}

// Pull is POST /api/pull, streaming: progress gets the bytes done and known in all, summed over
// the layers announced so far. It succeeds only on the daemon's final "success".
func (c *Client) Pull(ctx context.Context, model string, progress func(engines.Progress)) error {
	return c.pull(ctx, model, false, progress)
}

// PullInsecure is Pull from a registry spoken to in plain HTTP: the agent's mirror on loopback
// (model is "127.0.0.1:<port>/<namespace>/<model>:<tag>").
func (c *Client) PullInsecure(ctx context.Context, model string, progress func(engines.Progress)) error {
	return c.pull(ctx, model, true, progress)
}

func (c *Client) pull(ctx context.Context, model string, insecure bool, progress func(engines.Progress)) error {
	if progress == nil {
		progress = func(engines.Progress) {}
	}
	body := map[string]any{"model": model, "stream": true}
	if insecure {
		body["insecure"] = true
	}
	resp, err := c.do(ctx, http.MethodPost, "/api/pull", body)
	if err != nil {
		return asPull(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c.statusError(api.CodePullFailed, resp)
	}
	type layer struct{ total, completed int64 }
	layers := map[string]*layer{}
	var order []string
	success := false
	err = c.lines(ctx, resp.Body, api.CodePullFailed, func(b []byte) error {
		var p struct {
			errorField
			Status    string `json:"status"`
			Digest    string `json:"digest"`
			Total     int64  `json:"total"`
			Completed int64  `json:"completed"`
		}
		err := json.Unmarshal(b, &p)
		if err := c.lineError(p.errorField, api.CodePullFailed); err != nil {
			return err
		}
		if err != nil {
			return fmt.Errorf("unreadable progress line %q: %w", truncate(b), err)
		}
		if p.Digest != "" {
			l, ok := layers[p.Digest]
			if !ok {
				l = &layer{}
				layers[p.Digest] = l
				order = append(order, p.Digest)
			}
			l.total = max(l.total, p.Total)
			l.completed = max(l.completed, p.Completed)
		}
		var done, total int64
		for _, d := range order {
			done += layers[d].completed
			total += layers[d].total
		}
		progress(engines.Progress{Status: p.Status, Completed: done, Total: total})
		if p.Status == "success" {
			success = true
		}
		return nil
	}, nil)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return asPull(err)
	}
	if !success {
		return &engines.Error{Code: api.CodePullFailed, Err: fmt.Errorf("%s: the pull of %s %w, without success", c.daemon, model, ErrNoLastChunk)}
	}
	return nil
}

// Copy is POST /api/copy: dst names the same model as src (the blobs are shared).
func (c *Client) Copy(ctx context.Context, src, dst string) error {
	return c.call(ctx, api.CodeEngineError, http.MethodPost, "/api/copy", map[string]string{"source": src, "destination": dst}, nil)
}

// Delete is DELETE /api/delete: the name goes, and the blobs no other name uses.
func (c *Client) Delete(ctx context.Context, model string) error {
	return c.call(ctx, api.CodeEngineError, http.MethodDelete, "/api/delete", map[string]string{"model": model}, nil)
}

// asPull makes an error of a pull a PullFailed, keeping EngineUnavailable (the daemon is down,
// which says more) and context errors as they are.
func asPull(err error) error {
	var ee *engines.Error
	if errors.As(err, &ee) && ee.Code == api.CodeEngineError {
		return &engines.Error{Code: api.CodePullFailed, Err: ee.Err}
	}
	return err
}

// KeepForever is the keep_alive of a placement: a negative value keeps the model loaded until
// it is unloaded explicitly. The daemons' default (5 minutes) would unload an idle placement
// behind the agent's back, leaving it shown ready while the engine has dropped it; and every
// request resets the timer to its own keep_alive, so chats must send it too.
const KeepForever = -1

// generateRequest is /api/generate for loading and unloading. It has no prompt field at all:
// hailo-ollama loads and unloads only when "prompt" is absent.
type generateRequest struct {
	Model     string         `json:"model"`
	KeepAlive int            `json:"keep_alive"`
	Stream    bool           `json:"stream"`
	Options   map[string]any `json:"options,omitempty"`
}

type generateAnswer struct {
	Model      string `json:"model"`
	Done       bool   `json:"done"`
	DoneReason string `json:"done_reason"`
}

// Load loads model with keep_alive KeepForever and the given options (Ollama's num_ctx; nil for
// hailo-ollama) and checks that the daemon says it loaded.
func (c *Client) Load(ctx context.Context, model string, options map[string]any) error {
	var a generateAnswer
	req := generateRequest{Model: model, KeepAlive: KeepForever, Options: options}
	if err := c.call(ctx, api.CodeEngineError, http.MethodPost, "/api/generate", req, &a); err != nil {
		return err
	}
	if a.DoneReason != "load" {
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("%s: loading %s answered done_reason %q, want \"load\"", c.daemon, model, a.DoneReason)}
	}
	return nil
}

// Unload unloads model (keep_alive 0) and checks that the daemon says it did.
func (c *Client) Unload(ctx context.Context, model string) error {
	var a generateAnswer
	if err := c.call(ctx, api.CodeEngineError, http.MethodPost, "/api/generate", generateRequest{Model: model}, &a); err != nil {
		return err
	}
	if a.DoneReason != "unload" {
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("%s: unloading %s answered done_reason %q, want \"unload\"", c.daemon, model, a.DoneReason)}
	}
	return nil
}

// Options are a chat's options in the protocol's form.
func Options(req engines.ChatRequest) map[string]any {
	o := map[string]any{}
	if req.Temperature != nil {
		o["temperature"] = *req.Temperature
	}
	if req.TopP != nil {
		o["top_p"] = *req.TopP
	}
	if req.TopK != nil {
		o["top_k"] = *req.TopK
	}
	if req.Seed != nil {
		o["seed"] = *req.Seed
	}
	if req.MaxTokens > 0 {
		o["num_predict"] = req.MaxTokens
	}
	if len(req.Stop) > 0 {
		o["stop"] = req.Stop
	}
	return o
}

type chatRequest struct {
	Model     string          `json:"model"`
	Messages  []chatMessage   `json:"messages"`
	Stream    bool            `json:"stream"`
	KeepAlive int             `json:"keep_alive"`
	Options   map[string]any  `json:"options,omitempty"`
	Tools     []chatTool      `json:"tools,omitempty"`
	Format    json.RawMessage `json:"format,omitempty"`
}

// chatMessage is Ollama's message: a tool call's arguments are an object, not a string.
type chatMessage struct {
	Role      string         `json:"role"`
	Content   string         `json:"content"`
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
	ToolName  string         `json:"tool_name,omitempty"`
	Images    [][]byte       `json:"images,omitempty"` // base64 in JSON, as Ollama takes them
}

type chatToolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

// ollamaChat writes req's messages, tools and format in Ollama's shape. Ollama has no
// tool_choice: "none" sends no tools; any other choice leaves the call to the model.
func ollamaChat(req engines.ChatRequest) (msgs []chatMessage, tools []chatTool, format json.RawMessage, err error) {
	for _, m := range req.Messages {
		cm := chatMessage{Role: m.Role, Content: m.Content, ToolName: m.ToolName}
		for _, img := range m.Images {
			cm.Images = append(cm.Images, img.Data)
		}
		for _, tc := range m.ToolCalls {
			var call chatToolCall
			call.ID, call.Function.Name = tc.ID, tc.Name
			call.Function.Arguments = json.RawMessage(cmp.Or(strings.TrimSpace(tc.Arguments), "{}"))
			if !json.Valid(call.Function.Arguments) {
				return nil, nil, nil, &engines.Error{Code: api.CodeBadRequest, Err: fmt.Errorf("the arguments of tool call %q are not JSON", tc.Name)}
			}
			cm.ToolCalls = append(cm.ToolCalls, call)
		}
		msgs = append(msgs, cm)
	}
	if string(bytes.TrimSpace(req.ToolChoice)) != `"none"` {
		for _, t := range req.Tools {
			var ct chatTool
			ct.Type = "function"
			ct.Function.Name, ct.Function.Description, ct.Function.Parameters = t.Name, t.Description, t.Parameters
			tools = append(tools, ct)
		}
	}
	if f := req.Format; f != nil {
		format = json.RawMessage(`"json"`)
		if len(f.Schema) > 0 {
			format = f.Schema
		}
	}
	return msgs, tools, format, nil
}

// Chat is POST /api/chat, streaming NDJSON: emit gets each piece of the answer, the tool calls
// the model made, and a last chunk with Done set. An error from emit closes the connection at
// once, which stops generation.
func (c *Client) Chat(ctx context.Context, model string, req engines.ChatRequest, options map[string]any, emit func(engines.ChatChunk) error) error {
	messages, tools, format, err := ollamaChat(req)
	if err != nil {
		return err
	}
	path := "/api/chat"
	var body any = chatRequest{Model: model, Messages: messages, Stream: true, KeepAlive: KeepForever, Options: options,
		Tools: tools, Format: format}
	if req.Prompt != "" {
		// A raw completion: /api/generate with raw continues the prompt through no template.
		path = "/api/generate"
		gen := map[string]any{"model": model, "prompt": req.Prompt, "raw": true, "stream": true, "keep_alive": KeepForever}
		if len(options) > 0 {
			gen["options"] = options
		}
		if format != nil {
			gen["format"] = format
		}
		body = gen
	} else if len(messages) == 0 {
		// An absent or empty message list would load or unload instead of answering.
		return &engines.Error{Code: api.CodeBadRequest, Err: errors.New("a chat needs at least one message")}
	}
	// No context of its own to cancel on return: closing the body unread ends the connection
	// (it is not put back in the pool), which stops the daemon's generation as a cancel would.
	// With c.finish, the request has a cancel of its own, which ctx's end calls unless the
	// answer is being finished (it is read on after ctx ends: the caller's ctx ends as it
	// returns).
	reqCtx, cancel := ctx, context.CancelFunc(func() {})
	var finishing atomic.Bool
	if c.finish > 0 {
		reqCtx, cancel = context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(ctx, func() {
			if !finishing.Load() {
				cancel()
			}
		})
		defer stop()
	}
	resp, err := c.do(reqCtx, http.MethodPost, path, body)
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return ctx.Err() // the caller's (a deadline stays a deadline), not reqCtx's cancel
		}
		return err
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		return c.statusError(api.CodeEngineError, resp)
	}
	a := chatAnswer{c: c, emit: emit}
	err = c.lines(ctx, resp.Body, api.CodeEngineError, a.line, a.idle)
	if c.finish > 0 && errors.Is(a.emitErr, engines.ErrEnough) && !a.done && ctx.Err() == nil {
		finishing.Store(true)
		go c.finishAnswer(resp.Body, cancel)
	} else {
		resp.Body.Close()
		cancel()
	}
	if a.emitErr != nil {
		return a.emitErr
	}
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	if !a.done {
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("%s: the answer from %s %w", c.daemon, model, ErrNoLastChunk)}
	}
	return nil
}

// finishAnswer reads the rest of an answer nobody takes, for c.finish at most, then closes it.
//
// Ollama (0.33 measured, server/routes.go at ollama/ollama fb3076099) can lose a model for good
// when a streamed answer's connection closes mid-answer: its handler stops taking the pieces
// while the runner's goroutine may be handing it the next one on an unbuffered channel, with
// no way out, so the runner's one slot is never given back and every later request to that
// model waits forever. The faster the tokens, the likelier (1 cut in ~50 on a 0.3 ms-a-token
// model). Read to its end, the answer ends as any other does. A client that leaves still cuts
// at once: stopping the generation is worth more to its owner than that rare risk.
func (c *Client) finishAnswer(body io.ReadCloser, cancel context.CancelFunc) {
	t := time.AfterFunc(c.finish, cancel)
	defer t.Stop()
	io.Copy(io.Discard, body)
	body.Close()
	cancel()
}

// chatAnswer is what Chat has read of one answer.
type chatAnswer struct {
	c       *Client
	emit    func(engines.ChatChunk) error
	emitErr error // emit's, passed on as it is
	done    bool  // the last chunk came
	held    bool  // a chunk went out with More, and none without it since
}

// chatLine is one line of a streamed chat (or generate) answer.
type chatLine struct {
	errorField
	Message struct {
		Content   string         `json:"content"`
		ToolCalls []chatToolCall `json:"tool_calls"`
	} `json:"message"`
	Response        string `json:"response"` // /api/generate
	Done            bool   `json:"done"`
	DoneReason      string `json:"done_reason"`
	PromptEvalCount int    `json:"prompt_eval_count"`
	EvalCount       int    `json:"eval_count"`
}

func (a *chatAnswer) send(ch engines.ChatChunk) error {
	if err := a.emit(ch); err != nil {
		a.emitErr = err
		return err
	}
	a.held = ch.More
	return nil
}

// idle lets the held pieces go before a wait on the daemon.
func (a *chatAnswer) idle() error {
	if !a.held {
		return nil
	}
	return a.send(engines.ChatChunk{})
}

// line reads one line: a piece of the answer, tool calls, or the last chunk.
func (a *chatAnswer) line(b []byte) error {
	var m chatLine
	err := json.Unmarshal(b, &m) // a member of another type still leaves the others read
	if err := a.c.lineError(m.errorField, api.CodeEngineError); err != nil {
		return err
	}
	if a.done {
		return nil // nothing follows the last chunk; ignore stray lines
	}
	if err != nil {
		return fmt.Errorf("unreadable chat line %q: %w", truncate(b), err)
	}
	ch := engines.ChatChunk{Content: m.Message.Content + m.Response}
	for _, tc := range m.Message.ToolCalls {
		ch.ToolCalls = append(ch.ToolCalls, engines.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: string(tc.Function.Arguments)})
	}
	if len(ch.ToolCalls) > 0 && m.Done {
		// A call in the last chunk goes in a chunk of its own first, as the contract says.
		if err := a.send(engines.ChatChunk{ToolCalls: ch.ToolCalls}); err != nil {
			return err
		}
		ch.ToolCalls = nil
	}
	if m.Done {
		a.done = true
		ch.Done, ch.FinishReason = true, m.DoneReason
		ch.PromptTokens, ch.CompletionTokens = m.PromptEvalCount, m.EvalCount
	}
	if ch.Content == "" && !ch.Done && len(ch.ToolCalls) == 0 {
		return nil
	}
	ch.More = !ch.Done
	return a.send(ch)
}

// ErrNoLastChunk marks a stream that ended, the connection closed cleanly or not, before its
// last chunk (a chat's done:true, a pull's "success"). hailo-ollama 5.1.1 always ends so; its
// driver then judges by what came (engines/hailo).
var ErrNoLastChunk = errors.New("ended before its last chunk")

// maxLine bounds one NDJSON line.
const maxLine = 4 << 20

// lines calls fn for each NDJSON line of body (blank lines and "\r" endings tolerated); fn
// checks it with lineError. idle, when not nil, is called before each read that would wait on
// the daemon (see engines.ChatChunk.More).
func (c *Client) lines(ctx context.Context, body io.Reader, code api.Code, fn func([]byte) error, idle func() error) error {
	r := stream.NewReader(body, maxLine)
	for {
		if idle != nil && !r.Ready() {
			if err := idle(); err != nil {
				return err
			}
		}
		line, rerr := r.Line()
		if rerr != nil && rerr != io.EOF {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &engines.Error{Code: code, Err: fmt.Errorf("%s: stream broke off: %w", c.daemon, rerr)}
		}
		if b := bytes.TrimSpace(line); len(b) > 0 {
			if err := fn(b); err != nil {
				var ee *engines.Error
				if errors.As(err, &ee) || ctx.Err() != nil {
					return err
				}
				return &engines.Error{Code: code, Err: fmt.Errorf("%s: %w", c.daemon, err)}
			}
		}
		if rerr == io.EOF {
			return nil
		}
	}
}

// lineError is the error a streamed line carries in an "error" member (which ends the stream,
// under code), or nil.
func (c *Client) lineError(f errorField, code api.Code) error {
	if msg := f.message(); msg != "" {
		return &engines.Error{Code: code, Err: &APIError{Daemon: c.daemon, Status: http.StatusOK, Message: msg}}
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "…"
	}
	return string(b)
}

// Embed is POST /api/embed: one vector per input, in order.
func (c *Client) Embed(ctx context.Context, model string, inputs []string) (engines.Embeddings, error) {
	var out struct {
		Embeddings      [][]float32 `json:"embeddings"`
		PromptEvalCount int         `json:"prompt_eval_count"`
	}
	if err := c.call(ctx, api.CodeEngineError, http.MethodPost, "/api/embed", map[string]any{"model": model, "input": inputs, "keep_alive": KeepForever}, &out); err != nil {
		return engines.Embeddings{}, err
	}
	if len(out.Embeddings) != len(inputs) {
		return engines.Embeddings{}, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("%s: %d embeddings for %d inputs", c.daemon, len(out.Embeddings), len(inputs))}
	}
	return engines.Embeddings{Vectors: out.Embeddings, PromptTokens: out.PromptEvalCount}, nil
}
