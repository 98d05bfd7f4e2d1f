package gateway_test

import (
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// TestCompletions: OpenAI's legacy /v1/completions (with openai-go, streaming and not) and
// Ollama's raw generate continue a prompt as it is, on llama-server and Ollama; hailo-ollama
// refuses raw completions clearly.
func TestCompletions(t *testing.T) {
	llama := llamaServerNode(t, "box")
	sim := ollamaSim(t, nil, "llama3.2:1b")
	oll := ollamaNode(t, "node-o", sim, nil)
	place(t, oll, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "tiny"})
	for _, n := range []*node{llama, oll} {
		t.Run(n.name, func(t *testing.T) {
			client := openAIClient(n, adminToken)
			params := openai.CompletionNewParams{Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
				MaxTokens: openai.Int(5), Seed: openai.Int(3)}
			whole, err := client.Completions.New(t.Context(), params)
			require.NoError(t, err)
			assert.Equal(t, "text_completion", string(whole.Object))
			require.Len(t, whole.Choices, 1)
			assert.NotEmpty(t, whole.Choices[0].Text)
			assert.Equal(t, "length", string(whole.Choices[0].FinishReason))
			assert.Equal(t, int64(5), whole.Usage.CompletionTokens)

			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := client.Completions.NewStreaming(t.Context(), params)
			var text string
			var usage int64
			for stream.Next() {
				c := stream.Current()
				for _, ch := range c.Choices {
					text += ch.Text
				}
				usage = max(usage, c.Usage.CompletionTokens)
			}
			require.NoError(t, stream.Err())
			assert.Equal(t, whole.Choices[0].Text, text)
			assert.Equal(t, int64(5), usage)

			resp, b := call(t, "POST", n.url+"/api/generate", adminToken, `{"model":"tiny","prompt":"Once upon a time","raw":true,"stream":false,"options":{"num_predict":3}}`)
			require.Equal(t, 200, resp.StatusCode, "%s", b)
			var g struct {
				Response   string
				DoneReason string `json:"done_reason"`
			}
			require.NoError(t, json.Unmarshal(b, &g))
			assert.NotEmpty(t, g.Response)
			assert.Equal(t, "length", g.DoneReason)
		})
	}
	for _, body := range []string{`{"model":"tiny","prompt":["a","b"]}`, `{"model":"tiny","prompt":"a","echo":true}`, `{"model":"tiny"}`} {
		resp, b := call(t, "POST", oll.url+"/v1/completions", adminToken, body)
		assert.Equal(t, 400, resp.StatusCode, "%s: %s", body, b)
	}
	t.Run("hailo-ollama refuses", func(t *testing.T) {
		n, _ := hailoSetup(t, nil, nil)
		resp, b := call(t, "POST", n.url+"/v1/completions", adminToken, `{"model":"qwen2:1.5b","prompt":"Once"}`)
		require.Equal(t, 400, resp.StatusCode, "%s", b)
		_, _, msg := oaErr(t, b)
		assert.Contains(t, msg, "raw completions")
	})
}
