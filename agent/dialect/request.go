// Package dialect is the client dialects the gateway speaks: it reads a chat request in any of
// them (OpenAI chat, completions and responses; Ollama chat and generate; Anthropic messages)
// into the engines' neutral chat, and writes an engine's answer, or a failure, back in the
// client's dialect. Routing, failover and transport are the gateway's.
package dialect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// Dialect is the protocol a client speaks on a route.
type Dialect int

const (
	OpenAI         Dialect = iota // POST /v1/chat/completions
	OllamaChat                    // POST /api/chat
	OllamaGenerate                // POST /api/generate
	Responses                     // POST /v1/responses
	Completions                   // POST /v1/completions
	Anthropic                     // POST /v1/messages
)

// openAIShaped reports whether the dialect's errors are OpenAI's {"error":{message,type,code}}.
func (d Dialect) openAIShaped() bool {
	return d == OpenAI || d == Responses || d == Completions
}

// BytesPerToken is the rule of thumb (about four bytes of English per token) behind the prompt
// count reported when an engine gives none. It never refuses a prompt: the engine does that.
const BytesPerToken = 4

// Call is a parsed chat request in any dialect.
type Call struct {
	Dialect Dialect
	Model   string
	Req     engines.ChatRequest
	Stream  bool
	// usageChunk: OpenAI stream_options.include_usage, a last chunk with the token counts.
	usageChunk bool
	// promptTokens is the prompt's estimated size in tokens (see BytesPerToken), reported as
	// usage when the engine gives no count.
	PromptTokens int
	// load: an Ollama request without messages (or prompt) asks to load the model; a ready
	// placement is loaded already, so the gateway answers it without the engine.
	Load bool
	// keepAlive is an Ollama request's keep_alive, nil when absent: the placement's idle TTL
	// from then on (negative: never sleep; 0: sleep once this request is answered).
	KeepAlive *time.Duration
	// refs are /v1/responses item references, resolved by the agent that serves the request;
	// remember keeps what it answers, for later references.
	Refs     []itemRef
	Remember func(id, text string)
	// MatchStop are Anthropic's stop_sequences, which the agent that serves the request matches
	// in the answer itself instead of passing them to the engine: no engine says which sequence
	// it stopped on (Ollama's done_reason and llama-server's finish_reason say "stop" for a
	// sequence and for the model's own end alike), and Anthropic's answer names it.
	MatchStop []string
	// RemoteImages are the URLs of the images the request names by URL, in the order they
	// appear; each is a placeholder in its message (MediaType pendingFetch) until FetchImages
	// fills it, on the agent that serves the request.
	RemoteImages []string
}

// ReadBody reads a bounded body: 413 when it is larger than max.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *Failure) {
	// A function, not a value: made on every request, its message cost a Sprintf each.
	tooLarge := func() *Failure {
		return &Failure{Status: http.StatusRequestEntityTooLarge, Code: "BodyTooLarge", OACode: "request_too_large",
			Msg: fmt.Sprintf("request body larger than %d bytes", max)}
	}
	if r.ContentLength > max {
		return nil, tooLarge()
	}
	size := 512
	if r.ContentLength > 0 {
		size = int(r.ContentLength) + 1 // +1: ReadAll needs room to see EOF without growing
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge()
		}
		return nil, BadRequest("reading the request body: " + err.Error())
	}
	return buf.Bytes(), nil
}

// DecodeJSON decodes one JSON document, refusing trailing data. Unknown fields are ignored:
// clients send many the engines do not use.
func DecodeJSON(body []byte, v any) *Failure {
	if len(bytes.TrimSpace(body)) == 0 {
		return BadRequest("empty request body: send a JSON document")
	}
	// Unmarshal, not a Decoder: the body is in memory already, and Unmarshal refuses trailing
	// data itself.
	if err := json.Unmarshal(body, v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) && strings.Contains(se.Error(), "after top-level value") {
			return BadRequest("malformed JSON body: trailing data after the JSON document")
		}
		return BadRequest("malformed JSON body: " + err.Error())
	}
	return nil
}

// role checks a message role; OpenAI's "developer" is a system message to these engines.
func role(r string) (string, error) {
	switch r {
	case "system", "user", "assistant", "tool":
		return r, nil
	case "developer":
		return "system", nil
	case "":
		return "", errors.New("a message has no role")
	}
	return "", fmt.Errorf("message role %q is not supported (use system, user, assistant or tool)", r)
}

// maxTools bounds the tools one request may offer.
const maxTools = 128

