package dialect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/llmkube/mesh/engines"
)

// Anthropic's Messages API (POST /v1/messages), what tools built for Claude's API speak, served
// by translation as every other dialect is: the request becomes the neutral chat (system →
// a system message, tool_use / tool_result blocks → tool calls and tool messages, input_schema
// tools → function tools), and the engine's chunks become a message object or Anthropic's
// event stream. Every engine behind any agent answers it so, hailo-ollama included, and a
// forwarded request is translated by the agent that serves it.
//
// stop_reason "stop_sequence", with the sequence, comes from the serving agent's own match
// (Call.MatchStop): the engine is not given the sequences, and the answer ends where one occurs.

type anRequest struct {
	Model         string          `json:"model"`
	Messages      []anMessage     `json:"messages"`
	System        json.RawMessage `json:"system"`
	MaxTokens     *int            `json:"max_tokens"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Tools         []anTool        `json:"tools"`
	ToolChoice    *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
}

type anMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anBlock is one content block of a message, of any type the gateway reads.
type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`          // tool_use
	Name      string          `json:"name"`        // tool_use
	Input     json.RawMessage `json:"input"`       // tool_use
	ToolUseID string          `json:"tool_use_id"` // tool_result
	Content   json.RawMessage `json:"content"`     // tool_result: a string or text blocks
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"` // image
}

// anTool is a client tool: {name, description, input_schema}. Anthropic's server tools (web
// search, code execution, …) have a type of their own and are refused.
type anTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// anText is the text of a system prompt or a tool result: a string, or text blocks.
func anText(raw json.RawMessage, what string) (string, error) {
	return contentText(raw, what+" must be a string or an array of text blocks", "text")
}

// anBlocks reads a message's content: a string is one text block.
func anBlocks(raw json.RawMessage) ([]anBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, errors.New("message content must be a string or an array of content blocks")
	}
	return blocks, nil
}

