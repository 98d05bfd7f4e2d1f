package gateway_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/gateway"
	hailosim "github.com/llmkube/mesh/sim/hailo"
)

// hailoSetup is a Pi 5 node serving qwen2:1.5b on a simulated hailo-ollama.
func hailoSetup(t *testing.T, tune func(*hailosim.Config), gw func(*gateway.Config)) (*node, *hailosim.Server) {
	t.Helper()
	var dataDir string
	sim := hailoSim(t, func(c *hailosim.Config) {
		dataDir = c.DataDir
		if tune != nil {
			tune(c)
		}
	}, "qwen2:1.5b")
	n := hailoNode(t, "pi", sim, dataDir, gw)
	place(t, n, api.PlacementRequest{Source: "hailo://qwen2:1.5b", Name: "qwen2:1.5b"})
	return n, sim
}

// TestHailoStreamsAsSSE: hailo-ollama cannot stream /v1/chat/completions; through the gateway
// an OpenAI client streams anyway (the driver reads /api/chat), with created in seconds.
func TestHailoStreamsAsSSE(t *testing.T) {
	n, sim := hailoSetup(t, nil, nil)
	client := openAIClient(n, adminToken)
	before := time.Now().Unix()
	params := userChat("qwen2:1.5b", "Hello from the Pi.")
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		c := stream.Current()
		acc.AddChunk(c)
		chunks++
		assert.InDelta(t, before, c.Created, 5, "created in seconds, not hailo-ollama's nanoseconds")
	}
	require.NoError(t, stream.Err())
	assert.Greater(t, chunks, 3)
	assert.NotEmpty(t, acc.Choices[0].Message.Content)
	assert.Positive(t, acc.Usage.CompletionTokens)
	assert.Positive(t, acc.Usage.PromptTokens, "estimated when hailo-ollama gives no count")
	assert.Zero(t, sim.Stats().Requests["POST /v1/chat/completions"], "never its non-streaming route")
	assert.Positive(t, sim.Stats().Requests["POST /api/chat"])

	whole, err := client.Chat.Completions.New(t.Context(), userChat("qwen2:1.5b", "Hello from the Pi."))
	require.NoError(t, err)
	assert.InDelta(t, before, whole.Created, 5)
	assert.Equal(t, acc.Choices[0].Message.Content, whole.Choices[0].Message.Content)
}

// TestHailoErrorBodiesBecomeStatuses: hailo-ollama 5.1 answers "model not found" with HTTP 200
// and an error body; the client gets a real 404.
func TestHailoErrorBodiesBecomeStatuses(t *testing.T) {
	n, sim := hailoSetup(t, nil, nil)
	// The model disappears behind the agent's back (someone ran `hailo-ollama rm`).
	req, err := http.NewRequest("DELETE", sim.URL()+"/api/delete", strings.NewReader(`{"model":"qwen2:1.5b"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("qwen2:1.5b", "hi", true, ""))
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
	code, _, msg := oaErr(t, b)
	assert.Equal(t, "model_not_found", code)
	assert.Contains(t, msg, "not found")

	resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"qwen2:1.5b","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"error":`)
}

// TestHailoPromptOverContext: every zoo HEF has a 2048-token context, and hailo-ollama answers
// a longer prompt with a bare 500; the client gets a context-length error that says so.
func TestHailoPromptOverContext(t *testing.T) {
	n, _ := hailoSetup(t, nil, nil)
	resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("qwen2:1.5b", strings.Repeat("long ", 2000), false, ""))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
	code, _, msg := oaErr(t, b)
	assert.Equal(t, "context_length_exceeded", code)
	assert.Contains(t, msg, "2048-token context")
	// A prompt that fits is served.
	resp, b = call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("qwen2:1.5b", strings.Repeat("long ", 300), false, ""))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
}

// TestHailoQueueFullIs429: hailo-ollama serves one request at a time; with one running and
// QueueDepth waiting, the next is refused with 429 and Retry-After, and the waiting one is
// served once the device is free.
func TestHailoQueueFullIs429(t *testing.T) {
	n, _ := hailoSetup(t, func(c *hailosim.Config) { c.TokensPerSecond = 10 }, func(c *gateway.Config) { c.QueueDepth = 1 })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// The first request holds the device (at 10 tokens/s an answer takes a second or more):
	// wait for its first token.
	running := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		req, _ := http.NewRequestWithContext(ctx, "POST", n.url+"/v1/chat/completions", strings.NewReader(chatBody("qwen2:1.5b", "first", true, "")))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if !assert.NoError(t, err) {
			close(running)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Scan()
		close(running)
		for sc.Scan() {
		}
	}()
	<-running
	// The second waits in the queue.
	secondStatus := make(chan int, 1)
	go func() {
		defer wg.Done()
		resp, _ := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("qwen2:1.5b", "second", false, `"max_tokens":3`))
		secondStatus <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return metricSum(t, n, "llmkube_gateway_queued_requests", "") == 1 }, 5*time.Second, time.Millisecond)
	// The third finds the queue full.
	resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("qwen2:1.5b", "third", false, ""))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	assert.GreaterOrEqual(t, ra, 1)
	code, typ, _ := oaErr(t, b)
	assert.Equal(t, "rate_limit_exceeded", code)
	assert.Equal(t, "requests", typ)
	// Ollama clients get their shape.
	resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"qwen2:1.5b","messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))

	cancel() // the first client leaves: the device frees at once
	assert.Equal(t, http.StatusOK, <-secondStatus, "the queued request is served when the device frees")
	wg.Wait()
	assert.Equal(t, 2.0, metricSum(t, n, "llmkube_gateway_errors_total", "TooBusy"))
}

// TestHailoReplacedModelSaysSo: a model a swap took off the Hailo-10H is refused with what
// replaced it and what to do, not as a model the token's namespace lacks.
func TestHailoReplacedModelSaysSo(t *testing.T) {
	n, _ := hailoSetup(t, nil, nil)
	next := place(t, n, api.PlacementRequest{Source: "hailo://llama3.2:3b"})
	resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("qwen2:1.5b", "hi", false, ""))
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
	code, _, msg := oaErr(t, b)
	assert.Equal(t, "model_not_found", code)
	assert.Contains(t, msg, `model "qwen2:1.5b" is not served: it was evicted on pi: replaced by llama3.2:3b (`+next.ID)
	assert.Contains(t, msg, "place it again")
	assert.NotContains(t, msg, "namespace")
}
