package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// TestOllamaDialect speaks Ollama's protocol to the gateway as Ollama clients do: NDJSON chat
// and generate, streaming by default, stream:false, load requests, listings, errors.
func TestOllamaDialect(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, nil)
	p := place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})

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
		resp, b := call(t, "GET", n.url+"/api/tags", adminToken, "")
		require.Equal(t, 200, resp.StatusCode)
		var tags struct {
			Models []struct {
				Name, Model, Digest string
				Size                int64
				ModifiedAt          time.Time `json:"modified_at"`
				Details             struct{ Format string }
			}
		}
		require.NoError(t, json.Unmarshal(b, &tags))
		require.Len(t, tags.Models, 1)
		m := tags.Models[0]
		assert.Equal(t, "llama", m.Name)
		assert.Len(t, m.Digest, 64)
		assert.Positive(t, m.Size)
		assert.Equal(t, "gguf", m.Details.Format)
		assert.WithinDuration(t, p.CreatedAt, m.ModifiedAt, time.Second)

		resp, b = call(t, "GET", n.url+"/api/ps", adminToken, "")
		require.Equal(t, 200, resp.StatusCode)
		var ps struct {
			Models []struct {
				Name          string
				Size          int64
				ContextLength int `json:"context_length"`
			}
		}
		require.NoError(t, json.Unmarshal(b, &ps))
		require.Len(t, ps.Models, 1)
		assert.Equal(t, p.Context, ps.Models[0].ContextLength)
		assert.Equal(t, p.Memory.Bytes, ps.Models[0].Size)

		resp, b = call(t, "GET", n.url+"/api/version", adminToken, "")
		require.Equal(t, 200, resp.StatusCode)
		assert.JSONEq(t, `{"version":"`+api.Version+`"}`, string(b))

		resp, b = call(t, "GET", n.url+"/api/tags", nsToken(t, "other"), "")
		require.Equal(t, 200, resp.StatusCode)
		assert.JSONEq(t, `{"models":[]}`, string(b))
	})

	t.Run("errors in Ollama's shape", func(t *testing.T) {
		for _, c := range []struct {
			body   string
			status int
		}{
			{`{"model":"llama","messages":[{"role":"user","content":"hi"}`, 400},
			{`{"model":"nothing","messages":[{"role":"user","content":"hi"}]}`, 404},
			{`{"model":"llama","messages":[{"role":"user","content":"hi","images":["aGk="]}]}`, 400},
			{`{"model":"llama","messages":[{"role":"user","content":"hi"}],"format":"json"}`, 400},
			{`{"model":"llama","messages":[{"role":"user","content":"hi"}],"options":{"temperature":-1}}`, 400},
		} {
			resp, b := call(t, "POST", n.url+"/api/chat", adminToken, c.body)
			require.Equal(t, c.status, resp.StatusCode, "%s → %s", c.body, b)
			var e struct{ Error string }
			require.NoError(t, json.Unmarshal(b, &e), "%s", b)
			assert.NotEmpty(t, e.Error)
		}
	})
}