func ParseAnthropic(body []byte) (*Call, *Failure) {
	var req anRequest
	if f := DecodeJSON(body, &req); f != nil {
		return nil, f
	}
	if req.Model == "" {
		return nil, BadRequest("model is required")
	}
	if req.MaxTokens == nil {
		return nil, BadRequest("max_tokens is required")
	}
	if *req.MaxTokens < 1 {
		return nil, BadRequest(fmt.Sprintf("max_tokens %d: want at least 1", *req.MaxTokens))
	}
	if len(req.Messages) == 0 {
		return nil, BadRequest("messages is required: send at least one message")
	}
	c := &Call{Dialect: Anthropic, Model: req.Model, Stream: req.Stream}
	c.Req.MaxTokens = *req.MaxTokens
	if present(req.System) {
		sys, err := anText(req.System, "system")
		if err != nil {
			return nil, BadRequest(err.Error())
		}
		c.Req.Messages = append(c.Req.Messages, engines.Message{Role: "system", Content: sys})
	}
	if f := anMessages(c, req.Messages); f != nil {
		return nil, f
	}
	if len(req.Tools) > maxTools {
		return nil, BadRequest(fmt.Sprintf("%d tools: at most %d", len(req.Tools), maxTools))
	}
	for i, t := range req.Tools {
		if t.Type != "" && t.Type != "custom" {
			return nil, BadRequest(fmt.Sprintf("tool %d is of type %q: only client tools (name, description, input_schema) are supported", i, t.Type))
		}
		if t.Name == "" {
			return nil, BadRequest(fmt.Sprintf("tool %d has no name", i))
		}
		if s := bytes.TrimSpace(t.InputSchema); len(s) == 0 || s[0] != '{' || !json.Valid(s) {
			return nil, BadRequest(fmt.Sprintf("the input_schema of tool %q must be a JSON Schema object", t.Name))
		}
		c.Req.Tools = append(c.Req.Tools, engines.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	if tc := req.ToolChoice; tc != nil {
		// As OpenAI's tool_choice, which the drivers take.
		var choice any
		switch tc.Type {
		case "auto", "none":
			choice = tc.Type
		case "any":
			choice = "required"
		case "tool":
			choice = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
		default:
			return nil, BadRequest(fmt.Sprintf("tool_choice type %q: want auto, any, tool or none", tc.Type))
		}
		raw, _ := json.Marshal(choice)
		var err error
		if c.Req.ToolChoice, err = parseToolChoice(raw, c.Req.Tools); err != nil {
			return nil, BadRequest(err.Error())
		}
	}
	if err := errors.Join(checkTemperature(req.Temperature), checkTopP(req.TopP)); err != nil {
		return nil, BadRequest(err.Error())
	}
	c.Req.Temperature, c.Req.TopP, c.Req.TopK = req.Temperature, req.TopP, req.TopK
	for _, s := range req.StopSequences {
		if s == "" {
			return nil, BadRequest("stop_sequences: a sequence is empty")
		}
	}
	c.MatchStop = req.StopSequences
	c.PromptTokens = EstimateTokens(c.Req.Messages)
	return c, nil
}

// anMessages adds the conversation to c's messages. A user message's tool_result blocks become
// tool messages (in order, around its text); an assistant message's tool_use blocks become its
// tool calls.
func anMessages(c *Call, msgs []anMessage) *Failure {
	names := map[string]string{} // tool_use id → tool name, for the results
	im := images{remote: &c.RemoteImages}
	for _, m := range msgs {
		if m.Role != "user" && m.Role != "assistant" {
			return BadRequest(fmt.Sprintf("message role %q: want user or assistant (the system prompt goes in system)", m.Role))
		}
		blocks, err := anBlocks(m.Content)
		if err != nil {
			return BadRequest(err.Error())
		}
		em := engines.Message{Role: m.Role}
		var text strings.Builder
		flush := func() {
			if text.Len() > 0 || len(em.Images) > 0 {
				em.Content = text.String()
				c.Req.Messages = append(c.Req.Messages, em)
				text.Reset()
				em.Images = nil
			}
		}
		for _, b := range blocks {
			switch {
			case b.Type == "text":
				text.WriteString(b.Text)
			case b.Type == "tool_use" && m.Role == "assistant":
				if b.Name == "" {
					return BadRequest("a tool_use block has no name")
				}
				args := bytes.TrimSpace(b.Input)
				if len(args) == 0 {
					args = []byte("{}")
				}
				if args[0] != '{' || !json.Valid(args) {
					return BadRequest(fmt.Sprintf("the input of tool_use %q must be a JSON object", b.Name))
				}
				names[b.ID] = b.Name
				em.ToolCalls = append(em.ToolCalls, engines.ToolCall{ID: b.ID, Name: b.Name, Arguments: string(args)})
			case b.Type == "tool_result" && m.Role == "user":
				out, err := anText(b.Content, "a tool_result's content")
				if err != nil {
					return BadRequest(err.Error())
				}
				flush()
				c.Req.Messages = append(c.Req.Messages, engines.Message{Role: "tool", Content: out, ToolCallID: b.ToolUseID, ToolName: names[b.ToolUseID]})
			case b.Type == "image" && m.Role == "user":
				var img engines.Image
				var err error
				switch {
				case b.Source != nil && b.Source.Type == "base64":
					img, err = im.add(b.Source.MediaType, b.Source.Data)
				case b.Source != nil && b.Source.Type == "url":
					img, err = im.url(b.Source.URL)
				default:
					err = errors.New(`an image block's source must be {"type":"base64","media_type":…,"data":…} or {"type":"url","url":…}`)
				}
				if err != nil {
					return BadRequest(err.Error())
				}
				em.Images = append(em.Images, img)
			case b.Type == "thinking" || b.Type == "redacted_thinking":
				// An earlier answer's reasoning, sent back as Claude's clients do: nothing here
				// produces or reads it.
			default:
				return BadRequest(fmt.Sprintf("content block of type %q in a message from the %s is not supported: the engines take text, image (from the user), tool_use and tool_result", b.Type, m.Role))
			}
		}
		if text.Len() > 0 || len(em.ToolCalls) > 0 || len(em.Images) > 0 || len(blocks) == 0 || (len(blocks) == 1 && blocks[0].Type == "text") {
			em.Content = text.String()
			c.Req.Messages = append(c.Req.Messages, em)
		}
	}
	return nil
}

// anStopReason is Anthropic's stop_reason for a chat's end, and its stop_sequence (nil unless
// one ended it).
func anStopReason(st Stats, called bool) (string, *string) {
	if st.StopSequence != "" {
		seq := st.StopSequence
		return "stop_sequence", &seq
	}
	return anFinish(st.Finish, called), nil
}

func anFinish(finish string, called bool) string {
	switch {
	case called || finish == "tool_calls":
		return "tool_use"
	case finish == "length":
		return "max_tokens"
	}
	return "end_turn"
}

func anMessageID() string { return "msg_" + completionID()[len("chatcmpl-"):] }

// anToolUse is a tool call as a tool_use block: the engine's id (a client sends it back as the
// result's tool_use_id), and an input that is a JSON object.
type anToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

func newAnToolUse(c engines.ToolCall) anToolUse {
	id := c.ID
	if id == "" {
		id = "toolu_" + completionID()[len("chatcmpl-"):]
	}
	args := bytes.TrimSpace([]byte(c.Arguments))
	if len(args) == 0 || args[0] != '{' || !json.Valid(args) {
		args = []byte("{}") // Anthropic's input is an object; an engine's broken JSON is not passed on
	}
	return anToolUse{Type: "tool_use", ID: id, Name: c.Name, Input: args}
}

type anUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type anAnswer struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	Content      []any   `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        anUsage `json:"usage"`
}

type anTextBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// anWhole answers a Messages request that did not ask to stream.
type anWhole struct {
	Out
	model string
	text  []byte
	calls []engines.ToolCall
}

func (s *anWhole) Chunk(content string) error {
	s.text = append(s.text, content...)
	return nil
}

func (s *anWhole) ToolCalls(calls []engines.ToolCall) error {
	s.calls = append(s.calls, calls...)
	return nil
}

func (s *anWhole) Finish(st Stats) error {
	a := anAnswer{ID: anMessageID(), Type: "message", Role: "assistant", Model: s.model, Content: []any{},
		Usage: anUsage{st.PromptTokens, st.CompletionTokens}}
	if len(s.text) > 0 || len(s.calls) == 0 {
		a.Content = append(a.Content, anTextBlock{Type: "text", Text: string(s.text)})
	}
	for _, c := range s.calls {
		a.Content = append(a.Content, newAnToolUse(c))
	}
	reason, seq := anStopReason(st, len(s.calls) > 0)
	a.StopReason, a.StopSequence = &reason, seq
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	s.w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	s.Begin("application/json")
	return s.Send(append(b, '\n'))
}

func (s *anWhole) Started() bool { return s.begun }
func (s *anWhole) Fail(*Failure) {}

// anStream writes Anthropic's event stream: message_start; per content block its
// content_block_start, deltas (text_delta, input_json_delta) and content_block_stop; then
// message_delta with the stop reason and usage, and message_stop. A text delta is assembled
// into a reused buffer, without reflection, as OpenAI's chunks are.
type anStream struct {
	Out
	model  string
	prompt int // the estimated prompt size, for message_start: the engine counts at the end
	index  int // the next block's index
	inText bool
	called bool
	buf    []byte
}

func (s *anStream) start() error {
	if s.begun {
		return nil
	}
	s.Begin("text/event-stream")
	a := anAnswer{ID: anMessageID(), Type: "message", Role: "assistant", Model: s.model, Content: []any{},
		Usage: anUsage{InputTokens: s.prompt}}
	return s.event("message_start", map[string]any{"type": "message_start", "message": a})
}

func (s *anStream) event(typ string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.buf = append(append(append(append(s.buf[:0], "event: "...), typ...), "\ndata: "...), b...)
	s.buf = append(s.buf, "\n\n"...)
	return s.Send(s.buf)
}

func (s *anStream) stopBlock() error {
	s.inText = false
	err := s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": s.index})
	s.index++
	return err
}

func (s *anStream) Chunk(content string) error {
	if err := s.start(); err != nil {
		return err
	}
	if !s.inText {
		if err := s.event("content_block_start", map[string]any{"type": "content_block_start", "index": s.index,
			"content_block": anTextBlock{Type: "text"}}); err != nil {
			return err
		}
		s.inText = true
	}
	b := append(s.buf[:0], `event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, int64(s.index), 10)
	b = append(b, `,"delta":{"type":"text_delta","text":`...)
	b = appendJSONString(b, content)
	b = append(b, "}}\n\n"...)
	s.buf = b
	return s.Send(b)
}

