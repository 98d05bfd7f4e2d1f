package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// failure is an error answer: its status, the stable code, and what each dialect shows.
type failure struct {
	status int
	code   api.Code
	// oaCode is OpenAI's "code" where OpenAI has a convention clients test for
	// ("model_not_found", "context_length_exceeded", "rate_limit_exceeded"); "" shows code.
	oaCode     string
	msg        string
	retryAfter int // seconds; set on 429 and 503
}

func (f *failure) Error() string { return string(f.code) + ": " + f.msg }

// retryable reports whether another replica might succeed where this one failed: not when the
// request itself is at fault.
func (f *failure) retryable() bool {
	switch f.code {
	case api.CodeBadRequest, api.CodeContextLimit, api.CodeUnauthorized:
		return false
	}
	return f.status != http.StatusBadRequest && f.status != http.StatusRequestEntityTooLarge
}

func badRequest(msg string) *failure {
	return &failure{status: http.StatusBadRequest, code: api.CodeBadRequest, oaCode: "invalid_request", msg: msg}
}

// failureOf turns an engine's or the agent's error into an answer. An engine's "not found" (a
// hailo-ollama 5.1 "HTTP 200" error body included) is a real 404; other engine failures keep
// the status their code stands for (502 for an engine error, 503 for an engine that does not
// answer), never the engine's own 200.
func failureOf(err error) *failure {
	var f *failure
	if errors.As(err, &f) {
		return f
	}
	if errors.Is(err, engines.ErrNotFound) {
		return &failure{status: http.StatusNotFound, code: api.CodeNotFound, oaCode: "model_not_found", msg: err.Error()}
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
	f = &failure{status: agent.HTTPStatus(code), code: code, msg: err.Error()}
	if code == api.CodeContextLimit {
		f.oaCode = "context_length_exceeded"
		why := err.Error()
		if ee != nil && ee.Err != nil {
			why = ee.Err.Error()
		}
		f.msg = "the prompt is longer than the model's context (" + why + ")" +
			"; shorten the conversation or place the model with a larger context"
	}
	if f.status == http.StatusInternalServerError {
		f.status = http.StatusBadGateway // whatever an engine did wrong, the gateway itself is fine
	}
	if f.status == http.StatusServiceUnavailable {
		f.retryAfter = 1
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

func (f *failure) openAI() oaErrorBody {
	code := f.oaCode
	if code == "" {
		code = string(f.code)
	}
	return oaErrorBody{Error: oaError{Message: f.msg, Type: oaType(f.status), Code: code}}
}

type ollamaErrorBody struct {
	Error string `json:"error"`
}

// writeFailure answers with f in the dialect's error shape and a real status.
func writeFailure(w http.ResponseWriter, d dialect, f *failure) {
	h := w.Header()
	if f.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(f.retryAfter))
	}
	var body any
	switch {
	case d.openAIShaped():
		body = f.openAI()
	case d == dialectAnthropic:
		body = f.anthropic()
	default:
		body = ollamaErrorBody{Error: f.msg}
	}
	b, _ := json.Marshal(body)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(f.status)
	w.Write(append(b, '\n'))
}
