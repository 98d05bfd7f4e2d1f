// Package apiclient is the HTTP client of an agent's API (agent/api is its contract: types, codes
// and pure functions).
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// Client speaks an agent's HTTP API. The console, the headless commands and agents forwarding
// to each other all use it, so there is one reading of the API.
type Client struct {
	BaseURL string // "http://10.0.0.5:7777"
	Token   string // bearer token; never logged
	HTTP    *http.Client
}

// New returns a client for the agent at addr ("host:port" or a URL).
func New(addr, token string) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return &Client{BaseURL: strings.TrimRight(addr, "/"), Token: token, HTTP: &http.Client{}}
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

// UnreachableError wraps a transport failure: the agent could not be reached or timed out.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string { return "agent " + e.URL + " unreachable: " + e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, &UnreachableError{URL: c.BaseURL, Err: err}
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// openAICodes are the OpenAI error codes the gateway answers with (clients check for them),
// in this API's terms.
var openAICodes = map[string]api.Code{
	"model_not_found":         api.CodeNotFound,
	"context_length_exceeded": api.CodeContextLimit,
	"rate_limit_exceeded":     api.CodeTooBusy,
	"request_too_large":       api.CodeBadRequest,
	"invalid_request":         api.CodeBadRequest,
	"model_not_ready":         api.CodeEngineUnavailable,
}

// decodeError turns an error response into *Error, keeping the status for callers that care.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.ErrorBody
	if json.Unmarshal(b, &body) == nil && body.Error != nil && body.Error.Code != "" {
		if c, ok := openAICodes[string(body.Error.Code)]; ok {
			body.Error.Code = c
		}
		api.Sanitize(body.Error)
		return body.Error
	}
	code := api.CodeInternal
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		code = api.CodeUnauthorized
	case http.StatusForbidden:
		code = api.CodeForbidden
	case http.StatusNotFound:
		code = api.CodeNotFound
	case http.StatusBadRequest:
		code = api.CodeBadRequest
	case http.StatusTooManyRequests:
		code = api.CodeTooBusy
	}
	msg := api.Printable(strings.TrimSpace(string(b)))
	if msg == "" {
		msg = resp.Status
	}
	return &api.Error{Code: code, Message: msg}
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	req, err := c.newRequest(ctx, method, path, in)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding %s %s: %w", method, path, err)
	}
	api.Sanitize(out) // what an agent says may come from any member: it reaches terminals
	return nil
}

// Host returns the agent's capacity and state.
func (c *Client) Host(ctx context.Context) (api.Host, error) {
	var h api.Host
	return h, c.call(ctx, http.MethodGet, "/v1/host", nil, &h)
}

// Mesh returns the agent's view of the whole mesh.
func (c *Client) Mesh(ctx context.Context) (api.MeshView, error) {
	var v api.MeshView
	return v, c.call(ctx, http.MethodGet, "/v1/mesh", nil, &v)
}

// Doctor returns what the agent finds wrong, on its host and in the mesh as it sees it.
func (c *Client) Doctor(ctx context.Context) (api.DoctorReport, error) {
	var r api.DoctorReport
	return r, c.call(ctx, http.MethodGet, "/v1/doctor", nil, &r)
}

// Estimate sizes a request on the agent without reserving anything.
func (c *Client) Estimate(ctx context.Context, req api.PlacementRequest) (api.Estimation, error) {
	var e api.Estimation
	return e, c.call(ctx, http.MethodPost, "/v1/estimate", req, &e)
}

// Place asks the agent to run a model. The placement comes back at once, in its first state.
func (c *Client) Place(ctx context.Context, req api.PlacementRequest) (api.Placement, error) {
	var p api.Placement
	return p, c.call(ctx, http.MethodPost, "/v1/placements", req, &p)
}

// Placements lists the placements the token may see.
func (c *Client) Placements(ctx context.Context) ([]api.Placement, error) {
	var l api.PlacementList
	return l.Placements, c.call(ctx, http.MethodGet, "/v1/placements", nil, &l)
}

// Placement returns one placement.
func (c *Client) Placement(ctx context.Context, id string) (api.Placement, error) {
	var p api.Placement
	return p, c.call(ctx, http.MethodGet, "/v1/placements/"+url.PathEscape(id), nil, &p)
}

// PlacementLog returns the last bytes (0: the agent's default) of a placement's engine log.
func (c *Client) PlacementLog(ctx context.Context, id string, bytes int) (string, error) {
	path := "/v1/placements/" + url.PathEscape(id) + "/log"
	if bytes > 0 {
		path += "?bytes=" + strconv.Itoa(bytes)
	}
	req, err := c.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 2<<20))
	return api.PrintableText(string(b)), err
}