func (s *anStream) ToolCalls(calls []engines.ToolCall) error {
	if err := s.start(); err != nil {
		return err
	}
	if s.inText {
		if err := s.stopBlock(); err != nil {
			return err
		}
	}
	for _, c := range calls {
		tu := newAnToolUse(c)
		input := tu.Input
		tu.Input = json.RawMessage("{}") // the input comes in its delta, as Anthropic streams it
		if err := s.event("content_block_start", map[string]any{"type": "content_block_start", "index": s.index, "content_block": tu}); err != nil {
			return err
		}
		if err := s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": s.index,
			"delta": map[string]string{"type": "input_json_delta", "partial_json": string(input)}}); err != nil {
			return err
		}
		if err := s.stopBlock(); err != nil {
			return err
		}
	}
	s.called = true
	return nil
}

func (s *anStream) Finish(st Stats) error {
	if err := s.start(); err != nil {
		return err
	}
	if !s.called && !s.inText && s.index == 0 {
		if err := s.Chunk(""); err != nil { // an empty answer is still one text block
			return err
		}
	}
	if s.inText {
		if err := s.stopBlock(); err != nil {
			return err
		}
	}
	reason, seq := anStopReason(st, s.called)
	if err := s.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": anUsage{st.PromptTokens, st.CompletionTokens}}); err != nil {
		return err
	}
	s.buf = append(s.buf[:0], "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
	return s.End(s.buf)
}

