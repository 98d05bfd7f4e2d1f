package ollama

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/sim/internal/simserver"
)

// writeOpenAIError writes the error shape of Ollama's OpenAI layer. Like Ollama it keeps the
// status of the underlying error but always says "api_error", except for a request it cannot
// parse ("invalid_request_error").
func writeOpenAIError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}

type openAIMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text returns a message's content: a string or the text of an array of content parts.
func (m openAIMessage) text() (string, error) {
	return simserver.ContentText(m.Content, "invalid message content type")
}

func (s *Server) handleOpenAIChat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model         string          `json:"model"`
		Messages      []openAIMessage `json:"messages"`
		Stream        bool            `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		MaxTokens *int   `json:"max_tokens"`
		Seed      *int64 `json:"seed"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	msgs := make([]message, 0, len(req.Messages))
	for _, m := range req.Messages {
		t, err := m.text()
		if err != nil {
			writeOpenAIError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		msgs = append(msgs, message{Role: m.Role, Content: t})
	}
	if req.Model == "" {
		writeOpenAIError(w, http.StatusBadRequest, "api_error", "model is required")
		return
	}
	p := s.pulledSpec(req.Model)
	if p == nil {
		writeOpenAIError(w, http.StatusNotFound, "api_error", notPulled(req.Model))
		return
	}
	opts := options{numPredict: -1, numCtx: s.cfg.NumCtx, seed: req.Seed}
	if req.MaxTokens != nil {
		opts.numPredict = *req.MaxTokens
	}
	prompt := render(p.spec.system, msgs)
	id := fmt.Sprintf("chatcmpl-%d", rand.IntN(999))
	created := time.Now().Unix() // seconds, unlike hailo-ollama
	base := func() map[string]any {
		return map[string]any{"id": id, "created": created, "model": req.Model, "system_fingerprint": "fp_ollama"}
	}
	usage := func(res result) map[string]int {
		return map[string]int{
			"prompt_tokens": res.promptTokens, "completion_tokens": res.evalCount,
			"total_tokens": res.promptTokens + res.evalCount,
		}
	}

	if !req.Stream {
		var text strings.Builder
		res, err := s.generate(r.Context(), p.name, prompt, opts, s.cfg.KeepAlive, func(tok string) error {
			text.WriteString(tok)
			return nil
		})
		if err != nil {
			return
		}
		out := base()
		out["object"] = "chat.completion"
		out["choices"] = []any{map[string]any{
			"index": 0, "message": map[string]any{"role": "assistant", "content": text.String()}, "finish_reason": res.finish,
		}}
		out["usage"] = usage(res)
		writeJSON(w, http.StatusOK, out)
		return
	}

	flusher, _ := w.(http.Flusher)
	started := false
	send := func(v any) error {
		if !started {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		var b []byte
		if str, ok := v.(string); ok {
			b = []byte(str)
		} else {
			b, _ = json.Marshal(v)
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	chunk := func(content string, finish any) map[string]any {
		c := base()
		c["object"] = "chat.completion.chunk"
		c["choices"] = []any{map[string]any{
			"index": 0, "delta": map[string]any{"role": "assistant", "content": content}, "finish_reason": finish,
		}}
		return c
	}
	res, err := s.generate(r.Context(), p.name, prompt, opts, s.cfg.KeepAlive, func(tok string) error {
		return send(chunk(tok, nil))
	})
	if err != nil {
		return
	}
	if send(chunk("", res.finish)) != nil {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := base()
		u["object"] = "chat.completion.chunk"
		u["choices"] = []any{}
		u["usage"] = usage(res)
		if send(u) != nil {
			return
		}
	}
	send("[DONE]")
}

func (s *Server) handleOpenAIModels(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	data := make([]map[string]any, 0, len(s.pulled))
	for _, p := range s.pulled {
		data = append(data, map[string]any{"id": p.name, "object": "model", "created": p.modified.Unix(), "owned_by": "library"})
	}
	s.mu.Unlock()
	slices.SortFunc(data, func(a, b map[string]any) int { return strings.Compare(a["id"].(string), b["id"].(string)) })
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}