// Delete stops and removes a placement.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/placements/"+url.PathEscape(id), nil, nil)
}

// Events streams the agent's events after sequence number after (0: those from now on; above 0,
// what the agent's ring still holds after it) until ctx ends or the stream breaks; emit
// returning an error stops it. opened, when not nil, is called once the agent has subscribed
// the stream: no later event is missed.
func (c *Client) Events(ctx context.Context, after uint64, opened func(), emit func(api.Event) error) error {
	req, err := c.newRequest(ctx, http.MethodGet, "/v1/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if opened != nil {
		opened()
	}
	return api.ReadSSE(resp.Body, func(data []byte) error {
		var ev api.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("malformed event: %w", err)
		}
		api.Sanitize(&ev)
		return emit(ev)
	})
}

// ChatMessage is an OpenAI chat message.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatDelta is one streamed piece of an answer from the gateway.
type ChatDelta struct {
	Content      string
	FinishReason string
	Usage        *ChatUsage // on the last chunk when the gateway reports it
}

// ChatUsage is OpenAI's usage block.
type ChatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatOptions tunes a chat request.
type ChatOptions struct {
	Temperature *float64 `json:"temperature,omitempty"`
	Seed        *int     `json:"seed,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
}

// ChatStream sends an OpenAI streaming chat to the agent's gateway and calls emit per chunk.
// Cancelling ctx cancels the generation upstream.
func (c *Client) ChatStream(ctx context.Context, model string, msgs []ChatMessage, opt ChatOptions, emit func(ChatDelta) error) error {
	body := struct {
		Model         string        `json:"model"`
		Messages      []ChatMessage `json:"messages"`
		Stream        bool          `json:"stream"`
		StreamOptions any           `json:"stream_options,omitempty"`
		ChatOptions
	}{model, msgs, true, map[string]bool{"include_usage": true}, opt}
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/chat/completions", body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return api.ReadSSE(resp.Body, func(data []byte) error {
		if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
			return api.ErrSSEDone
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *ChatUsage `json:"usage"`
			Error *api.Error `json:"error"`
		}
		if err := json.Unmarshal(data, &chunk); err != nil {
			return fmt.Errorf("malformed chat chunk: %w", err)
		}
		if chunk.Error != nil {
			api.Sanitize(chunk.Error)
			return chunk.Error
		}
		d := ChatDelta{Usage: chunk.Usage}
		if len(chunk.Choices) > 0 {
			d.Content = api.PrintableText(chunk.Choices[0].Delta.Content)
			if fr := chunk.Choices[0].FinishReason; fr != nil {
				d.FinishReason = api.Printable(*fr)
			}
		}
		if d.Content == "" && d.FinishReason == "" && d.Usage == nil {
			return nil
		}
		return emit(d)
	})
}

// WaitLookTimeout bounds one look at a placement while waiting for it: an agent that stops
// answering is asked again (the Place view) or ends the wait (place --wait), never waited on.
const WaitLookTimeout = 10 * time.Second

// WaitPlacement polls a placement until it is ready or terminal, calling progress on each change.
// It returns the final placement; a failed one comes back with an *Error carrying its code. A
// look that fails ends the wait with its error.
func (c *Client) WaitPlacement(ctx context.Context, id string, every time.Duration, progress func(api.Placement)) (api.Placement, error) {
	return c.FollowPlacement(ctx, id, every, func(p api.Placement, err error) error {
		if err == nil && progress != nil {
			progress(p)
		}
		return err
	})
}

// FollowPlacement is the one loop that waits for a placement: it looks every interval, each look
// bounded by WaitLookTimeout, until Placement.Outcome says it is done, and returns the last
// placement seen with the outcome's error. look hears each change of state or progress, the
// first look after one that failed, and each failed look's error: it decides whether a look
// that failed ends the wait (its error returned) or is asked again (nil). A placement its host
// no longer knows (CodeNotFound: deleted) ends the wait after look heard it, whatever look says:
// it cannot come back.
func (c *Client) FollowPlacement(ctx context.Context, id string, every time.Duration, look func(api.Placement, error) error) (api.Placement, error) {
	var last api.Placement
	failed := false
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, WaitLookTimeout)
		p, err := c.Placement(pctx, id)
		cancel()
		if err != nil {
			failed = true
			if lerr := look(last, err); lerr != nil {
				return last, lerr
			}
			if ae := (*api.Error)(nil); errors.As(err, &ae) && ae.Code == api.CodeNotFound {
				return last, err
			}
		} else {
			if failed || p.State != last.State || p.Progress != last.Progress {
				if lerr := look(p, nil); lerr != nil {
					return p, lerr
				}
			}
			failed, last = false, p
			if done, err := p.Outcome(); done {
				return p, err
			}
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-t.C:
		}
	}
}
