package llamaserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/engines/stream"
)

// chatRequest is llama-server's OpenAI chat request, always streamed.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages,omitempty"`
	Stream   bool          `json:"stream"`
	// No stream_options.include_usage: the last event's timings carry the counts (see
	// readEvents), and asking for usage costs the engine an event of its own per answer.
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	Seed        *int     `json:"seed,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Stop        []string `json:"stop,omitempty"`
	// Tools are read through the model's chat template (llama-server's --jinja, its default).
	Tools          []chatTool      `json:"tools,omitempty"`
	ToolChoice     json.RawMessage `json:"tool_choice,omitempty"`
	ResponseFormat *responseFormat `json:"response_format,omitempty"`
}

// completionRequest is llama-server's /v1/completions request: the chat's settings, a prompt
// instead of messages.
type completionRequest struct {
	*chatRequest
	Prompt string `json:"prompt"`
}

// chatMessage is an OpenAI message. Content is a *string, nil (null) for an assistant turn
// made of tool calls, or []contentPart for a message that shows images.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type chatToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name,omitempty"`
		Schema json.RawMessage `json:"schema"`
		Strict bool            `json:"strict,omitempty"`
	} `json:"json_schema,omitempty"`
}

// openAIMessages writes messages in OpenAI's shape.
func openAIMessages(msgs []engines.Message) []chatMessage {
	out := make([]chatMessage, len(msgs))
	for i, m := range msgs {
		c := chatMessage{Role: m.Role, ToolCallID: m.ToolCallID}
		switch {
		case len(m.Images) > 0:
			c.Content = imageParts(m)
		case m.Content != "" || len(m.ToolCalls) == 0:
			c.Content = &m.Content
		}
		for _, tc := range m.ToolCalls {
			call := chatToolCall{ID: tc.ID, Type: "function"}
			call.Function.Name, call.Function.Arguments = tc.Name, tc.Arguments
			c.ToolCalls = append(c.ToolCalls, call)
		}
		out[i] = c
	}
	return out
}

// contentPart is one part of an OpenAI message's content: text, or an image as a data URL
// (llama-server started with --mmproj reads it).
type contentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

// imageParts is m's content with its images, the text first.
func imageParts(m engines.Message) []contentPart {
	parts := make([]contentPart, 0, len(m.Images)+1)
	if m.Content != "" {
		parts = append(parts, contentPart{Type: "text", Text: m.Content})
	}
	for _, img := range m.Images {
		// Ollama's images carry no media type; llama-server refuses a data URL without one.
		mt := cmp.Or(img.MediaType, http.DetectContentType(img.Data))
		parts = append(parts, contentPart{Type: "image_url", ImageURL: &imageURL{
			URL: "data:" + mt + ";base64," + base64.StdEncoding.EncodeToString(img.Data)}})
	}
	return parts
}

// openAITools writes tools and the response format in OpenAI's shape.
func openAITools(req engines.ChatRequest, body *chatRequest) {
	for _, t := range req.Tools {
		body.Tools = append(body.Tools, chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
	}
	if len(body.Tools) > 0 {
		body.ToolChoice = req.ToolChoice
	}
	if f := req.Format; f != nil {
		body.ResponseFormat = &responseFormat{Type: "json_object"}
		if len(f.Schema) > 0 {
			body.ResponseFormat.Type = "json_schema"
			body.ResponseFormat.JSONSchema = &struct {
				Name   string          `json:"name,omitempty"`
				Schema json.RawMessage `json:"schema"`
				Strict bool            `json:"strict,omitempty"`
			}{f.Name, f.Schema, f.Strict}
		}
	}
}

// Chat streams an answer from m's llama-server through /v1/chat/completions (server-sent
// events), one chunk per event as it arrives. An error from emit, or the end of ctx, closes the
// connection at once, which stops generation.
func (d *Driver) Chat(ctx context.Context, m engines.Model, req engines.ChatRequest, emit func(engines.ChatChunk) error) error {
	if len(req.Messages) == 0 && req.Prompt == "" {
		return &engines.Error{Code: api.CodeBadRequest, Err: errors.New("a chat needs at least one message")}
	}
	inst, err := d.instance(m.ID)
	if err != nil {
		return err
	}
	body := chatRequest{
		Model: inst.alias, Stream: true,
		Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, Seed: req.Seed,
		MaxTokens: req.MaxTokens, Stop: req.Stop,
	}
	route := "/v1/chat/completions"
	var doc any = &body
	if req.Prompt != "" {
		// A raw completion: llama-server's /v1/completions continues the prompt as it is.
		route, doc = "/v1/completions", completionRequest{chatRequest: &body, Prompt: req.Prompt}
	} else {
		body.Messages = openAIMessages(req.Messages)
		openAITools(req, &body)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return &engines.Error{Code: api.CodeInternal, Err: err}
	}
	resp, err := inst.post(ctx, route, b, true)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return answerError(resp)
	}
	return readEvents(ctx, resp.Body, emit)
}