// oaTool is an OpenAI tool: {"type":"function","function":{name, description, parameters}}.
// Ollama's tools have the same shape.
type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// parseTools checks tools: functions only, each named, parameters a JSON object.
func parseTools(raw json.RawMessage) ([]engines.Tool, error) {
	if !present(raw) {
		return nil, nil
	}
	var ts []oaTool
	if err := json.Unmarshal(raw, &ts); err != nil {
		return nil, errors.New("tools must be an array of {\"type\":\"function\",\"function\":{…}}")
	}
	if len(ts) > maxTools {
		return nil, fmt.Errorf("%d tools: at most %d", len(ts), maxTools)
	}
	out := make([]engines.Tool, 0, len(ts))
	for i, t := range ts {
		if t.Type != "" && t.Type != "function" {
			return nil, fmt.Errorf("tool %d is of type %q: only function tools are supported", i, t.Type)
		}
		if t.Function.Name == "" {
			return nil, fmt.Errorf("tool %d has no function name", i)
		}
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && string(p) != "null" && p[0] != '{' {
			return nil, fmt.Errorf("the parameters of tool %q must be a JSON Schema object", t.Function.Name)
		}
		out = append(out, engines.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return out, nil
}

// parseToolChoice checks OpenAI's tool_choice: "auto", "none", "required", or a named function.
func parseToolChoice(raw json.RawMessage, tools []engines.Tool) (json.RawMessage, error) {
	if !present(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return raw, nil
		}
		return nil, fmt.Errorf("tool_choice %q: want auto, none, required or a function", s)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Function.Name == "" {
		return nil, errors.New(`tool_choice must be "auto", "none", "required" or {"type":"function","function":{"name":…}}`)
	}
	for _, t := range tools {
		if t.Name == named.Function.Name {
			return raw, nil
		}
	}
	return nil, fmt.Errorf("tool_choice names %q, which is not among the tools", named.Function.Name)
}

// oaToolCall is a tool call in OpenAI's shape; arguments are a JSON string.
type oaToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// schemaFormat checks a JSON Schema given for a response format.
func schemaFormat(name string, schema json.RawMessage, strict bool) (*engines.Format, error) {
	s := bytes.TrimSpace(schema)
	if len(s) == 0 || s[0] != '{' || !json.Valid(s) {
		return nil, errors.New("the response format's schema must be a JSON Schema object")
	}
	return &engines.Format{Name: name, Schema: s, Strict: strict}, nil
}

// parseOllamaFormat reads Ollama's format: "json", or a JSON Schema object.
func parseOllamaFormat(raw json.RawMessage) (*engines.Format, error) {
	if !present(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "json" {
			return &engines.Format{}, nil
		}
		return nil, fmt.Errorf("format %q: want \"json\" or a JSON Schema object", s)
	}
	return schemaFormat("", raw, false)
}

// EstimateTokens is the prompt's size by the BytesPerToken rule, rounded up.
func EstimateTokens(msgs []engines.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	return (n + BytesPerToken - 1) / BytesPerToken
}

func checkTemperature(t *float64) error {
	if t != nil && (*t < 0 || *t > 2 || math.IsNaN(*t)) {
		return fmt.Errorf("temperature %v: want 0 to 2", *t)
	}
	return nil
}

func checkTopP(p *float64) error {
	if p != nil && (*p < 0 || *p > 1 || math.IsNaN(*p)) {
		return fmt.Errorf("top_p %v: want 0 to 1", *p)
	}
	return nil
}

// present reports whether a raw JSON member carries something other than null, "", [] or {}.
func present(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != `""` && s != "[]" && s != "{}"
}

// OpenAI's request, the parts the engines use.
type oaRequest struct {
	Model         string      `json:"model"`
	Messages      []oaMessage `json:"messages"`
	Stream        bool        `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"` // not OpenAI's, but llama.cpp and others take it
	Seed                *int            `json:"seed"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int            `json:"n"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ResponseFormat      *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict bool            `json:"strict"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

type oaMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []oaToolCall    `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

// parts is a message's content, its images (image_url parts) taken into im.
func (m oaMessage) parts(im *images) (string, []engines.Image, error) {
	return contentParts(m.Content, "message content must be a string or an array of content parts", im, "text")
}

func parseStop(raw json.RawMessage) ([]string, error) {
	if !present(raw) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, errors.New("stop must be a string or an array of strings")
	}
	if len(many) > 4 {
		return nil, fmt.Errorf("stop has %d sequences, at most 4 are allowed", len(many))
	}
	return many, nil
}

func parseOpenAI(body []byte) (*Call, *Failure) {
	var req oaRequest
	if f := DecodeJSON(body, &req); f != nil {
		return nil, f
	}
	if req.Model == "" {
		return nil, BadRequest("model is required")
	}
	if len(req.Messages) == 0 {
		return nil, BadRequest("messages is required: send at least one message")
	}
	if req.N != nil && *req.N != 1 {
		return nil, BadRequest("n must be 1: one choice per request")
	}
	c := &Call{Dialect: OpenAI, Model: req.Model, Stream: req.Stream,
		usageChunk: req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	var err error
	if c.Req.Tools, err = parseTools(req.Tools); err != nil {
		return nil, BadRequest(err.Error())
	}
	if c.Req.ToolChoice, err = parseToolChoice(req.ToolChoice, c.Req.Tools); err != nil {
		return nil, BadRequest(err.Error())
	}
	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			c.Req.Format = &engines.Format{}
		case "json_schema":
			if rf.JSONSchema == nil {
				return nil, BadRequest("response_format json_schema needs json_schema.schema")
			}
			if c.Req.Format, err = schemaFormat(rf.JSONSchema.Name, rf.JSONSchema.Schema, rf.JSONSchema.Strict); err != nil {
				return nil, BadRequest(err.Error())
			}
		default:
			return nil, BadRequest(fmt.Sprintf("response_format %q: want text, json_object or json_schema", rf.Type))
		}
	}
	c.Req.Messages = make([]engines.Message, 0, len(req.Messages))
	im := images{remote: &c.RemoteImages}
	for _, m := range req.Messages {
		r, err := role(m.Role)
		if err != nil {
			return nil, BadRequest(err.Error())
		}
		text, imgs, err := m.parts(&im)
		if err != nil {
			return nil, BadRequest(err.Error())
		}
		em := engines.Message{Role: r, Content: text, ToolCallID: m.ToolCallID, ToolName: m.Name, Images: imgs}
		for _, tc := range m.ToolCalls {
			if tc.Function.Name == "" {
				return nil, BadRequest("a tool call in the conversation has no function name")
			}
			em.ToolCalls = append(em.ToolCalls, engines.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		c.Req.Messages = append(c.Req.Messages, em)
	}
	if err := errors.Join(checkTemperature(req.Temperature), checkTopP(req.TopP)); err != nil {
		return nil, BadRequest(err.Error())
	}
	c.Req.Temperature, c.Req.TopP, c.Req.TopK, c.Req.Seed = req.Temperature, req.TopP, req.TopK, req.Seed
	for _, mt := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if mt == nil {
			continue
		}
		if *mt < 1 {
			return nil, BadRequest(fmt.Sprintf("max_tokens %d: want at least 1", *mt))
		}
		c.Req.MaxTokens = *mt
	}
	stop, err := parseStop(req.Stop)
	if err != nil {
		return nil, BadRequest(err.Error())
	}
	c.Req.Stop = stop
	c.PromptTokens = EstimateTokens(c.Req.Messages)
	return c, nil
}

// Ollama's requests, the parts the engines use.
type ollamaOptions struct {
	Temperature *float64        `json:"temperature"`
	TopP        *float64        `json:"top_p"`
	TopK        *int            `json:"top_k"`
	Seed        *int            `json:"seed"`
	NumPredict  *int            `json:"num_predict"`
	Stop        json.RawMessage `json:"stop"`
}

type ollamaMessage struct {
	Role      string   `json:"role"`
	Content   string   `json:"content"`
	Images    []string `json:"images"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolName string `json:"tool_name"`
}

type ollamaChatRequest struct {
	Model    string          `json:"model"`
	Messages []ollamaMessage `json:"messages"`
	Stream   *bool           `json:"stream"` // Ollama streams unless told not to
	// KeepAlive is Ollama's keep_alive: "5m", 300, 0 (unload now), negative (never).
	KeepAlive json.RawMessage `json:"keep_alive"`
	Options   *ollamaOptions  `json:"options"`
	Format    json.RawMessage `json:"format"`
	Tools     json.RawMessage `json:"tools"`
}

type ollamaGenerateRequest struct {
	Model     string          `json:"model"`
	Prompt    *string         `json:"prompt"`
	System    string          `json:"system"`
	Stream    *bool           `json:"stream"`
	KeepAlive json.RawMessage `json:"keep_alive"` // as ollamaChatRequest's
	Options   *ollamaOptions  `json:"options"`
	Format    json.RawMessage `json:"format"`
	Images    []string        `json:"images"`
	Raw       bool            `json:"raw"`
	Suffix    string          `json:"suffix"`
}

func (o *ollamaOptions) apply(req *engines.ChatRequest) error {
	if o == nil {
		return nil
	}
	if err := errors.Join(checkTemperature(o.Temperature), checkTopP(o.TopP)); err != nil {
		return err
	}
	req.Temperature, req.TopP, req.TopK, req.Seed = o.Temperature, o.TopP, o.TopK, o.Seed
	if o.NumPredict != nil && *o.NumPredict > 0 { // -1 (no limit) and -2 (fill the context): the engine's default
		req.MaxTokens = *o.NumPredict
	}
	stop, err := parseStop(o.Stop)
	if err != nil {
		return err
	}
	req.Stop = stop
	return nil
}

func parseOllamaChat(body []byte) (*Call, *Failure) {
	var req ollamaChatRequest
	if f := DecodeJSON(body, &req); f != nil {
		return nil, f
	}
	if req.Model == "" {
		return nil, BadRequest("model is required")
	}
	c := &Call{Dialect: OllamaChat, Model: req.Model, Stream: req.Stream == nil || *req.Stream}
	if f := c.parseKeepAlive(req.KeepAlive); f != nil {
		return nil, f
	}
	if len(req.Messages) == 0 {
		c.Load = true
		return c, nil
	}
	var err error
	if c.Req.Tools, err = parseTools(req.Tools); err != nil {
		return nil, BadRequest(err.Error())
	}
	if c.Req.Format, err = parseOllamaFormat(req.Format); err != nil {
		return nil, BadRequest(err.Error())
	}
	c.Req.Messages = make([]engines.Message, 0, len(req.Messages))
	var im images
	for _, m := range req.Messages {
		r, err := role(m.Role)
		if err != nil {
			return nil, BadRequest(err.Error())
		}
		imgs, err := im.ollama(m.Images)
		if err != nil {
			return nil, BadRequest(err.Error())
		}
		em := engines.Message{Role: r, Content: m.Content, ToolName: m.ToolName, Images: imgs}
		for _, tc := range m.ToolCalls {
			args := bytes.TrimSpace(tc.Function.Arguments)
			if tc.Function.Name == "" || (len(args) > 0 && !json.Valid(args)) {
				return nil, BadRequest("a tool call in the conversation needs a function name and JSON arguments")
			}
			em.ToolCalls = append(em.ToolCalls, engines.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: string(args)})
		}
		c.Req.Messages = append(c.Req.Messages, em)
	}
	if err := req.Options.apply(&c.Req); err != nil {
		return nil, BadRequest(err.Error())
	}
	c.PromptTokens = EstimateTokens(c.Req.Messages)
	return c, nil
}

func parseOllamaGenerate(body []byte) (*Call, *Failure) {
	var req ollamaGenerateRequest
	if f := DecodeJSON(body, &req); f != nil {
		return nil, f
	}
	if req.Model == "" {
		return nil, BadRequest("model is required")
	}
	if req.Suffix != "" {
		return nil, BadRequest("suffix is not supported by these engines")
	}
	if len(req.Images) > 0 && req.Raw {
		return nil, BadRequest("images with raw are not supported: a raw prompt goes through no template to place them")
	}
	var im images
	imgs, err := im.ollama(req.Images)
	if err != nil {
		return nil, BadRequest(err.Error())
	}
	c := &Call{Dialect: OllamaGenerate, Model: req.Model, Stream: req.Stream == nil || *req.Stream}
	if f := c.parseKeepAlive(req.KeepAlive); f != nil {
		return nil, f
	}
	if c.Req.Format, err = parseOllamaFormat(req.Format); err != nil {
		return nil, BadRequest(err.Error())
	}
	if req.Prompt == nil || (*req.Prompt == "" && req.System == "") {
		// Ollama loads the model for a generate without a prompt (an empty one too).
		c.Load = true
		return c, nil
	}
	switch {
	case req.Raw:
		// The prompt as it is, through no template (and so without the system prompt).
		c.Req.Prompt = *req.Prompt
		c.PromptTokens = EstimateTokens([]engines.Message{{Content: c.Req.Prompt}})
	case req.System != "":
		c.Req.Messages = append(c.Req.Messages, engines.Message{Role: "system", Content: req.System})
		fallthrough
	default:
		c.Req.Messages = append(c.Req.Messages, engines.Message{Role: "user", Content: *req.Prompt, Images: imgs})
	}
	if err := req.Options.apply(&c.Req); err != nil {
		return nil, BadRequest(err.Error())
	}
	if !req.Raw {
		c.PromptTokens = EstimateTokens(c.Req.Messages)
	}
	return c, nil
}

// parseCompletions reads OpenAI's legacy POST /v1/completions: one prompt continued as it is.
func parseCompletions(body []byte) (*Call, *Failure) {
	var req struct {
		oaRequest
		Prompt   json.RawMessage `json:"prompt"`
		Echo     bool            `json:"echo"`
		Suffix   string          `json:"suffix"`
		Logprobs *int            `json:"logprobs"`
		BestOf   *int            `json:"best_of"`
	}
	if f := DecodeJSON(body, &req); f != nil {
		return nil, f
	}
	if req.Model == "" {
		return nil, BadRequest("model is required")
	}
	if req.Echo || req.Suffix != "" || req.Logprobs != nil || (req.BestOf != nil && *req.BestOf != 1) {
		return nil, BadRequest("echo, suffix, logprobs and best_of are not supported by these engines")
	}
	if req.N != nil && *req.N != 1 {
		return nil, BadRequest("n must be 1: one choice per request")
	}
	prompts, err := textInputs(req.Prompt)
	if err != nil || len(prompts) != 1 || prompts[0] == "" {
		return nil, BadRequest("prompt must be one non-empty string (token arrays and several prompts are not supported)")
	}
	c := &Call{Dialect: Completions, Model: req.Model, Stream: req.Stream,
		usageChunk: req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	c.Req.Prompt = prompts[0]
	if err := errors.Join(checkTemperature(req.Temperature), checkTopP(req.TopP)); err != nil {
		return nil, BadRequest(err.Error())
	}
	c.Req.Temperature, c.Req.TopP, c.Req.TopK, c.Req.Seed = req.Temperature, req.TopP, req.TopK, req.Seed
	if mt := req.MaxTokens; mt != nil {
		if *mt < 1 {
			return nil, BadRequest(fmt.Sprintf("max_tokens %d: want at least 1", *mt))
		}
		c.Req.MaxTokens = *mt
	}
	if c.Req.Stop, err = parseStop(req.Stop); err != nil {
		return nil, BadRequest(err.Error())
	}
	c.PromptTokens = EstimateTokens([]engines.Message{{Content: c.Req.Prompt}})
	return c, nil
}

// ModelName is the model a chat request names, read alone: a gateway that forwards the
// request needs nothing else of it, and the owner parses it whole (a malformed request is the
// owner's to refuse, with the same 400). The member is decoded as in parse, by
// encoding/json, so both read the same name. False for a body that has no model or is
// malformed: parse says why.
func ModelName(body []byte) (string, bool) {
	var m struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &m) != nil || m.Model == "" {
		return "", false
	}
	return m.Model, true
}

func Parse(d Dialect, body []byte) (*Call, *Failure) {
	switch d {
	case OllamaChat:
		return parseOllamaChat(body)
	case OllamaGenerate:
		return parseOllamaGenerate(body)
	case Responses:
		return parseResponses(body)
	case Completions:
		return parseCompletions(body)
	case Anthropic:
		return ParseAnthropic(body)
	}
	return parseOpenAI(body)
}

// parseKeepAlive reads Ollama's keep_alive: a duration string or a number of seconds.
func (c *Call) parseKeepAlive(raw json.RawMessage) *Failure {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		s = string(raw) // a number
	}
	d, err := api.ParseTTL(s)
	if err != nil {
		return BadRequest("keep_alive: " + err.Error())
	}
	c.KeepAlive = &d
	return nil
}

// SanitizePath keeps a requested path printable and short for an error message.
func SanitizePath(p string) string {
	p = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(p, ""))
	if len(p) > 200 {
		p = strings.ToValidUTF8(p[:200], "") + "…"
	}
	return p
}

// maxEmbedInputs bounds the inputs of one request (OpenAI's own limit).
const maxEmbedInputs = 2048

// textInputs reads an input that is a string or an array of strings.
func textInputs(raw json.RawMessage) ([]string, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, errors.New("input must be a string or an array of strings (token arrays are not supported: send text)")
	}
	if len(many) == 0 {
		return nil, errors.New("input is empty")
	}
	if len(many) > maxEmbedInputs {
		return nil, fmt.Errorf("%d inputs: at most %d", len(many), maxEmbedInputs)
	}
	return many, nil
}
