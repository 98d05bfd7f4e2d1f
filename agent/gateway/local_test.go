package gateway_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/gateway"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

func openAIClient(n *node, token string) openai.Client {
	return openai.NewClient(option.WithBaseURL(n.url+"/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0))
}

func userChat(model, prompt string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}
}

// TestOpenAIClientAgainstOllama drives a local Ollama placement with the openai-go client,
// streaming and not, and checks what a client relies on: content, finish reason, usage,
// created in seconds, [DONE].
func TestOpenAIClientAgainstOllama(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, nil)
	p := place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	client := openAIClient(n, adminToken)
	ctx := t.Context()

	before := time.Now().Unix()
	whole, err := client.Chat.Completions.New(ctx, userChat("llama", "Tell me about the mesh."))
	require.NoError(t, err)
	require.Len(t, whole.Choices, 1)
	assert.NotEmpty(t, whole.Choices[0].Message.Content)
	assert.Equal(t, "assistant", string(whole.Choices[0].Message.Role))
	assert.Contains(t, []string{"stop", "length"}, whole.Choices[0].FinishReason)
	assert.Equal(t, "llama", whole.Model)
	assert.Positive(t, whole.Usage.PromptTokens)
	assert.Positive(t, whole.Usage.CompletionTokens)
	assert.Equal(t, whole.Usage.PromptTokens+whole.Usage.CompletionTokens, whole.Usage.TotalTokens)
	assert.InDelta(t, before, whole.Created, 5, "created is in seconds")

	params := userChat("llama", "Tell me about the mesh.")
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		c := stream.Current()
		acc.AddChunk(c)
		chunks++
		assert.InDelta(t, before, c.Created, 5, "chunk created is in seconds")
		assert.Equal(t, "chat.completion.chunk", string(c.Object))
	}
	require.NoError(t, stream.Err())
	require.Greater(t, chunks, 2, "one chunk per token, not one blob")
	assert.Equal(t, whole.Choices[0].Message.Content, acc.Choices[0].Message.Content, "the same seedless prompt answers the same")
	assert.Equal(t, whole.Choices[0].FinishReason, acc.Choices[0].FinishReason)
	assert.Equal(t, whole.Usage.CompletionTokens, acc.Usage.CompletionTokens)
	assert.Positive(t, acc.Usage.PromptTokens)

	// The speed measured while serving is the placement's rolling figure.
	got, err := n.a.Get(api.Principal{Admin: true}, p.ID)
	require.NoError(t, err)
	assert.Positive(t, got.TTFTMillis)
	assert.False(t, got.LastUsed.IsZero())

	// And in the metrics.
	assert.Equal(t, 2.0, metricSum(t, n, "llmkube_gateway_requests_total", "llama"))
	assert.Equal(t, 2.0, metricSum(t, n, "llmkube_gateway_ttft_seconds", "llama"), "TTFT observations")
	assert.Equal(t, 2.0, metricSum(t, n, "llmkube_gateway_request_duration_seconds", "llama"))
	assert.Equal(t, float64(2*whole.Usage.CompletionTokens+0), metricSum(t, n, "llmkube_gateway_tokens_total", "completion"))
}

// TestOpenAIStreamingIsNotBuffered: with a paced engine, chunks reach the client one by one
// as the engine makes them, not all at the end.
func TestOpenAIStreamingIsNotBuffered(t *testing.T) {
	sim := ollamaSim(t, func(c *ollamasim.Config) { c.TokensPerSec = 50 }, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, nil)
	place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	client := openAIClient(n, adminToken)
	stream := client.Chat.Completions.NewStreaming(t.Context(), userChat("llama", "pace me"))
	var arrivals []time.Time
	for stream.Next() {
		if len(stream.Current().Choices) > 0 && stream.Current().Choices[0].Delta.Content != "" {
			arrivals = append(arrivals, time.Now())
		}
	}
	require.NoError(t, stream.Err())
	require.GreaterOrEqual(t, len(arrivals), 8)
	spread := arrivals[len(arrivals)-1].Sub(arrivals[0])
	// 50 tokens/s: at least 8 tokens take 140 ms from first to last; a buffered answer arrives at once.
	assert.Greater(t, spread, 100*time.Millisecond, "tokens arrived together: something buffers")
}

