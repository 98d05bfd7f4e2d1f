package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/sim/gguf"
	"github.com/llmkube/mesh/sim/simtest"
)

var (
	simBinOnce sync.Once
	simBin     string
	simBinErr  error
)

// llamaServerSim builds cmd/llama-server-sim once per test binary, as "llama-server", so the
// driver launches it exactly as it launches the real one.
func llamaServerSim(t testing.TB) string {
	t.Helper()
	simBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gateway-llama-server-")
		if err != nil {
			simBinErr = err
			return
		}
		simBin, simBinErr = simtest.LlamaServer(dir)
	})
	require.NoError(t, simBinErr, "building the llama-server simulator")
	return simBin
}

// TestLlamaServer serves a GGUF on a llama-server process through the gateway, with openai-go
// and an Ollama-shaped client.
func TestLlamaServer(t *testing.T) {
	bin := llamaServerSim(t)
	spec, ok := gguf.Preset("sim-tiny")
	require.True(t, ok)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, gguf.Write(model, spec))
	d, err := llamaserver.New(llamaserver.Config{Binary: bin, LogDir: t.TempDir(), ModelsDir: t.TempDir(),
		StopGrace: 5 * time.Second, HealthTimeout: 30 * time.Second, Env: []string{"LLAMA_SIM_LOAD_DELAY=0s"}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.StopAll(context.Background()) })
	n := newNode(t, nodeOpts{name: "box", drivers: []engines.Driver{d}})
	place(t, n, api.PlacementRequest{Source: model, Name: "tiny", Context: 512})

	client := openAIClient(n, adminToken)
	whole, err := client.Chat.Completions.New(t.Context(), userChat("tiny", "Hello, llama."))
	require.NoError(t, err)
	assert.NotEmpty(t, whole.Choices[0].Message.Content)
	assert.Positive(t, whole.Usage.PromptTokens, "llama-server's own count")

	params := userChat("tiny", "Hello, llama.")
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, whole.Choices[0].Message.Content, acc.Choices[0].Message.Content)
	assert.Equal(t, whole.Usage.TotalTokens, acc.Usage.TotalTokens)

	resp, b := call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"tiny","messages":[{"role":"user","content":"Hello, llama."}]}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	lines := ndjson(t, b)
	assert.Equal(t, true, lines[len(lines)-1]["done"])

	// /api/tags carries what the GGUF header says the model is.
	resp, b = call(t, "GET", n.url+"/api/tags", adminToken, "")
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var tags struct {
		Models []struct {
			Size    int64
			Details struct {
				Format, Family    string
				ParameterSize     string `json:"parameter_size"`
				QuantizationLevel string `json:"quantization_level"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(b, &tags))
	require.Len(t, tags.Models, 1)
	fi, err := os.Stat(model)
	require.NoError(t, err)
	assert.Equal(t, fi.Size(), tags.Models[0].Size)
	assert.Equal(t, "gguf", tags.Models[0].Details.Format)
	assert.Equal(t, "llama", tags.Models[0].Details.Family)
	assert.Equal(t, "Q8_0", tags.Models[0].Details.QuantizationLevel)
	assert.Regexp(t, `^[0-9.]+[KMB]$`, tags.Models[0].Details.ParameterSize)

	// A prompt longer than the context (512) is the engine's to refuse, by its own count; the
	// client gets a context-length error in its dialect, streaming or not.
	long := strings.Repeat("word ", 600)
	for _, stream := range []bool{false, true} {
		resp, b = call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("tiny", long, stream, ""))
		require.Equal(t, 400, resp.StatusCode, "%s", b)
		code, typ, msg := oaErr(t, b)
		assert.Equal(t, "context_length_exceeded", code)
		assert.Equal(t, "invalid_request_error", typ)
		assert.Contains(t, msg, "longer than the model's context")
		assert.Contains(t, msg, "512 tokens", "the engine's own figures")
	}
	resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"tiny","messages":[{"role":"user","content":"`+long+`"}]}`)
	require.Equal(t, 400, resp.StatusCode, "%s", b)
	var e struct{ Error string }
	require.NoError(t, json.Unmarshal(b, &e))
	assert.Contains(t, e.Error, "longer than the model's context")
}

// TestContextRefusalFailsOverToALargerContext: a replica whose engine finds the prompt too long
// hands it to a replica with a larger context, never to one as small.
func TestContextRefusalFailsOverToALargerContext(t *testing.T) {
	bin := llamaServerSim(t)
	spec, ok := gguf.Preset("sim-tiny")
	require.True(t, ok)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, gguf.Write(model, spec))
	d, err := llamaserver.New(llamaserver.Config{Binary: bin, LogDir: t.TempDir(), ModelsDir: t.TempDir(),
		StopGrace: 5 * time.Second, HealthTimeout: 30 * time.Second, Env: []string{"LLAMA_SIM_LOAD_DELAY=0s"}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.StopAll(context.Background()) })
	small := newNode(t, nodeOpts{name: "small", drivers: []engines.Driver{d}})
	large := newNode(t, nodeOpts{name: "large", drivers: []engines.Driver{d}})
	place(t, small, api.PlacementRequest{Source: model, Name: "tiny", Context: 256})
	place(t, large, api.PlacementRequest{Source: model, Name: "tiny", Context: 1024})
	join(t, small, large)
	n := small // its own replica is tried first: it saves a hop
	resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("tiny", strings.Repeat("word ", 400), false, `"max_tokens":4`))
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	assert.Equal(t, 1.0, metricSum(t, large, "llmkube_gateway_requests_total", ""), "served by the larger context")
	resp, b = call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("tiny", strings.Repeat("word ", 1000), false, ""))
	require.Equal(t, 400, resp.StatusCode, "%s", b)
	code, _, msg := oaErr(t, b)
	assert.Equal(t, "context_length_exceeded", code)
	assert.Contains(t, msg, "1024 tokens", "the largest context's refusal")
}