func (s *anStream) Started() bool { return s.begun }

// Comment keeps the stream alive while the model loads, in Anthropic's way: message_start,
// then a ping event each time (its clients skip pings; the text is the SSE dialects' and is not
// sent).
func (s *anStream) Comment(string) error {
	if err := s.start(); err != nil {
		return err
	}
	s.buf = append(s.buf[:0], "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
	return s.Send(s.buf)
}

// fail ends a stream that broke off with Anthropic's error event.
func (s *anStream) Fail(f *Failure) {
	s.Send(anErrorEvent(f))
}

func newAnEncoder(c *Call, o Out) Encoder {
	if c.Stream {
		return &anStream{Out: o, model: c.Model, prompt: c.PromptTokens}
	}
	return &anWhole{Out: o, model: c.Model}
}

// anErrorType is Anthropic's error type for a status.
func anErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

type anErrorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func (f *Failure) anthropic() anErrorBody {
	e := anErrorBody{Type: "error"}
	e.Error.Type, e.Error.Message = anErrorType(f.Status), f.Msg
	return e
}

// anErrorEvent is f as Anthropic's in-stream error event, on a fresh line.
func anErrorEvent(f *Failure) []byte {
	b, _ := json.Marshal(f.anthropic())
	return append(append([]byte("\n\nevent: error\ndata: "), b...), "\n\n"...)
}
