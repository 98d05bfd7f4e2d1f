package llamaserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/sizing"
)

// chatRequest is llama-server's OpenAI chat request, always streamed.
type chatRequest struct {
	Model         string            `json:"model"`
	Messages      []engines.Message `json:"messages"`
	Stream        bool              `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	Seed        *int     `json:"seed,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Stop        []string `json:"stop,omitempty"`
}

// Chat streams an answer from m's llama-server through /v1/chat/completions (server-sent
// events), one chunk per event as it arrives. An error from emit, or the end of ctx, closes the
// connection at once, which stops generation.
func (d *Driver) Chat(ctx context.Context, m engines.Model, req engines.ChatRequest, emit func(engines.ChatChunk) error) error {
	if len(req.Messages) == 0 {
		return &engines.Error{Code: api.CodeBadRequest, Err: errors.New("a chat needs at least one message")}
	}
	inst, err := d.instance(m.ID)
	if err != nil {
		return err
	}
	body := chatRequest{
		Model: inst.alias, Messages: req.Messages, Stream: true,
		Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, Seed: req.Seed,
		MaxTokens: req.MaxTokens, Stop: req.Stop,
	}
	body.StreamOptions.IncludeUsage = true
	b, err := json.Marshal(body)
	if err != nil {
		return &engines.Error{Code: api.CodeInternal, Err: err}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, inst.endpoint+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return &engines.Error{Code: api.CodeInternal, Err: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := d.http.Do(hreq)
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
	return readEvents(ctx, resp.Body, emit)
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
		if e.Error.Type == "exceed_context_size_error" {
			code = api.CodeContextLimit
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
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Timings *struct {
		PromptN    int `json:"prompt_n"`
		PredictedN int `json:"predicted_n"`
	} `json:"timings"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// maxEvent bounds one event's data.
const maxEvent = 4 << 20

// readEvents reads server-sent events until "data: [DONE]": each piece of content is emitted
// as it comes, then one last chunk with Done, the finish reason and the token counts (from
// usage, or llama-server's timings when usage is absent).
func readEvents(ctx context.Context, body io.Reader, emit func(engines.ChatChunk) error) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEvent)
	final := engines.ChatChunk{Done: true}
	finished := false
	for sc.Scan() {
		line := sc.Text()
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
		case "error": // some llama-server builds send "error: {…}" before closing
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: %s", value)}
		default:
			continue // blank separators, comments, event names
		}
		if value == "[DONE]" {
			return emit(final)
		}
		var c streamChunk
		if err := json.Unmarshal([]byte(value), &c); err != nil {
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: unreadable event %q: %w", truncate(value), err)}
		}
		if c.Error != nil {
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: %s", c.Error.Message)}
		}
		if c.Usage != nil {
			final.PromptTokens, final.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
		} else if c.Timings != nil && final.CompletionTokens == 0 {
			final.PromptTokens, final.CompletionTokens = c.Timings.PromptN, c.Timings.PredictedN
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				if err := emit(engines.ChatChunk{Content: *ch.Delta.Content}); err != nil {
					return err
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				final.FinishReason, finished = *ch.FinishReason, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server: the answer broke off: %w", err)}
	}
	if finished {
		return emit(final) // the answer ended without "[DONE]", but it did end
	}
	return &engines.Error{Code: api.CodeEngineError, Err: errors.New("llama-server: the answer ended before its last chunk")}
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
