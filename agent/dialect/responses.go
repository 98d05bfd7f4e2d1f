package dialect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/llmkube/mesh/engines"
)

// OpenAI's Responses API (POST /v1/responses), the AI SDK's default for openai(model), served
// by translation: the request becomes a chat (input items → messages, flat function tools →
// tools, text.format → a JSON answer), and the chat's answer becomes a response object, or its
// stream of typed events. Answered messages are kept a while (itemStore) for item_reference;
// previous_response_id is refused, saying how to send the items instead.

type respRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       string          `json:"instructions"`
	Stream             bool            `json:"stream"`
	Tools              []respTool      `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	PreviousResponseID string          `json:"previous_response_id"`
	Text               *struct {
		Format *struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict bool            `json:"strict"`
		} `json:"format"`
	} `json:"text"`
}

// respTool is a Responses tool: flat, {"type":"function","name",…}, unlike chat's nested one.
type respTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// respItem is one input item: a message ({role, content}, with or without type "message"), a
// function call the model made, or a function's output.
type respItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	ID        string          `json:"id"`
}

// respText is the text of a message's or an output's content: a string, or input_text /
// output_text (or plain text) parts.
func respText(raw json.RawMessage) (string, error) {
	return contentText(raw, respShape, respKinds...)
}

const respShape = "content must be a string or an array of input_text parts"

var respKinds = []string{"input_text", "output_text", "text"}

const NoStore = "this gateway keeps earlier answers only for a while, on the agent that gave them: send the earlier items themselves (with the AI SDK, providerOptions: {openai: {store: false}})"

func parseResponses(body []byte) (*Call, *Failure) {
	var req respRequest
	if f := DecodeJSON(body, &req); f != nil {
		return nil, f
	}
	if req.Model == "" {
		return nil, BadRequest("model is required")
	}
	if req.PreviousResponseID != "" {
		return nil, BadRequest("previous_response_id: " + NoStore)
	}
	c := &Call{Dialect: Responses, Model: req.Model, Stream: req.Stream}
	if req.Instructions != "" {
		c.Req.Messages = append(c.Req.Messages, engines.Message{Role: "system", Content: req.Instructions})
	}
	if f := respInput(c, req.Input); f != nil {
		return nil, f
	}
	if len(c.Req.Messages) == 0 || (len(c.Req.Messages) == 1 && req.Instructions != "") {
		return nil, BadRequest("input is required: send a string or at least one message")
	}
	if f := respTools(c, req.Tools); f != nil {
		return nil, f
	}
	if len(c.Req.Tools) > maxTools {
		return nil, BadRequest(fmt.Sprintf("%d tools: at most %d", len(c.Req.Tools), maxTools))
	}
	if present(req.ToolChoice) {
		var named struct {
			Type, Name string
		}
		choice := req.ToolChoice
		if json.Unmarshal(req.ToolChoice, &named) == nil && named.Name != "" {
			choice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
		}
		var err error
		if c.Req.ToolChoice, err = parseToolChoice(choice, c.Req.Tools); err != nil {
			return nil, BadRequest(err.Error())
		}
	}
	if req.Text != nil && req.Text.Format != nil {
		switch f := req.Text.Format; f.Type {
		case "", "text":
		case "json_object":
			c.Req.Format = &engines.Format{}
		case "json_schema":
			var err error
			if c.Req.Format, err = schemaFormat(f.Name, f.Schema, f.Strict); err != nil {
				return nil, BadRequest(err.Error())
			}
		default:
			return nil, BadRequest(fmt.Sprintf("text.format %q: want text, json_object or json_schema", f.Type))
		}
	}
	if err := errors.Join(checkTemperature(req.Temperature), checkTopP(req.TopP)); err != nil {
		return nil, BadRequest(err.Error())
	}
	c.Req.Temperature, c.Req.TopP = req.Temperature, req.TopP
	if mt := req.MaxOutputTokens; mt != nil {
		if *mt < 1 {
			return nil, BadRequest(fmt.Sprintf("max_output_tokens %d: want at least 1", *mt))
		}
		c.Req.MaxTokens = *mt
	}
	c.PromptTokens = EstimateTokens(c.Req.Messages)
	return c, nil
}

// respInput adds a Responses request's input to c's messages: a string, or an array of items.
func respInput(c *Call, raw json.RawMessage) *Failure {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		c.Req.Messages = append(c.Req.Messages, engines.Message{Role: "user", Content: one})
		return nil
	}
	var items []respItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return BadRequest("input must be a string or an array of items")
	}
	names := map[string]string{} // call id → function name, for the outputs
	im := images{remote: &c.RemoteImages}
	for _, it := range items {
		switch {
		case it.Type == "function_call":
			if it.Name == "" {
				return BadRequest("a function_call item has no name")
			}
			names[it.CallID] = it.Name
			call := engines.ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}
			if n := len(c.Req.Messages); n > 0 && c.Req.Messages[n-1].Role == "assistant" {
				c.Req.Messages[n-1].ToolCalls = append(c.Req.Messages[n-1].ToolCalls, call)
			} else {
				c.Req.Messages = append(c.Req.Messages, engines.Message{Role: "assistant", ToolCalls: []engines.ToolCall{call}})
			}
		case it.Type == "function_call_output":
			out, err := respText(it.Output)
			if err != nil {
				return BadRequest(err.Error())
			}
			c.Req.Messages = append(c.Req.Messages, engines.Message{Role: "tool", Content: out, ToolCallID: it.CallID, ToolName: names[it.CallID]})
		case it.Type == "item_reference":
			// Resolved by the agent that serves the request (serveLocal): it answered it.
			c.Refs = append(c.Refs, itemRef{Index: len(c.Req.Messages), ID: it.ID})
			c.Req.Messages = append(c.Req.Messages, engines.Message{Role: "assistant"})
		case it.Type == "reasoning":
			// An earlier answer's reasoning: nothing here produces or reads it.
		case it.Type == "" || it.Type == "message":
			r, err := role(it.Role)
			if err != nil || r == "tool" {
				return BadRequest(fmt.Sprintf("input message role %q: want system, developer, user or assistant", it.Role))
			}
			text, imgs, err := contentParts(it.Content, respShape, &im, respKinds...)
			if err != nil {
				return BadRequest(err.Error())
			}
			c.Req.Messages = append(c.Req.Messages, engines.Message{Role: r, Content: text, Images: imgs})
		default:
			return BadRequest(fmt.Sprintf("input item of type %q is not supported (messages, function_call and function_call_output are)", it.Type))
		}
	}
	return nil
}

// respTools takes a Responses request's function tools into c.
func respTools(c *Call, tools []respTool) *Failure {
	for _, t := range tools {
		if t.Type != "function" {
			return BadRequest(fmt.Sprintf("tool of type %q is not supported: only function tools", t.Type))
		}
		if t.Name == "" {
			return BadRequest("a function tool has no name")
		}
		if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && string(p) != "null" && p[0] != '{' {
			return BadRequest(fmt.Sprintf("the parameters of tool %q must be a JSON Schema object", t.Name))
		}
		c.Req.Tools = append(c.Req.Tools, engines.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return nil
}

// respObject is a response as the Responses API returns it (and its stream's created and
// completed events carry).
type respObject struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	CreatedAt         int64          `json:"created_at"`
	Status            string         `json:"status"`
	Model             string         `json:"model"`
	Output            []any          `json:"output"`
	IncompleteDetails *respIncomplet `json:"incomplete_details"`
	Error             any            `json:"error"`
	Usage             *respUsage     `json:"usage,omitempty"`
	Store             bool           `json:"store"`
}

type respIncomplet struct {
	Reason string `json:"reason"`
}

type respUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

type respMessage struct {
	Type    string     `json:"type"`
	ID      string     `json:"id"`
	Status  string     `json:"status"`
	Role    string     `json:"role"`
	Content []respPart `json:"content"`
}

type respPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type respCall struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

func respID(prefix string) string { return prefix + completionID()[len("chatcmpl-"):] }

func newRespCall(c engines.ToolCall, status string) respCall {
	id := c.ID
	if id == "" {
		id = respID("call_")
	}
	args := c.Arguments
	if args == "" {
		args = "{}"
	}
	return respCall{Type: "function_call", ID: respID("fc_"), CallID: id, Name: c.Name, Arguments: args, Status: status}
}

// respAnswer builds the answer's response object, shared by the whole and streamed forms.
type respAnswer struct {
	id       string
	model    string
	created  int64
	output   []any
	remember func(id, text string) // keeps an answered message for item_reference
}

func (a *respAnswer) object(status string, st *Stats) respObject {
	o := respObject{ID: a.id, Object: "response", CreatedAt: a.created, Status: status, Model: a.model, Output: a.output}
	if o.Output == nil {
		o.Output = []any{}
	}
	if st != nil {
		o.Usage = &respUsage{InputTokens: st.PromptTokens, OutputTokens: st.CompletionTokens, TotalTokens: st.PromptTokens + st.CompletionTokens,
			InputTokensDetails: map[string]int{"cached_tokens": 0}, OutputTokensDetails: map[string]int{"reasoning_tokens": 0}}
		if st.Finish == "length" {
			o.Status, o.IncompleteDetails = "incomplete", &respIncomplet{Reason: "max_output_tokens"}
		}
	}
	return o
}

// respWhole answers a Responses request that did not ask to stream.
type respWhole struct {
	Out
	respAnswer
	text  []byte
	calls []engines.ToolCall
}

func (s *respWhole) Chunk(content string) error {
	s.text = append(s.text, content...)
	return nil
}

func (s *respWhole) ToolCalls(calls []engines.ToolCall) error {
	s.calls = append(s.calls, calls...)
	return nil
}

func (s *respWhole) Finish(st Stats) error {
	if len(s.text) > 0 || len(s.calls) == 0 {
		m := respMessage{Type: "message", ID: respID("msg_"), Status: "completed", Role: "assistant",
			Content: []respPart{{Type: "output_text", Text: string(s.text), Annotations: []any{}}}}
		s.output = append(s.output, m)
		s.remember(m.ID, string(s.text))
	}
	for _, c := range s.calls {
		s.output = append(s.output, newRespCall(c, "completed"))
	}
	b, err := json.Marshal(s.object("completed", &st))
	if err != nil {
		return err
	}
	s.w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	s.Begin("application/json")
	return s.Send(append(b, '\n'))
}

func (s *respWhole) Started() bool { return s.begun }
func (s *respWhole) Fail(*Failure) {}

// respStream writes the Responses API's typed server-sent events: response.created, then per
// output item its added, delta and done events, then response.completed (or .incomplete).
type respStream struct {
	Out
	respAnswer
	seq  int
	msg  *respMessage // the message item being written, if any
	text []byte
}

func (s *respStream) event(typ string, fields map[string]any) error {
	if !s.begun {
		s.Begin("text/event-stream")
		if err := s.event("response.created", map[string]any{"response": s.object("in_progress", nil)}); err != nil {
			return err
		}
		if err := s.event("response.in_progress", map[string]any{"response": s.object("in_progress", nil)}); err != nil {
			return err
		}
	}
	fields["type"], fields["sequence_number"] = typ, s.seq
	s.seq++
	b, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	return s.Send([]byte("event: " + typ + "\ndata: " + string(b) + "\n\n"))
}

func (s *respStream) Chunk(content string) error {
	if s.msg == nil {
		s.msg = &respMessage{Type: "message", ID: respID("msg_"), Status: "in_progress", Role: "assistant", Content: []respPart{}}
		if err := s.event("response.output_item.added", map[string]any{"output_index": len(s.output), "item": s.msg}); err != nil {
			return err
		}
		if err := s.event("response.content_part.added", map[string]any{"item_id": s.msg.ID, "output_index": len(s.output), "content_index": 0,
			"part": respPart{Type: "output_text", Annotations: []any{}}}); err != nil {
			return err
		}
	}
	s.text = append(s.text, content...)
	return s.event("response.output_text.delta", map[string]any{"item_id": s.msg.ID, "output_index": len(s.output), "content_index": 0, "delta": content, "logprobs": []any{}})
}

// closeMessage ends the message item being written.
func (s *respStream) closeMessage() error {
	if s.msg == nil {
		return nil
	}
	m, i := s.msg, len(s.output)
	s.msg = nil
	part := respPart{Type: "output_text", Text: string(s.text), Annotations: []any{}}
	m.Status, m.Content = "completed", []respPart{part}
	s.output = append(s.output, *m)
	s.remember(m.ID, part.Text)
	for _, e := range []struct {
		typ    string
		fields map[string]any
	}{
		{"response.output_text.done", map[string]any{"item_id": m.ID, "output_index": i, "content_index": 0, "text": part.Text, "logprobs": []any{}}},
		{"response.content_part.done", map[string]any{"item_id": m.ID, "output_index": i, "content_index": 0, "part": part}},
		{"response.output_item.done", map[string]any{"output_index": i, "item": m}},
	} {
		if err := s.event(e.typ, e.fields); err != nil {
			return err
		}
	}
	return nil
}

func (s *respStream) ToolCalls(calls []engines.ToolCall) error {
	if err := s.closeMessage(); err != nil {
		return err
	}
	for _, c := range calls {
		item, i := newRespCall(c, "in_progress"), len(s.output)
		args := item.Arguments
		item.Arguments = ""
		if err := s.event("response.output_item.added", map[string]any{"output_index": i, "item": item}); err != nil {
			return err
		}
		if err := s.event("response.function_call_arguments.delta", map[string]any{"item_id": item.ID, "output_index": i, "delta": args}); err != nil {
			return err
		}
		if err := s.event("response.function_call_arguments.done", map[string]any{"item_id": item.ID, "output_index": i, "arguments": args}); err != nil {
			return err
		}
		item.Arguments, item.Status = args, "completed"
		s.output = append(s.output, item)
		if err := s.event("response.output_item.done", map[string]any{"output_index": i, "item": item}); err != nil {
			return err
		}
	}
	return nil
}

func (s *respStream) Finish(st Stats) error {
	if len(s.output) == 0 && s.msg == nil {
		if err := s.Chunk(""); err != nil { // an empty answer is still one message
			return err
		}
	}
	if err := s.closeMessage(); err != nil {
		return err
	}
	o := s.object("completed", &st)
	typ := "response.completed"
	if o.Status == "incomplete" {
		typ = "response.incomplete"
	}
	return s.event(typ, map[string]any{"response": o})
}

func (s *respStream) Started() bool { return s.begun }

// fail ends a stream that broke off with the Responses API's error event.
func (s *respStream) Fail(f *Failure) {
	e := f.openAI().Error
	s.event("error", map[string]any{"code": e.Code, "message": e.Message, "param": nil})
}

func newRespEncoder(c *Call, o Out, start time.Time) Encoder {
	a := respAnswer{id: respID("resp_"), model: c.Model, created: start.Unix(), remember: c.Remember}
	if a.remember == nil {
		a.remember = func(string, string) {}
	}
	if c.Stream {
		return &respStream{Out: o, respAnswer: a}
	}
	return &respWhole{Out: o, respAnswer: a}
}

// itemRef is an item_reference in a request's input: the message at index stands for it.
type itemRef struct {
	Index int
	ID    string
}
