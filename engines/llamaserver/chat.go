package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
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

// chatMessage is an OpenAI message; content is null for an assistant turn made of tool calls.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content"`
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
		if m.Content != "" || len(m.ToolCalls) == 0 {
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
	// No context of its own to cancel on return: closing the body unread ends the connection,
	// which stops llama-server's generation as a cancel would (with a cancelable parent, the
	// context registered with it and was removed again on every chat). llama-server closes the
	// connection after every streamed answer without saying so (no "Connection: close"; tried
	// on build 10470): put back in a pool, the connection fails the next request on it with EOF
	// or a broken pipe. So each chat has a connection of its own (dialed ahead: see
	// dialAhead.roundTrip), and says it closes after the answer.
	resp, err := inst.ahead.roundTrip(ctx, route, b)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if inst.exited() && inst.Err() != nil {
			return inst.Err()
		}
		return &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("llama-server for %s does not answer: %w", m.ID, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return answerError(resp)
	}
	return readEvents(ctx, resp.Body, emit, resp.Body.(*connBody).dialNext)
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
			Content   *string        `json:"content"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"delta"`
		Text         *string `json:"text"` // /v1/completions
		FinishReason *string `json:"finish_reason"`
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
// as it comes, then one last chunk with Done, the finish reason and the token counts (from
// usage, or llama-server's timings when usage is absent: the agent does not ask for usage,
// and the timings of llama-server's last event say as much, the prompt's tokens being those
// taken from the cache and those evaluated, cache_n + prompt_n). Pieces that arrived together are
// emitted with More (see engines.ChatChunk), and an empty chunk goes out before each wait on
// the engine after them. first, when not nil, is called once the first piece of content has
// been emitted: work that should not delay it goes there.
func readEvents(ctx context.Context, body io.Reader, emit func(engines.ChatChunk) error, first func()) error {
	r := stream.NewReader(body, maxEvent)
	defer r.Close()
	final := engines.ChatChunk{Done: true}
	finished := false
	// Tool calls stream in pieces (id and name, then arguments) by index: they are assembled
	// and emitted whole, before the last chunk.
	var calls []engines.ToolCall
	end := func() error {
		if len(calls) > 0 {
			if err := emit(engines.ChatChunk{ToolCalls: calls}); err != nil {
				return err
			}
		}
		return emit(final)
	}
	held := false   // a chunk went out with More, and no chunk without it since
	var tail []byte // the members after the choices of the last event read quickly
	for {
		if held && !r.Ready() {
			if err := emit(engines.ChatChunk{}); err != nil {
				return err
			}
			held = false
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
		switch string(field) {
		case "data":
		case "error": // some llama-server builds send "error: {…}" before closing
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: %s", value)}
		default:
			if rerr == io.EOF {
				if finished {
					return end() // the answer ended without "[DONE]", but it did end
				}
				return &engines.Error{Code: api.CodeEngineError, Err: errors.New("llama-server: the answer ended before its last chunk")}
			}
			continue // blank separators, comments, event names
		}
		if string(value) == "[DONE]" {
			return end()
		}
		if content, finish, n, ok := quickEvent(value, &tail); ok {
			if n.timings && final.CompletionTokens == 0 {
				final.PromptTokens, final.CompletionTokens = n.cacheN+n.promptN, n.predictedN
			}
			if content != "" {
				if err := emit(engines.ChatChunk{Content: content, More: true}); err != nil {
					return err
				}
				held = true
				if first != nil {
					first()
					first = nil
				}
			}
			if finish != "" {
				final.FinishReason, finished = finish, true
			}
		} else if n, ok := quickCounts(value); ok {
			if n.usage {
				final.PromptTokens, final.CompletionTokens = n.prompt, n.completion
			} else if n.timings && final.CompletionTokens == 0 {
				final.PromptTokens, final.CompletionTokens = n.cacheN+n.promptN, n.predictedN
			}
		} else {
			var c streamChunk
			if err := json.Unmarshal(value, &c); err != nil {
				return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: unreadable event %q: %w", truncate(string(value)), err)}
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
				final.PromptTokens, final.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
			} else if c.Timings != nil && final.CompletionTokens == 0 {
				final.PromptTokens, final.CompletionTokens = c.Timings.CacheN+c.Timings.PromptN, c.Timings.PredictedN
			}
			for _, ch := range c.Choices {
				for _, tc := range ch.Delta.ToolCalls {
					i := len(calls) - 1
					if tc.Index != nil {
						i = *tc.Index
					}
					if i < 0 || i > len(calls) || i >= maxToolCalls {
						return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: tool call index %d out of order", i)}
					}
					if i == len(calls) {
						calls = append(calls, engines.ToolCall{})
					}
					calls[i].ID += tc.ID
					calls[i].Name += tc.Function.Name
					calls[i].Arguments += tc.Function.Arguments
				}
				if ch.Delta.Content == nil {
					ch.Delta.Content = ch.Text
				}
				if ch.Delta.Content != nil && *ch.Delta.Content != "" {
					if err := emit(engines.ChatChunk{Content: *ch.Delta.Content, More: true}); err != nil {
						return err
					}
					held = true
					if first != nil {
						first()
						first = nil
					}
				}
				if ch.FinishReason != nil && *ch.FinishReason != "" {
					final.FinishReason, finished = *ch.FinishReason, true
				}
			}
		}
		if rerr == io.EOF {
			if finished {
				return end()
			}
			return &engines.Error{Code: api.CodeEngineError, Err: errors.New("llama-server: the answer ended before its last chunk")}
		}
		r.SkipBlank() // the separator after the event, when it came with it
	}
}

// quickEvent reads the events nearly every answer is made of, by looking at their bytes
// instead of decoding them, for what a token costs the agent: one choice whose delta is a piece
// of content, the role alone (the first event), or nothing (with the finish reason, the last),
// in compact form with the choice's keys in llama-server's order (build 9749),
//
//	{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"…"}}],"created":…}
//
// or with the delta first ({"delta":…,"finish_reason":…,"index":…}, as encoding/json orders
// them), and no usage or error after the choices; timings after them (the last event's, as
// llama-server writes it when usage is not asked for) are read by walking the members, into n.
// Anything else, or content that is not plain (invalid UTF-8, U+2028 or U+2029), is not ok:
// the caller decodes it whole.
//
// tail holds the members after the choices of the last event it took, judged free of those a
// decode would read: llama-server repeats them unchanged in every event of an answer (id,
// created, model, …), so an event whose members are the same bytes is not judged again.
func quickEvent(data []byte, tail *[]byte) (content, finish string, n counts, ok bool) {
	content, finish, ok = quickChoices(data, tail, &n)
	return content, finish, n, ok
}

func quickChoices(data []byte, tail *[]byte, n *counts) (content, finish string, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"choices":[{`))
	if !ok || data[len(data)-1] != '}' {
		return "", "", false
	}
	if r, deltaFirst := bytes.CutPrefix(rest, []byte(`"delta":`)); deltaFirst {
		if content, rest, ok = quickDelta(r); !ok {
			return "", "", false
		}
		if rest, ok = bytes.CutPrefix(rest, []byte(`,"finish_reason":`)); !ok {
			return "", "", false
		}
		if finish, rest, ok = quickFinish(rest); !ok {
			return "", "", false
		}
		rest = skipIndex(rest)
	} else {
		if rest, ok = bytes.CutPrefix(rest, []byte(`"finish_reason":`)); !ok {
			return "", "", false
		}
		if finish, rest, ok = quickFinish(rest); !ok {
			return "", "", false
		}
		rest = skipIndex(rest)
		if rest, ok = bytes.CutPrefix(rest, []byte(`,"delta":`)); !ok {
			return "", "", false
		}
		if content, rest, ok = quickDelta(rest); !ok {
			return "", "", false
		}
	}
	rest, ok = bytes.CutPrefix(rest, []byte("}]"))
	if !ok || (rest[0] != ',' && rest[0] != '}') {
		return "", "", false
	}
	// The rest is the top level's other members: usage, timings, an error, or choices again
	// (the last of two wins) would be read by a decode.
	if !bytes.Equal(rest, *tail) {
		if stream.HasMember(rest, "usage", "error", "choices") {
			return "", "", false
		}
		if stream.HasMember(rest, "timings") {
			// Not kept as the tail: the timings are this answer's last event's own.
			if *n, ok = quickTimings(data); !ok {
				return "", "", false
			}
			return content, finish, true
		}
		*tail = append((*tail)[:0], rest...)
	}
	return content, finish, true
}

// quickTimings reads the timings of an event whose choices quickEvent has read, by walking its
// members: ok only when the timings are an object whose counts, where present, are plain
// integers, and nothing but the choices and them is a member a decode would read (under
// another spelling, or twice).
func quickTimings(data []byte) (n counts, ok bool) {
	var choices bool
	ok = true
	walked := stream.Members(data, func(name, v []byte) bool {
		switch string(name) {
		case "choices":
			ok = !choices
			choices = true
		case "timings":
			ok = !n.timings
			n.timings = true
			ok = readCounts(v, ok, []string{"cache_n", "prompt_n", "predicted_n"}, &n.cacheN, &n.promptN, &n.predictedN)
		default:
			ok = !foldsTo(name, "choices", "usage", "timings", "error")
		}
		return ok
	})
	if !walked || !ok {
		return counts{}, false
	}
	return n, true
}

// counts is what an event without choices says of the answer's tokens: its usage, or
// llama-server's timings.
type counts struct {
	usage, timings              bool
	prompt, completion          int // usage
	cacheN, promptN, predictedN int // timings
}

// quickCounts reads the event that carries an answer's token counts — llama-server's last
// before "[DONE]" when usage is asked for, the agent's case,
//
//	{"choices":[],"created":…,"object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":29,…},"timings":{…}}
//
// by walking its members instead of decoding it: its timings' numbers made it the costliest
// event of a short answer to decode (10-20 µs, several tokens' worth). ok only for an event
// with no choices and no error whose counts, where present, are plain integers, and no
// member a decode would read under another spelling or twice; otherwise the caller decodes it.
func quickCounts(data []byte) (n counts, ok bool) {
	var choices bool
	ok = true
	walked := stream.Members(data, func(name, v []byte) bool {
		switch string(name) {
		case "choices":
			ok = !choices && string(v) == "[]"
			choices = true
		case "usage":
			ok = !n.usage
			n.usage = true
			ok = readCounts(v, ok, []string{"prompt_tokens", "completion_tokens"}, &n.prompt, &n.completion)
		case "timings":
			ok = !n.timings
			n.timings = true
			ok = readCounts(v, ok, []string{"cache_n", "prompt_n", "predicted_n"}, &n.cacheN, &n.promptN, &n.predictedN)
		default:
			ok = !foldsTo(name, "choices", "usage", "timings", "error")
		}
		return ok
	})
	return n, walked && ok
}

// readCounts reads the integer members names of the object v into dst, one for each (0 when
// absent): ok stays true only when v is an object, those members are plain integers that fit
// an int32, and none appears twice or spelled otherwise.
func readCounts(v []byte, ok bool, names []string, dst ...*int) bool {
	if !ok {
		return false
	}
	var seen uint
	walked := stream.Members(v, func(name, num []byte) bool {
		k := slices.Index(names, string(name))
		if k < 0 {
			ok = !foldsTo(name, names...)
			return ok
		}
		if seen&(1<<k) != 0 || len(num) == 0 || len(num) > 9 || (num[0] == '0' && len(num) > 1) {
			ok = false
			return false
		}
		seen |= 1 << k
		for _, c := range num {
			if c < '0' || c > '9' {
				ok = false
				return false
			}
			*dst[k] = *dst[k]*10 + int(c-'0')
		}
		return true
	})
	return walked && ok
}

// foldsTo reports whether name is one of names as encoding/json matches them (without regard
// to ASCII case; Members has ruled out anything but ASCII).
func foldsTo(name []byte, names ...string) bool {
	for _, n := range names {
		if bytes.EqualFold(name, []byte(n)) {
			return true
		}
	}
	return false
}

// quickDelta reads a delta at the start of data: a piece of content, the role alone, or
// nothing; and returns what follows it.
func quickDelta(data []byte) (content string, rest []byte, ok bool) {
	switch {
	case bytes.HasPrefix(data, []byte(`{"content":"`)):
		var end int
		if content, end, ok = stream.String(data, len(`{"content":`)); !ok || end >= len(data) || data[end] != '}' {
			return "", nil, false
		}
		return content, data[end+1:], true
	case bytes.HasPrefix(data, []byte(`{"role":"assistant","content":null}`)):
		return "", data[len(`{"role":"assistant","content":null}`):], true
	case bytes.HasPrefix(data, []byte(`{}`)):
		return "", data[len(`{}`):], true
	}
	return "", nil, false
}

// quickFinish reads a finish reason at the start of data: null or a plain string.
func quickFinish(data []byte) (finish string, rest []byte, ok bool) {
	if r, isNull := bytes.CutPrefix(data, []byte("null")); isNull {
		return "", r, true
	}
	finish, end, ok := stream.String(data, 0)
	if !ok {
		return "", nil, false
	}
	return finish, data[end:], true
}

// skipIndex skips a choice's `,"index":N`, if there is one.
func skipIndex(data []byte) []byte {
	if r, ok := bytes.CutPrefix(data, []byte(`,"index":`)); ok {
		// A loop, not bytes.TrimLeft with the digits: that builds its set of bytes on every
		// call, a tenth of reading an event.
		i := 0
		for i < len(r) && r[i] >= '0' && r[i] <= '9' {
			i++
		}
		return r[i:]
	}
	return data
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
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, inst.endpoint+"/v1/embeddings", bytes.NewReader(b))
	if err != nil {
		return engines.Embeddings{}, &engines.Error{Code: api.CodeInternal, Err: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	engines.Replayable(hreq)
	resp, err := inst.http.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return engines.Embeddings{}, ctx.Err()
		}
		return engines.Embeddings{}, &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("llama-server for %s does not answer: %w", m.ID, err)}
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
