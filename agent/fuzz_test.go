package agent

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmkube/mesh/agent/api"
)

// FuzzPlacementRequest posts arbitrary bodies to POST /v1/placements: every answer must be a
// well-formed JSON error with a known code (or a placement), never a crash or a 500.
func FuzzPlacementRequest(f *testing.F) {
	for _, s := range []string{
		`{"source":"/m/x.gguf"}`, `{"source":"hailo://qwen2:1.5b","runtime":"llama-server"}`,
		`{"source":"ollama://a:b","namespace":"Team"}`, `{"source":"/x.gguf","context":-1}`,
		`{"source":"/x.gguf","priority":"urgent","memory_check":"maybe"}`, `[]`, `null`, `{"source":1}`,
	} {
		f.Add(s)
	}
	a := newBareAgent(f, "x86-nvidia", func(c *Config) {
		c.Namespaces = []string{"default", "team-a"}
		c.Log = slog.New(slog.DiscardHandler) // the fuzz target may not log through f
	})
	secret, _ := api.NewSecret()
	h := NewServer(ServerConfig{Agent: a, Secret: secret}).Handler()
	token := "Bearer " + api.AdminToken(secret)
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/placements", strings.NewReader(body))
		req.Header.Set("Authorization", token)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusCreated {
			return
		}
		var eb api.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error == nil || eb.Error.Code == "" {
			t.Fatalf("status %d body %q: not an error document", rec.Code, rec.Body.String())
		}
		if rec.Code >= 500 && eb.Error.Code != api.CodeEngineUnavailable {
			t.Fatalf("body %q: %d %+v", body, rec.Code, eb.Error)
		}
	})
}
