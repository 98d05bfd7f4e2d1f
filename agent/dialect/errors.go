package dialect

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// Failure is an error answer: its status, the stable code, and what each dialect shows.
type Failure struct {
	Status int
	Code   api.Code
	// oaCode is OpenAI's "code" where OpenAI has a convention clients test for
	// ("model_not_found", "context_length_exceeded", "rate_limit_exceeded"); "" shows code.
	OACode     string
	Msg        string
	RetryAfter int // seconds; set on 429 and 503
}

func (f *Failure) Error() string { return string(f.Code) + ": " + f.Msg }

// retryable reports whether another replica might succeed where this one failed: not when the
// request itself is at fault.
func (f *Failure) Retryable() bool {
	switch f.Code {
	case api.CodeBadRequest, api.CodeContextLimit, api.CodeUnauthorized:
		return false
	}
	return f.Status != http.StatusBadRequest && f.Status != http.StatusRequestEntityTooLarge
}

func BadRequest(msg string) *Failure {
	return &Failure{Status: http.StatusBadRequest, Code: api.CodeBadRequest, OACode: "invalid_request", Msg: msg}
}

// FailureOf turns an engine's or the agent's error into an answer. An engine's "not found" (a
// hailo-ollama 5.1 "HTTP 200" error body included) is a real 404; other engine failures keep
// the status their code stands for (502 for an engine error, 503 for an engine that does not
// answer), never the engine's own 200.
func FailureOf(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	if errors.Is(err, engines.ErrNotFound) {
		return &Failure{Status: http.StatusNotFound, Code: api.CodeNotFound, OACode: "model_not_found", Msg: err.Error()}
	}
	code := api.CodeEngineError
	var ee *engines.Error
	var ae *api.Error
	switch {
	case errors.As(err, &ee) && ee.Code != "":
		code = ee.Code
	case errors.As(err, &ae) && ae.Code != "":
		code = ae.Code
	}
	f = &Failure{Status: agent.HTTPStatus(code), Code: code, Msg: err.Error()}
	if code == api.CodeContextLimit {
		f.OACode = "context_length_exceeded"
		why := err.Error()
		if ee != nil && ee.Err != nil {
			why = ee.Err.Error()
		}
		f.Msg = "the prompt is longer than the model's context (" + why + ")" +
			"; shorten the conversation or place the model with a larger context"
	}
	if f.Status == http.StatusInternalServerError {
		f.Status = http.StatusBadGateway // whatever an engine did wrong, the gateway itself is fine
	}
	if f.Status == http.StatusServiceUnavailable {
		f.RetryAfter = 1
	}
	return f
}

// oaType is OpenAI's error "type" for a status.
func oaType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

type oaError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

type oaErrorBody struct {
	Error oaError `json:"error"`
}

func (f *Failure) openAI() oaErrorBody {
	code := f.OACode
	if code == "" {
		code = string(f.Code)
	}
	return oaErrorBody{Error: oaError{Message: f.Msg, Type: oaType(f.Status), Code: code}}
}

type ollamaErrorBody struct {
	Error string `json:"error"`
}

// WriteFailure answers with f in the dialect's error shape and a real status.
func WriteFailure(w http.ResponseWriter, d Dialect, f *Failure) {
	h := w.Header()
	if f.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(f.RetryAfter))
	}
	var body any
	switch {
	case d.openAIShaped():
		body = f.openAI()
	case d == Anthropic:
		body = f.anthropic()
	default:
		body = ollamaErrorBody{Error: f.Msg}
	}
	b, _ := json.Marshal(body)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(f.Status)
	w.Write(append(b, '\n'))
}

// StreamFailure ends a streamed answer that broke off with an error in the stream's own form,
// on a fresh line, so the client sees an error rather than a silently short answer.
func StreamFailure(o *Out, d Dialect, contentType string, f *Failure) {
	switch {
	case strings.HasPrefix(contentType, "text/event-stream") && d == Anthropic:
		o.Send(anErrorEvent(f))
	case strings.HasPrefix(contentType, "text/event-stream"):
		b, _ := json.Marshal(f.openAI())
		o.Send(append(append([]byte("\n\ndata: "), b...), "\n\n"...))
	case strings.HasPrefix(contentType, "application/x-ndjson") && d != OpenAI:
		b, _ := json.Marshal(ollamaErrorBody{Error: f.Msg})
		o.Send(append(append([]byte("\n"), b...), '\n'))
	}
}