func TestOpenAIErrors(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, func(c *gateway.Config) { c.MaxBody = 64 << 10 })
	place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", Namespace: "team-a", Context: 1024})
	teamA, teamB := nsToken(t, "team-a"), nsToken(t, "team-b")
	url := n.url + "/v1/chat/completions"

	cases := []struct {
		name, token, body string
		status            int
		code              string
	}{
		{"no token", "", chatBody("llama", "hi", false, ""), 401, "invalid_api_key"},
		{"wrong token", "llmk_wrong", chatBody("llama", "hi", false, ""), 401, "invalid_api_key"},
		{"malformed JSON", teamA, `{"model":"llama","messages":[`, 400, "invalid_request"},
		{"trailing data", teamA, chatBody("llama", "hi", false, "") + "{}", 400, "invalid_request"},
		{"empty body", teamA, "", 400, "invalid_request"},
		{"no model", teamA, `{"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request"},
		{"no messages", teamA, `{"model":"llama","messages":[]}`, 400, "invalid_request"},
		{"two choices", teamA, chatBody("llama", "hi", false, `"n":2`), 400, "invalid_request"},
		{"bad role", teamA, `{"model":"llama","messages":[{"role":"wizard","content":"hi"}]}`, 400, "invalid_request"},
		{"image part", teamA, `{"model":"llama","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "invalid_request"},
		{"bad temperature", teamA, chatBody("llama", "hi", false, `"temperature":7`), 400, "invalid_request"},
		{"unknown model", teamA, chatBody("nothing", "hi", false, ""), 404, "model_not_found"},
		{"wrong namespace", teamB, chatBody("llama", "hi", false, ""), 404, "model_not_found"},
		{"oversized body", teamA, chatBody("llama", strings.Repeat("x", 70<<10), false, ""), 413, "request_too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, b := call(t, "POST", url, c.token, c.body)
			require.Equal(t, c.status, resp.StatusCode, "body %s", b)
			code, typ, msg := oaErr(t, b)
			assert.Equal(t, c.code, code)
			assert.NotEmpty(t, msg)
			assert.NotEmpty(t, typ)
			if c.status == 401 {
				assert.Equal(t, "authentication_error", typ)
			}
		})
	}
	// The same errors through the client library: typed, with the status.
	cb := openAIClient(n, teamB)
	_, err := cb.Chat.Completions.New(t.Context(), userChat("llama", "hi"))
	var oe *openai.Error
	require.True(t, errors.As(err, &oe), "%v", err)
	assert.Equal(t, http.StatusNotFound, oe.StatusCode)
	assert.Equal(t, "model_not_found", oe.Code)

	// Every refusal happened before the engine: it generated nothing.
	assert.Zero(t, sim.Stats().Generations)
	// And the agent still serves.
	ca := openAIClient(n, teamA)
	_, err = ca.Chat.Completions.New(t.Context(), userChat("llama", "hi"))
	require.NoError(t, err)

	assert.Equal(t, 3.0, metricSum(t, n, "llmkube_gateway_errors_total", "NotFound"), "errors counted by code: two requests and the client library's")
}

