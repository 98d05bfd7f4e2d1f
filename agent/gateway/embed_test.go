package gateway_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/sim/gguf"
)

// TestEmbeddings: /v1/embeddings (floats and base64), /api/embed and /api/embeddings on the
// engines that embed — Ollama, llama-server started with --embeddings (and reached by
// forwarding) — and a clear refusal where they do not.
func TestEmbeddings(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	oll := ollamaNode(t, "oll", sim, nil)
	place(t, oll, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})

	client := openAIClient(oll, adminToken)
	res, err := client.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "llama",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"hello", "mesh"}}})
	require.NoError(t, err)
	require.Len(t, res.Data, 2)
	assert.Equal(t, int64(1), res.Data[1].Index)
	assert.NotEmpty(t, res.Data[0].Embedding)
	assert.NotEqual(t, res.Data[0].Embedding, res.Data[1].Embedding)
	assert.Positive(t, res.Usage.PromptTokens)

	// base64 is the same vector, as little-endian float32s (the OpenAI JS SDK asks for it).
	resp, b := call(t, "POST", oll.url+"/v1/embeddings", adminToken, `{"model":"llama","input":"hello","encoding_format":"base64"}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var b64 struct{ Data []struct{ Embedding string } }
	require.NoError(t, json.Unmarshal(b, &b64))
	assert.Len(t, b64.Data[0].Embedding, (4*len(res.Data[0].Embedding)+2)/3*4)

	resp, b = call(t, "POST", oll.url+"/api/embed", adminToken, `{"model":"llama","input":["hello","mesh"]}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var ol struct {
		Model      string
		Embeddings [][]float64
	}
	require.NoError(t, json.Unmarshal(b, &ol))
	require.Len(t, ol.Embeddings, 2)
	assert.InDelta(t, res.Data[0].Embedding[0], ol.Embeddings[0][0], 1e-6)
	resp, b = call(t, "POST", oll.url+"/api/embeddings", adminToken, `{"model":"llama","prompt":"hello"}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"embedding":[`)

	for _, body := range []string{`{"model":"llama","input":[1,2,3]}`, `{"model":"llama"}`, `{"model":"llama","input":"x","dimensions":8}`} {
		resp, b = call(t, "POST", oll.url+"/v1/embeddings", adminToken, body)
		assert.Equal(t, 400, resp.StatusCode, "%s: %s", body, b)
	}

	// llama-server embeds when placed with --embeddings, and says how when not.
	bin := llamaServerSim(t)
	spec, _ := gguf.Preset("sim-tiny")
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, gguf.Write(model, spec))
	d, err := llamaserver.New(llamaserver.Config{Binary: bin, LogDir: t.TempDir(), ModelsDir: t.TempDir(),
		StopGrace: 5 * time.Second, HealthTimeout: 30 * time.Second, Env: []string{"LLAMA_SIM_LOAD_DELAY=0s"}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.StopAll(context.Background()) })
	ls := newNode(t, nodeOpts{name: "ls", drivers: []engines.Driver{d}})
	place(t, ls, api.PlacementRequest{Source: model, Name: "embedder", Args: []string{"--embeddings", "--pooling", "mean"}})
	place(t, ls, api.PlacementRequest{Source: model, Name: "chatter"})
	join(t, oll, ls)
	resp, b = call(t, "POST", oll.url+"/v1/embeddings", adminToken, `{"model":"embedder","input":["a","b"]}`)
	require.Equal(t, 200, resp.StatusCode, "forwarded: %s", b)
	assert.Contains(t, string(b), `"index":1`)
	resp, b = call(t, "POST", oll.url+"/api/embed", adminToken, `{"model":"chatter","input":"a"}`)
	require.Equal(t, 400, resp.StatusCode, "%s", b)
	var e struct{ Error string }
	require.NoError(t, json.Unmarshal(b, &e))
	assert.Contains(t, e.Error, "--embeddings")

	t.Run("hailo-ollama cannot embed", func(t *testing.T) {
		n, _ := hailoSetup(t, nil, nil)
		resp, b := call(t, "POST", n.url+"/v1/embeddings", adminToken, `{"model":"qwen2:1.5b","input":"a"}`)
		require.Equal(t, 400, resp.StatusCode, "%s", b)
		_, _, msg := oaErr(t, b)
		assert.Contains(t, msg, "cannot embed")
	})
}