// post sends a JSON body to one of inst's routes. A streamed answer's connection closes after
// it: llama-server closes the connection after every streamed answer without saying so (no
// "Connection: close"; tried on build 10470), and put back in a pool the connection would fail
// the next request on it with EOF or a broken pipe. So each chat has a connection of its own,
// one loopback dial, and says that it closes after the answer; closing the body unread, or the
// end of ctx, closes it, which stops llama-server's generation. Other answers keep theirs.
func (inst *Instance) post(ctx context.Context, route string, body []byte, streamed bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, inst.endpoint+route, bytes.NewReader(body))
	if err != nil {
		return nil, &engines.Error{Code: api.CodeInternal, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if streamed {
		req.Header.Set("Accept", "text/event-stream")
		req.Close = true
	} else {
		engines.Replayable(req)
	}
	resp, err := inst.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if inst.exited() && inst.Err() != nil {
			return nil, inst.Err()
		}
		return nil, &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("llama-server for %s does not answer: %w", inst.id, err)}
	}
	return resp, nil
}

// openAIError is llama-server's error body: {"error":{"code":400,"message":…,"type":…}}.
type openAIError struct {
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

// answerError turns a non-200 answer into an error with llama-server's message. A prompt longer
// than the context is ContextTooLong, so a client can be told to shorten it.
func answerError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e openAIError
	if json.Unmarshal(b, &e) == nil && e.Error != nil && e.Error.Message != "" {
		code := api.CodeEngineError
		switch {
		case e.Error.Type == "exceed_context_size_error":
			code = api.CodeContextLimit
		case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotImplemented:
			// The request asked for what this model or server cannot do (a response format
			// its grammar cannot build, embeddings without --embeddings): the client's to fix.
			code = api.CodeBadRequest
		}
		return &engines.Error{Code: code, Err: fmt.Errorf("llama-server: %s (HTTP %d)", e.Error.Message, resp.StatusCode)}
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = resp.Status
	}
	return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: %s (HTTP %d)", msg, resp.StatusCode)}
}

