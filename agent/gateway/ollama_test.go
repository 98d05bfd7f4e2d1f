package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/version"
)

// TestOllamaDialect speaks Ollama's protocol to the gateway as Ollama clients do: NDJSON chat
// and generate, streaming by default, stream:false, load requests, listings, errors.
func TestOllamaDialect(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, nil)
	p := place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})

	t.Run("GET / says a server is there, to anyone, and nothing more", func(t *testing.T) {
		resp, b := call(t, "GET", n.url+"/", "", "")
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "Ollama is running", string(b))
		resp, _ = call(t, "GET", n.url+"/v1/host", "", "")
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the rest still needs a token")
		resp, _ = call(t, "GET", n.url+"/nothing-here", "", "")
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, "only / itself")
	})

	t.Run("chat streams NDJSON by default", func(t *testing.T) {
		resp, b := call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"llama","messages":[{"role":"user","content":"Hello, mesh."}]}`)
		require.Equal(t, 200, resp.StatusCode, "%s", b)
		assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
		lines := ndjson(t, b)
		require.Greater(t, len(lines), 2)
		var text strings.Builder
		for _, l := range lines[:len(lines)-1] {
			assert.Equal(t, "llama", l["model"])
			assert.Equal(t, false, l["done"])
			msg := l["message"].(map[string]any)
			assert.Equal(t, "assistant", msg["role"])
			text.WriteString(msg["content"].(string))
			_, err := time.Parse(time.RFC3339Nano, l["created_at"].(string))
			require.NoError(t, err)
		}
		last := lines[len(lines)-1]
		assert.Equal(t, true, last["done"])
		assert.Contains(t, []any{"stop", "length"}, last["done_reason"])
		assert.EqualValues(t, len(lines)-1, last["eval_count"])
		assert.Positive(t, last["prompt_eval_count"])
		assert.Positive(t, last["total_duration"])
		assert.NotEmpty(t, text.String())

		// stream:false is one object with the whole answer.
		resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"llama","messages":[{"role":"user","content":"Hello, mesh."}],"stream":false}`)
		require.Equal(t, 200, resp.StatusCode, "%s", b)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var whole struct {
			Message    struct{ Role, Content string }
			Done       bool
			DoneReason string `json:"done_reason"`
			EvalCount  int    `json:"eval_count"`
		}
		require.NoError(t, json.Unmarshal(b, &whole))
		assert.True(t, whole.Done)
		assert.Equal(t, text.String(), whole.Message.Content)
		assert.Equal(t, len(lines)-1, whole.EvalCount)
	})

	t.Run("generate", func(t *testing.T) {
		resp, b := call(t, "POST", n.url+"/api/generate", adminToken, `{"model":"llama","prompt":"Why is the sky blue?","options":{"num_predict":5}}`)
		require.Equal(t, 200, resp.StatusCode, "%s", b)
		lines := ndjson(t, b)
		require.Len(t, lines, 6, "five tokens and the last line")
		assert.NotEmpty(t, lines[0]["response"])
		assert.Equal(t, "length", lines[5]["done_reason"])

		resp, b = call(t, "POST", n.url+"/api/generate", adminToken, `{"model":"llama","prompt":"Why is the sky blue?","stream":false,"system":"Be brief."}`)
		require.Equal(t, 200, resp.StatusCode, "%s", b)
		var whole map[string]any
		require.NoError(t, json.Unmarshal(b, &whole))
		assert.NotEmpty(t, whole["response"])
		assert.Equal(t, true, whole["done"])
	})

	t.Run("load requests are answered without the engine", func(t *testing.T) {
		before := sim.Stats().Generations
		for _, c := range []struct{ path, body string }{
			{"/api/generate", `{"model":"llama"}`},
			{"/api/chat", `{"model":"llama","messages":[]}`},
		} {
			resp, b := call(t, "POST", n.url+c.path, adminToken, c.body)
			require.Equal(t, 200, resp.StatusCode, "%s", b)
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			assert.Equal(t, "load", m["done_reason"])
			assert.Equal(t, true, m["done"])
		}
		assert.Equal(t, before, sim.Stats().Generations)
		resp, _ := call(t, "POST", n.url+"/api/generate", adminToken, `{"model":"absent"}`)
		assert.Equal(t, 404, resp.StatusCode, "a load of an unknown model")
	})

	t.Run("listings", func(t *testing.T) {
		type details struct {
			Format, Family    string
			Families          []string
			ParameterSize     string `json:"parameter_size"`
			QuantizationLevel string `json:"quantization_level"`
		}
		// What the daemon itself lists is what the gateway must pass on.
		engine := struct {
			Models []struct {
				Name    string
				Size    int64
				Details details
			}
		}{}
		resp, b := call(t, "GET", sim.URL()+"/api/tags", "", "")
		require.Equal(t, 200, resp.StatusCode)
		require.NoError(t, json.Unmarshal(b, &engine))
		require.Len(t, engine.Models, 1)
		want := engine.Models[0].Details
		require.Equal(t, "llama", want.Family, "the simulator's details")

		resp, b = call(t, "GET", n.url+"/api/tags", adminToken, "")
		require.Equal(t, 200, resp.StatusCode)
		var tags struct {
			Models []struct {
				Name, Model, Digest string
				Size                int64
				ModifiedAt          time.Time `json:"modified_at"`
				Details             details
			}
		}
		require.NoError(t, json.Unmarshal(b, &tags))
		require.Len(t, tags.Models, 1)
		m := tags.Models[0]
		assert.Equal(t, "llama", m.Name)
		assert.Len(t, m.Digest, 64)
		assert.Equal(t, engine.Models[0].Size, m.Size, "the size the engine lists")
		assert.Equal(t, want, m.Details)
		assert.Equal(t, "1.2B", m.Details.ParameterSize)
		assert.Equal(t, "Q8_0", m.Details.QuantizationLevel)
		assert.WithinDuration(t, p.CreatedAt, m.ModifiedAt, time.Second)

		resp, b = call(t, "GET", n.url+"/api/ps", adminToken, "")
		require.Equal(t, 200, resp.StatusCode)
		var ps struct {
			Models []struct {
				Name          string
				Size          int64
				ContextLength int        `json:"context_length"`
				ExpiresAt     *time.Time `json:"expires_at"`
				Details       details
			}
		}
		require.NoError(t, json.Unmarshal(b, &ps))
		require.Len(t, ps.Models, 1)
		assert.Equal(t, p.Context, ps.Models[0].ContextLength)
		assert.Equal(t, p.Memory.Bytes, ps.Models[0].Size)
		assert.Equal(t, want, ps.Models[0].Details)
		require.NotNil(t, ps.Models[0].ExpiresAt, "%s", b)
		assert.Greater(t, time.Until(*ps.Models[0].ExpiresAt), 100*365*24*time.Hour, "a placement stays until deleted")

		resp, b = call(t, "GET", n.url+"/api/version", adminToken, "")
		require.Equal(t, 200, resp.StatusCode)
		assert.JSONEq(t, `{"version":"`+version.Get().Version+`"}`, string(b))
		assert.NotEqual(t, `{"version":"dev"}`, string(b))

		resp, b = call(t, "GET", n.url+"/api/tags", nsToken(t, "other"), "")
		require.Equal(t, 200, resp.StatusCode)
		assert.JSONEq(t, `{"models":[]}`, string(b))
	})

	t.Run("name and name:latest are one model", func(t *testing.T) {
		for _, name := range []string{"llama", "llama:latest"} {
			resp, b := call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"`+name+`","messages":[{"role":"user","content":"hi"}],"stream":false}`)
			require.Equal(t, 200, resp.StatusCode, "%s: %s", name, b)
			var whole struct{ Model string }
			require.NoError(t, json.Unmarshal(b, &whole))
			assert.Equal(t, name, whole.Model, "the answer names the model as asked")
		}
		resp, _ := call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"llama:1b","messages":[{"role":"user","content":"hi"}]}`)
		assert.Equal(t, 404, resp.StatusCode, "another tag is another model")
	})

	t.Run("errors in Ollama's shape", func(t *testing.T) {
		for _, c := range []struct {
			body   string
			status int
		}{
			{`{"model":"llama","messages":[{"role":"user","content":"hi"}`, 400},
			{`{"model":"nothing","messages":[{"role":"user","content":"hi"}]}`, 404},
			{`{"model":"llama","messages":[{"role":"user","content":"hi","images":["not base64!"]}]}`, 400},
			{`{"model":"llama","messages":[{"role":"user","content":"hi"}],"format":"xml"}`, 400},
			{`{"model":"llama","messages":[{"role":"user","content":"hi"}],"options":{"temperature":-1}}`, 400},
		} {
			resp, b := call(t, "POST", n.url+"/api/chat", adminToken, c.body)
			require.Equal(t, c.status, resp.StatusCode, "%s → %s", c.body, b)
			var e struct{ Error string }
			require.NoError(t, json.Unmarshal(b, &e), "%s", b)
			assert.NotEmpty(t, e.Error)
		}
		// A wrong token and a route the gateway does not have: the error is a string too,
		// which the Ollama clients show (an object they show as "[object Object]").
		for _, c := range []struct {
			method, path, token string
			status              int
			says                string
		}{
			{"GET", "/api/tags", "", 401, "missing bearer token"},
			{"GET", "/api/tags", "llmk_wrong", 401, "token refused"},
			{"POST", "/api/chat", nsToken(t, "x") + "tampered", 401, "token refused"},
			{"POST", "/api/nothing", adminToken, 404, "no route POST /api/nothing"},
			{"GET", "/api/nothing", "", 404, "no route GET /api/nothing"},
		} {
			resp, b := call(t, c.method, n.url+c.path, c.token, "")
			require.Equal(t, c.status, resp.StatusCode, "%s %s: %s", c.method, c.path, b)
			var e struct{ Error string }
			require.NoError(t, json.Unmarshal(b, &e), "%s %s: %s", c.method, c.path, b)
			assert.Contains(t, e.Error, c.says)
		}
	})
}
