package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/engines/llamaserver"
)

// TestRealLlamaServer runs the gateway against the real llama-server (enginetest finds it, and
// skips saying why when it is absent) with a tiny random-weight model: openai-go streaming and
// not, the Ollama dialect, the context refused by the engine's own count (a prompt the
// 4-bytes-per-token guess refused is served), the engine's own refusals passed on as the
// client's errors, and the official JS clients.
func TestRealLlamaServer(t *testing.T) {
	bin := enginetest.LlamaServer(t)
	model := enginetest.TinyGGUF(t)
	d, err := llamaserver.New(llamaserver.Config{Binary: bin, LogDir: t.TempDir(), ModelsDir: t.TempDir(),
		StopGrace: 5 * time.Second, HealthTimeout: 2 * time.Minute}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.StopAll(context.Background()) })
	n := newNode(t, nodeOpts{name: "box", drivers: []engines.Driver{d}})
	place(t, n, api.PlacementRequest{Source: model, Name: "tiny", Context: 512})
	client := openAIClient(n, adminToken)

	params := userChat("tiny", "Hello, llama.")
	params.MaxTokens = openai.Int(6)
	whole, err := client.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	assert.NotEmpty(t, whole.Choices[0].Message.Content)
	assert.Positive(t, whole.Usage.PromptTokens, "the engine's own count")
	assert.Equal(t, int64(6), whole.Usage.CompletionTokens)

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	assert.NotEmpty(t, acc.Choices[0].Message.Content)
	assert.Equal(t, "length", acc.Choices[0].FinishReason)
	assert.Equal(t, int64(6), acc.Usage.CompletionTokens)

	// ~3,150 bytes the engine counts at ~300 tokens: the old guess (788 "tokens") refused it.
	fits := strings.Repeat("internationalization ", 150)
	resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("tiny", fits, false, `"max_tokens":2`))
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var usage struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &usage))
	assert.Less(t, usage.Usage.PromptTokens, 512)
	assert.Greater(t, len(fits)/4, 512)
	// Really too long: the engine's refusal, as a context-length error.
	resp, b = call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("tiny", strings.Repeat("internationalization ", 600), false, ""))
	require.Equal(t, 400, resp.StatusCode, "%s", b)
	code, _, msg := oaErr(t, b)
	assert.Equal(t, "context_length_exceeded", code)
	assert.Contains(t, msg, "512")

	// A JSON answer reaches the engine's grammar. The tiny model's chat template has no tokens
	// for the grammar llama-server builds, so the engine refuses, and the client is told so
	// (400, not 502); a model that can answers JSON.
	params = userChat("tiny", "Which city?")
	params.MaxTokens = openai.Int(16)
	params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "c", Schema: map[string]any{"type": "object"}}}}
	js, err := client.Chat.Completions.New(t.Context(), params)
	if err != nil {
		var oe *openai.Error
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, 400, oe.StatusCode, "%v", err)
		assert.Contains(t, oe.Message, "llama-server")
	} else if js.Choices[0].FinishReason == "stop" {
		assert.True(t, json.Valid([]byte(js.Choices[0].Message.Content)), "%q", js.Choices[0].Message.Content)
	}

	// A raw completion, whole and streamed, through the engine's /v1/completions.
	cp := openai.CompletionNewParams{Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(4), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	cw, err := client.Completions.New(t.Context(), cp)
	require.NoError(t, err)
	assert.NotEmpty(t, cw.Choices[0].Text)
	assert.Equal(t, int64(4), cw.Usage.CompletionTokens)
	cs := client.Completions.NewStreaming(t.Context(), cp)
	var ctext string
	for cs.Next() {
		for _, ch := range cs.Current().Choices {
			ctext += ch.Text
		}
	}
	require.NoError(t, cs.Err())
	assert.NotEmpty(t, ctext)

	resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"tiny","messages":[{"role":"user","content":"Hello"}],"options":{"num_predict":4}}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	lines := ndjson(t, b)
	assert.Equal(t, true, lines[len(lines)-1]["done"])
	resp, b = call(t, "GET", n.url+"/api/tags", adminToken, "")
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"family":"llama"`)
	assert.Contains(t, string(b), `"quantization_level":"F16"`)

	// The official JS clients; this model calls no tools.
	t.Run("js clients", func(t *testing.T) { runJSClients(t, n.url, adminToken, "tiny", jsChecks{responses: true}) })
}