// streamChunk is one event of a streamed answer.
type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content   string         `json:"content"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"delta"`
		Text         string `json:"text"` // /v1/completions
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Timings *struct {
		CacheN     int `json:"cache_n"`
		PromptN    int `json:"prompt_n"`
		PredictedN int `json:"predicted_n"`
	} `json:"timings"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// maxEvent bounds one event's data.
const maxEvent = 4 << 20

// maxToolCalls bounds the calls one answer may make.
const maxToolCalls = 64

// readEvents reads server-sent events until "data: [DONE]": each piece of content is emitted
// as it comes, then one last chunk with Done, the finish reason and the token counts (see
// answer.event). Pieces that arrived together are emitted with More (see engines.ChatChunk),
// and an empty chunk goes out before each wait on the engine after them.
func readEvents(ctx context.Context, body io.Reader, emit func(engines.ChatChunk) error) error {
	r := stream.NewReader(body, maxEvent)
	a := answer{emit: emit, final: engines.ChatChunk{Done: true}}
	for {
		if a.held && !r.Ready() {
			if err := a.send(engines.ChatChunk{}); err != nil {
				return err
			}
		}
		line, rerr := r.Line()
		if rerr != nil && rerr != io.EOF {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: the answer broke off: %w", rerr)}
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch {
		case string(field) == "error": // some llama-server builds send "error: {…}" before closing
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: %s", value)}
		case string(field) == "data" && string(value) == "[DONE]":
			return a.end()
		case string(field) == "data":
			if err := a.event(value); err != nil {
				return err
			}
		} // anything else: blank separators, comments, event names
		if rerr == io.EOF {
			if a.finished {
				return a.end() // the answer ended without "[DONE]", but it did end
			}
			return &engines.Error{Code: api.CodeEngineError, Err: errors.New("llama-server: the answer ended before its last chunk")}
		}
	}
}

// answer is what readEvents has read of one answer.
type answer struct {
	emit     func(engines.ChatChunk) error
	final    engines.ChatChunk // the last chunk, as far as the events have told it
	finished bool              // an event gave the finish reason
	held     bool              // a chunk went out with More, and no chunk without it since
	// calls stream in pieces (id and name, then arguments) by index: they are assembled and
	// emitted whole, before the last chunk.
	calls []engines.ToolCall
}

func (a *answer) send(ch engines.ChatChunk) error {
	a.held = ch.More
	return a.emit(ch)
}

// end emits the tool calls, then the last chunk.
func (a *answer) end() error {
	if len(a.calls) > 0 {
		if err := a.send(engines.ChatChunk{ToolCalls: a.calls}); err != nil {
			return err
		}
	}
	return a.send(a.final)
}

// event reads one event's data. The token counts come from usage when the event has it, else
// from llama-server's timings (the agent does not ask for usage, and the timings of the last
// event say as much: the prompt's tokens are those taken from the cache and those evaluated,
// cache_n + prompt_n).
func (a *answer) event(data []byte) error {
	var c streamChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: unreadable event %q: %w", truncate(string(data)), err)}
	}
	if c.Error != nil {
		code := api.CodeEngineError
		if strings.Contains(c.Error.Message, "Context size has been exceeded") {
			// The slots' shared context ran out mid-answer (llama-server's words).
			code = api.CodeContextLimit
		}
		return &engines.Error{Code: code, Err: fmt.Errorf("llama-server: %s", c.Error.Message)}
	}
	if c.Usage != nil {
		a.final.PromptTokens, a.final.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
	} else if c.Timings != nil && a.final.CompletionTokens == 0 {
		a.final.PromptTokens, a.final.CompletionTokens = c.Timings.CacheN+c.Timings.PromptN, c.Timings.PredictedN
	}
	for _, ch := range c.Choices {
		if err := a.toolCalls(ch.Delta.ToolCalls); err != nil {
			return err
		}
		// A chat's piece is its delta's content, a raw completion's (/v1/completions) its text.
		if content := cmp.Or(ch.Delta.Content, ch.Text); content != "" {
			if err := a.send(engines.ChatChunk{Content: content, More: true}); err != nil {
				return err
			}
		}
		if ch.FinishReason != "" {
			a.final.FinishReason, a.finished = ch.FinishReason, true
		}
	}
	return nil
}

// toolCalls adds the pieces of tool calls an event carries to those of the answer so far.
func (a *answer) toolCalls(pieces []chatToolCall) error {
	for _, tc := range pieces {
		i := len(a.calls) - 1
		if tc.Index != nil {
			i = *tc.Index
		}
		if i < 0 || i > len(a.calls) || i >= maxToolCalls {
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: tool call index %d out of order", i)}
		}
		if i == len(a.calls) {
			a.calls = append(a.calls, engines.ToolCall{})
		}
		a.calls[i].ID += tc.ID
		a.calls[i].Name += tc.Function.Name
		a.calls[i].Arguments += tc.Function.Arguments
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// Describe reads the model's GGUF header: llama-server serves one file, and the file says
// what it is.
func (d *Driver) Describe(_ context.Context, m engines.Model) (api.ModelDetails, error) {
	if m.Path == "" {
		return api.ModelDetails{}, fmt.Errorf("placement %s has no model file yet", m.ID)
	}
	return sizing.DescribeGGUF(m.Path)
}

// maxTokenizeAnswer bounds a /tokenize answer: a context's worth of token ids.
const maxTokenizeAnswer = 64 << 20

// CountTokens counts a chat's prompt as m's llama-server evaluates it: /apply-template renders
// the messages and tools through the model's chat template, and /tokenize counts the result,
// special tokens included as the chat's own prompt has them.
func (d *Driver) CountTokens(ctx context.Context, m engines.Model, req engines.ChatRequest) (int, error) {
	inst, err := d.instance(m.ID)
	if err != nil {
		return 0, err
	}
	body := chatRequest{Model: inst.alias, Messages: openAIMessages(req.Messages)}
	openAITools(req, &body)
	body.ResponseFormat = nil // a grammar is not part of the prompt
	var prompt struct {
		Prompt *string `json:"prompt"`
	}
	if err := inst.postJSON(ctx, "/apply-template", body, &prompt); err != nil {
		return 0, err
	}
	if prompt.Prompt == nil {
		return 0, &engines.Error{Code: api.CodeEngineError, Err: errors.New("llama-server: /apply-template answered no prompt")}
	}
	var toks struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	if err := inst.postJSON(ctx, "/tokenize", map[string]any{"content": *prompt.Prompt, "add_special": true, "parse_special": true}, &toks); err != nil {
		return 0, err
	}
	return len(toks.Tokens), nil
}

// postJSON posts doc to one of inst's routes and decodes its answer into out.
func (inst *Instance) postJSON(ctx context.Context, route string, doc, out any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return &engines.Error{Code: api.CodeInternal, Err: err}
	}
	resp, err := inst.post(ctx, route, b, false)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return answerError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxTokenizeAnswer)).Decode(out); err != nil {
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: unreadable %s answer: %w", route, err)}
	}
	return nil
}

// maxEmbedAnswer bounds an embeddings answer: vectors of a few thousand floats, times inputs.
const maxEmbedAnswer = 256 << 20

// Embed asks m's llama-server for /v1/embeddings: it answers when started with --embeddings
// (a placement's args), and refuses otherwise, which the client is told.
func (d *Driver) Embed(ctx context.Context, m engines.Model, inputs []string) (engines.Embeddings, error) {
	inst, err := d.instance(m.ID)
	if err != nil {
		return engines.Embeddings{}, err
	}
	b, err := json.Marshal(map[string]any{"model": inst.alias, "input": inputs, "encoding_format": "float"})
	if err != nil {
		return engines.Embeddings{}, &engines.Error{Code: api.CodeInternal, Err: err}
	}
	resp, err := inst.post(ctx, "/v1/embeddings", b, false)
	if err != nil {
		return engines.Embeddings{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return engines.Embeddings{}, answerError(resp)
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxEmbedAnswer)).Decode(&out); err != nil {
		return engines.Embeddings{}, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: unreadable embeddings: %w", err)}
	}
	e := engines.Embeddings{Vectors: make([][]float32, len(inputs)), PromptTokens: out.Usage.PromptTokens}
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= len(inputs) || e.Vectors[d.Index] != nil {
			return engines.Embeddings{}, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: embedding index %d out of place", d.Index)}
		}
		e.Vectors[d.Index] = d.Embedding
	}
	for i, v := range e.Vectors {
		if v == nil {
			return engines.Embeddings{}, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: no embedding for input %d", i)}
		}
	}
	return e, nil
}