func TestModelsListing(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b", "qwen2.5:0.5b")
	n := ollamaNode(t, "node-a", sim, nil)
	place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", Namespace: "team-a"})
	place(t, n, api.PlacementRequest{Source: "ollama://qwen2.5:0.5b", Name: "qwen", Namespace: "team-b"})

	ids := func(token string) []string {
		c := openAIClient(n, token)
		page, err := c.Models.List(t.Context())
		require.NoError(t, err)
		var out []string
		for _, m := range page.Data {
			out = append(out, m.ID)
			assert.Equal(t, "node-a", m.OwnedBy)
			assert.Positive(t, m.Created)
		}
		return out
	}
	assert.Equal(t, []string{"team-a/llama", "team-b/qwen"}, ids(adminToken), "the admin sees each namespace's models under their namespace")
	assert.Equal(t, []string{"llama"}, ids(nsToken(t, "team-a")))
	assert.Equal(t, []string{"qwen"}, ids(nsToken(t, "team-b")))
	assert.Empty(t, ids(nsToken(t, "team-c")))

	resp, b := call(t, "GET", n.url+"/v1/models", "", "")
	assert.Equal(t, 401, resp.StatusCode, "%s", b)

	// One model by its id, with openai-go; another namespace's is as absent as none.
	ca := openAIClient(n, nsToken(t, "team-a"))
	m, err := ca.Models.Get(t.Context(), "llama")
	require.NoError(t, err)
	assert.Equal(t, "llama", m.ID)
	assert.Equal(t, "node-a", m.OwnedBy)
	_, err = ca.Models.Get(t.Context(), "qwen")
	var oe *openai.Error
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, 404, oe.StatusCode)
	assert.Equal(t, "model_not_found", oe.Code)
	resp, b = call(t, "GET", n.url+"/v1/models/team-a/llama:latest", adminToken, "")
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"id":"team-a/llama"`)
	resp, b = call(t, "GET", n.url+"/v1/models/llama", adminToken, "")
	assert.Equal(t, 404, resp.StatusCode, "a bare name is the default namespace's: %s", b)

	// A route the gateway does not have is a 404 in OpenAI's error shape, with its type.
	resp, b = call(t, "GET", n.url+"/v1/nothing", "", "")
	require.Equal(t, 404, resp.StatusCode, "%s", b)
	code, typ, msg := oaErr(t, b)
	assert.Equal(t, "unknown_url", code)
	assert.Equal(t, "invalid_request_error", typ)
	assert.Contains(t, msg, "GET /v1/nothing")
	// The agent's own routes under /v1/ are still there.
	resp, b = call(t, "GET", n.url+"/v1/host", adminToken, "")
	assert.Equal(t, 200, resp.StatusCode, "%s", b)
}

func TestUnknownModelNamesNeverBecomeMetricLabels(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, nil)
	place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	for i := range 20 {
		resp, _ := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("model-"+strings.Repeat("x", i), "hi", false, ""))
		require.Equal(t, 404, resp.StatusCode)
	}
	resp, _ := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("llama", "hi", false, ""))
	require.Equal(t, 200, resp.StatusCode)
	found := 0
	for _, f := range families(t, n) {
		if !strings.HasPrefix(f.GetName(), "llmkube_gateway_") {
			continue
		}
		for _, m := range f.GetMetric() {
			found++
			for _, l := range m.GetLabel() {
				assert.False(t, strings.HasPrefix(l.GetValue(), "model-"), "%s{%s=%q}", f.GetName(), l.GetName(), l.GetValue())
			}
		}
	}
	assert.Positive(t, found)
}

func TestOneGatewayPerRegistry(t *testing.T) {
	n := newNode(t, nodeOpts{})
	_, err := gateway.New(gateway.Config{Agent: n.a})
	require.ErrorContains(t, err, "metrics already registered")
	// A registry of its own takes another gateway.
	reg := prometheus.NewRegistry()
	_, err = gateway.New(gateway.Config{Agent: n.a, Registerer: reg})
	require.NoError(t, err)
	taken := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "llmkube_gateway_queued_requests", Help: "Taken."}, []string{"runtime", "engine"})
	assert.ErrorContains(t, reg.Register(taken), "previously registered",
		"the second gateway's metrics are in the registry it was given")
}
