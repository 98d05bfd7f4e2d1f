package ollama

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	parser "github.com/gpustack/gguf-parser-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/sim/simtext"
)

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func withModels(names ...string) Config {
	cfg := DefaultConfig()
	cfg.Preloaded = names
	return cfg
}

func do(t *testing.T, method, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// call sends a request and decodes the JSON answer into v, returning the status.
func call(t *testing.T, method, url, body string, v any) int {
	t.Helper()
	resp := do(t, method, url, body)
	if v != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v), "%s %s", method, url)
	}
	return resp.StatusCode
}

// ndjsonLines reads every line of an NDJSON body.
func ndjsonLines(t *testing.T, r io.Reader) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

type tagsList struct {
	Models []struct {
		Name    string `json:"name"`
		Model   string `json:"model"`
		Size    int64  `json:"size"`
		Digest  string `json:"digest"`
		Details struct {
			Format            string   `json:"format"`
			Family            string   `json:"family"`
			Families          []string `json:"families"`
			ParameterSize     string   `json:"parameter_size"`
			QuantizationLevel string   `json:"quantization_level"`
		} `json:"details"`
		ModifiedAt time.Time `json:"modified_at"`
	} `json:"models"`
}

func tags(t *testing.T, s *Server) tagsList {
	t.Helper()
	var l tagsList
	require.Equal(t, http.StatusOK, call(t, "GET", s.URL()+"/api/tags", "", &l))
	return l
}

func TestRootVersionAndNoHealth(t *testing.T) {
	s := start(t, DefaultConfig())
	resp := do(t, "GET", s.URL()+"/", "")
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "Ollama is running", string(body))
	assert.Equal(t, http.StatusOK, do(t, "HEAD", s.URL()+"/", "").StatusCode)

	var v map[string]string
	require.Equal(t, http.StatusOK, call(t, "GET", s.URL()+"/api/version", "", &v))
	assert.Equal(t, "0.5.7", v["version"])

	assert.Equal(t, http.StatusNotFound, do(t, "GET", s.URL()+"/health", "").StatusCode, "Ollama has no /health")
	assert.Equal(t, http.StatusNotFound, do(t, "GET", s.URL()+"/metrics", "").StatusCode)
	assert.Equal(t, http.StatusMethodNotAllowed, do(t, "GET", s.URL()+"/api/chat", "").StatusCode)
	assert.Empty(t, tags(t, s).Models, "nothing pulled yet")
}

func TestPullStreamsProgressThenLists(t *testing.T) {
	s := start(t, DefaultConfig())
	resp := do(t, "POST", s.URL()+"/api/pull", `{"model":"qwen2.5:0.5b"}`) // stream defaults to true
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	lines := ndjsonLines(t, resp.Body)

	spec := lookup("qwen2.5:0.5b")
	require.NotNil(t, spec)
	assert.Equal(t, "pulling manifest", lines[0]["status"])
	var statuses []string
	done := map[string]float64{}
	for _, l := range lines {
		st := l["status"].(string)
		statuses = append(statuses, st)
		if d, ok := l["digest"].(string); ok {
			assert.Equal(t, "pulling "+d[7:19], st)
			if c, ok := l["completed"].(float64); ok {
				assert.LessOrEqual(t, c, l["total"].(float64))
				done[d] = c
			}
		}
	}
	for _, b := range spec.blobs() {
		assert.EqualValues(t, b.Size, done[b.Digest], "blob %s completed", b.Digest)
	}
	assert.Equal(t, []string{"verifying sha256 digest", "writing manifest", "success"}, statuses[len(statuses)-3:])

	l := tags(t, s)
	require.Len(t, l.Models, 1)
	m := l.Models[0]
	assert.Equal(t, "qwen2.5:0.5b", m.Name)
	assert.Equal(t, "qwen2.5:0.5b", m.Model)
	assert.Equal(t, spec.totalSize(), m.Size)
	assert.Greater(t, m.Size, int64(397_000_000), "the real model's size, reported not transferred")
	assert.Len(t, m.Digest, 64)
	assert.Equal(t, "qwen2", m.Details.Family)
	assert.Equal(t, "Q4_K_M", m.Details.QuantizationLevel)
	assert.Equal(t, "494.03M", m.Details.ParameterSize)
	assert.Equal(t, "gguf", m.Details.Format)
	assert.WithinDuration(t, time.Now(), m.ModifiedAt, time.Minute)
}

func TestPullNotStreaming(t *testing.T) {
	s := start(t, DefaultConfig())
	var out map[string]any
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/pull", `{"name":"gemma3:1b","stream":false}`, &out))
	assert.Equal(t, map[string]any{"status": "success"}, out)
	assert.Equal(t, "gemma3:1b", tags(t, s).Models[0].Name)
}

func TestPullUnknownModel(t *testing.T) {
	s := start(t, DefaultConfig())
	resp := do(t, "POST", s.URL()+"/api/pull", `{"model":"nosuch:7b"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the stream has started when the manifest fails")
	lines := ndjsonLines(t, resp.Body)
	require.Len(t, lines, 2)
	assert.Equal(t, "pulling manifest", lines[0]["status"])
	assert.Equal(t, map[string]any{"error": "pull model manifest: file does not exist"}, lines[1])

	var e map[string]string
	require.Equal(t, http.StatusInternalServerError, call(t, "POST", s.URL()+"/api/pull", `{"model":"nosuch:7b","stream":false}`, &e))
	assert.Equal(t, "pull model manifest: file does not exist", e["error"])
	assert.Empty(t, tags(t, s).Models)

	require.Equal(t, http.StatusBadRequest, call(t, "POST", s.URL()+"/api/pull", ``, &e))
	assert.Equal(t, "missing request body", e["error"])
}

func TestPullAtAConfiguredRate(t *testing.T) {
	cfg := DefaultConfig()
	spec := lookup("qwen2.5:0.5b")
	cfg.PullBytesPerSec = spec.totalSize() * 5 // about 200 ms
	s := start(t, cfg)
	begin := time.Now()
	resp := do(t, "POST", s.URL()+"/api/pull", `{"model":"qwen2.5:0.5b","stream":true}`)
	lines := ndjsonLines(t, resp.Body)
	assert.GreaterOrEqual(t, time.Since(begin), 190*time.Millisecond)
	var model []float64
	for _, l := range lines {
		if l["digest"] == spec.layers[0].Digest {
			c, _ := l["completed"].(float64)
			model = append(model, c)
		}
	}
	require.Greater(t, len(model), 3, "several progress lines for the weights")
	for i := 1; i < len(model); i++ {
		assert.Greater(t, model[i], model[i-1], "progress only grows")
	}
	assert.EqualValues(t, spec.weights, model[len(model)-1])
}

func TestPullStopsWhenTheClientLeaves(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PullBytesPerSec = 1 << 20 // a 400 MB model would take minutes
	s := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/api/pull", strings.NewReader(`{"model":"qwen2.5:0.5b"}`))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	r := bufio.NewReader(resp.Body)
	for range 3 {
		_, err := r.ReadString('\n')
		require.NoError(t, err)
	}
	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool { return s.Stats().PullsCancelled == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Empty(t, tags(t, s).Models, "a cut pull leaves no model")
	assert.Zero(t, s.Stats().Pulls)
}

type psList struct {
	Models []struct {
		Name          string    `json:"name"`
		Model         string    `json:"model"`
		Size          int64     `json:"size"`
		SizeVRAM      int64     `json:"size_vram"`
		ExpiresAt     time.Time `json:"expires_at"`
		Digest        string    `json:"digest"`
		ContextLength int       `json:"context_length"`
	} `json:"models"`
}

func ps(t *testing.T, s *Server) psList {
	t.Helper()
	var l psList
	require.Equal(t, http.StatusOK, call(t, "GET", s.URL()+"/api/ps", "", &l))
	return l
}

func TestGenerateLoadsAndUnloads(t *testing.T) {
	cfg := withModels("llama3.2:1b", "qwen2.5:0.5b")
	cfg.VRAM = 8 << 30
	s := start(t, cfg)

	var out map[string]any
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/generate", `{"model":"llama3.2:1b"}`, &out))
	assert.Equal(t, true, out["done"])
	assert.Equal(t, "load", out["done_reason"])
	assert.Equal(t, "llama3.2:1b", out["model"])

	// Plain Ollama takes "prompt":"" as a load too.
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/generate", `{"model":"qwen2.5:0.5b","prompt":""}`, &out))
	assert.Equal(t, "load", out["done_reason"])

	l := ps(t, s)
	require.Len(t, l.Models, 2, "Ollama keeps several models loaded")
	for _, m := range l.Models {
		spec := lookup(m.Name)
		assert.Equal(t, spec.memory(2048), m.Size)
		assert.Greater(t, m.Size, spec.weights, "weights plus KV cache and graph")
		assert.Equal(t, m.Size, m.SizeVRAM, "fits in the GPU")
		assert.WithinDuration(t, time.Now().Add(5*time.Minute), m.ExpiresAt, 30*time.Second)
		assert.Equal(t, 2048, m.ContextLength)
		assert.Equal(t, spec.digest, m.Digest)
	}

	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/generate", `{"model":"llama3.2:1b","keep_alive":0}`, &out))
	assert.Equal(t, "unload", out["done_reason"])
	l = ps(t, s)
	require.Len(t, l.Models, 1)
	assert.Equal(t, "qwen2.5:0.5b", l.Models[0].Name)

	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/generate", `{"model":"qwen2.5:0.5b","keep_alive":-1}`, &out))
	assert.Greater(t, ps(t, s).Models[0].ExpiresAt.Year(), 2200, "keep_alive -1 keeps it for good")

	require.Equal(t, http.StatusNotFound, call(t, "POST", s.URL()+"/api/generate", `{"model":"gemma3:1b"}`, &out))
	assert.Equal(t, "model 'gemma3:1b' not found", out["error"])
}

func TestCPUOnlyHostHasNoVRAM(t *testing.T) {
	s := start(t, withModels("gemma3:1b"))
	call(t, "POST", s.URL()+"/api/generate", `{"model":"gemma3:1b","options":{"num_ctx":8192}}`, nil)
	l := ps(t, s)
	require.Len(t, l.Models, 1)
	assert.Zero(t, l.Models[0].SizeVRAM)
	assert.Equal(t, 8192, l.Models[0].ContextLength)
	assert.Equal(t, lookup("gemma3:1b").memory(8192), l.Models[0].Size)
}

func TestKeepAliveExpires(t *testing.T) {
	s := start(t, withModels("gemma3:1b"))
	call(t, "POST", s.URL()+"/api/generate", `{"model":"gemma3:1b","keep_alive":"150ms"}`, nil)
	require.Len(t, ps(t, s).Models, 1)
	require.Eventually(t, func() bool { return len(ps(t, s).Models) == 0 }, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, 1, s.Stats().Unloads)
}

func TestMaxLoadedEvictsTheSoonestToExpire(t *testing.T) {
	cfg := withModels("llama3.2:1b", "qwen2.5:0.5b", "gemma3:1b")
	cfg.MaxLoaded = 2
	s := start(t, cfg)
	call(t, "POST", s.URL()+"/api/generate", `{"model":"llama3.2:1b","keep_alive":"1h"}`, nil)
	call(t, "POST", s.URL()+"/api/generate", `{"model":"qwen2.5:0.5b","keep_alive":"10m"}`, nil)
	call(t, "POST", s.URL()+"/api/generate", `{"model":"gemma3:1b"}`, nil)
	var names []string
	for _, m := range ps(t, s).Models {
		names = append(names, m.Name)
	}
	assert.Equal(t, []string{"llama3.2:1b", "gemma3:1b"}, names, "sorted by time left")
}

func TestChatStreamsNDJSON(t *testing.T) {
	cfg := withModels("llama3.2:1b")
	cfg.LoadDelay = 50 * time.Millisecond
	s := start(t, cfg)
	body := `{"model":"llama3.2:1b","messages":[{"role":"user","content":"Why is the sky blue?"}],"options":{"seed":42}}`
	resp := do(t, "POST", s.URL()+"/api/chat", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	lines := ndjsonLines(t, resp.Body)
	require.GreaterOrEqual(t, len(lines), simtext.MinAnswer+1)

	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		assert.Equal(t, false, l["done"])
		assert.Equal(t, "llama3.2:1b", l["model"])
		msg := l["message"].(map[string]any)
		assert.Equal(t, "assistant", msg["role"])
		text.WriteString(msg["content"].(string))
		_, err := time.Parse(time.RFC3339Nano, l["created_at"].(string))
		assert.NoError(t, err)
	}
	last := lines[len(lines)-1]
	assert.Equal(t, true, last["done"])
	assert.Equal(t, "stop", last["done_reason"])
	assert.EqualValues(t, len(lines)-1, last["eval_count"])
	assert.Positive(t, last["prompt_eval_count"])
	assert.GreaterOrEqual(t, last["load_duration"], float64(50*time.Millisecond), "durations in nanoseconds")
	assert.GreaterOrEqual(t, last["total_duration"], last["load_duration"])
	assert.Equal(t, "", last["message"].(map[string]any)["content"])

	// Not streaming: one object with the same (seeded) answer; the model is loaded already.
	var one map[string]any
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/chat",
		strings.Replace(body, `"options"`, `"stream":false,"options"`, 1), &one))
	assert.Equal(t, text.String(), one["message"].(map[string]any)["content"])
	assert.Less(t, one["load_duration"], float64(50*time.Millisecond), "no load the second time")
	assert.Equal(t, 1, s.Stats().Loads)
}

func TestChatLimitsAndErrors(t *testing.T) {
	s := start(t, withModels("gemma3:1b"))
	var out map[string]any
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/chat",
		`{"model":"gemma3:1b","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":3}}`, &out))
	assert.Equal(t, "length", out["done_reason"])
	assert.EqualValues(t, 3, out["eval_count"])

	require.Equal(t, http.StatusNotFound, call(t, "POST", s.URL()+"/api/chat",
		`{"model":"llama3.2:3b","messages":[{"role":"user","content":"hi"}]}`, &out))
	assert.Equal(t, `model "llama3.2:3b" not found, try pulling it first`, out["error"])

	require.Equal(t, http.StatusBadRequest, call(t, "POST", s.URL()+"/api/chat", `{"messages":[]}`, &out))
	assert.Equal(t, "model is required", out["error"])
	require.Equal(t, http.StatusInternalServerError, call(t, "POST", s.URL()+"/api/chat",
		`{"model":"gemma3:1b","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":"many"}}`, &out))
	require.Equal(t, http.StatusBadRequest, call(t, "POST", s.URL()+"/api/chat", `{"model":`, &out))

	// No messages: load, and with keep_alive 0 unload.
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/chat", `{"model":"gemma3:1b"}`, &out))
	assert.Equal(t, "load", out["done_reason"])
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/chat", `{"model":"gemma3:1b","messages":[],"keep_alive":0}`, &out))
	assert.Equal(t, "unload", out["done_reason"])
	assert.Empty(t, ps(t, s).Models)
}

func TestGenerateStreams(t *testing.T) {
	s := start(t, withModels("qwen2.5:0.5b"))
	resp := do(t, "POST", s.URL()+"/api/generate", `{"model":"qwen2.5","prompt":"hello"}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "qwen2.5 means qwen2.5:latest, which is not pulled")

	resp = do(t, "POST", s.URL()+"/api/generate", `{"model":"qwen2.5:0.5b","prompt":"hello","keep_alive":0}`)
	lines := ndjsonLines(t, resp.Body)
	last := lines[len(lines)-1]
	assert.Equal(t, true, last["done"])
	assert.Equal(t, "stop", last["done_reason"])
	assert.NotEmpty(t, last["context"])
	assert.NotEmpty(t, lines[0]["response"])
	assert.Empty(t, ps(t, s).Models, "keep_alive 0 unloads after the answer")
}

func TestClientDisconnectStopsGeneration(t *testing.T) {
	cfg := withModels("gemma3:1b")
	cfg.TokensPerSec = 20
	s := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/api/chat",
		strings.NewReader(`{"model":"gemma3:1b","messages":[{"role":"user","content":"go on"}]}`))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, err = bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool { return s.Stats().Cancelled == 1 }, 5*time.Second, 10*time.Millisecond, "%+v", s.Stats())
	assert.Zero(t, s.Stats().Generations)
	// The model is free again: it can expire and unload.
	call(t, "POST", s.URL()+"/api/generate", `{"model":"gemma3:1b","keep_alive":0}`, nil)
	assert.Empty(t, ps(t, s).Models)
}

func TestShow(t *testing.T) {
	s := start(t, withModels("llama3.2:1b"))
	var show struct {
		Details      map[string]any `json:"details"`
		ModelInfo    map[string]any `json:"model_info"`
		Template     string         `json:"template"`
		License      string         `json:"license"`
		Parameters   string         `json:"parameters"`
		Modelfile    string         `json:"modelfile"`
		Capabilities []string       `json:"capabilities"`
	}
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/show", `{"model":"llama3.2:1b"}`, &show))
	assert.Equal(t, "llama", show.ModelInfo["general.architecture"])
	assert.EqualValues(t, 131072, show.ModelInfo["llama.context_length"])
	assert.EqualValues(t, 16, show.ModelInfo["llama.block_count"])
	assert.EqualValues(t, 2048, show.ModelInfo["llama.embedding_length"])
	assert.EqualValues(t, 32, show.ModelInfo["llama.attention.head_count"])
	assert.EqualValues(t, 8, show.ModelInfo["llama.attention.head_count_kv"])
	assert.EqualValues(t, 1235814432, show.ModelInfo["general.parameter_count"])
	assert.Equal(t, "Q8_0", show.Details["quantization_level"])
	assert.Contains(t, show.Template, "<|start_header_id|>")
	assert.Contains(t, show.License, "LLAMA 3.2")
	assert.Contains(t, show.Parameters, `"<|eot_id|>"`)
	assert.Contains(t, show.Modelfile, "FROM /root/.ollama/models/blobs/sha256-")
	assert.Equal(t, []string{"completion"}, show.Capabilities)

	var e map[string]string
	require.Equal(t, http.StatusNotFound, call(t, "POST", s.URL()+"/api/show", `{"model":"gemma3:1b"}`, &e))
	assert.Equal(t, "model 'gemma3:1b' not found", e["error"])
	require.Equal(t, http.StatusBadRequest, call(t, "POST", s.URL()+"/api/show", `{}`, &e))
}

func TestDelete(t *testing.T) {
	s := start(t, withModels("llama3.2:1b", "gemma3:1b"))
	resp := do(t, "DELETE", s.URL()+"/api/delete", `{"model":"llama3.2:1b"}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	l := tags(t, s)
	require.Len(t, l.Models, 1)
	assert.Equal(t, "gemma3:1b", l.Models[0].Name)

	var e map[string]string
	require.Equal(t, http.StatusNotFound, call(t, "DELETE", s.URL()+"/api/delete", `{"model":"llama3.2:1b"}`, &e))
	assert.Equal(t, "model 'llama3.2:1b' not found", e["error"])
	assert.Equal(t, http.StatusMethodNotAllowed, do(t, "POST", s.URL()+"/api/delete", `{"model":"gemma3:1b"}`).StatusCode)
}

func TestOpenAIChat(t *testing.T) {
	s := start(t, withModels("qwen2.5:0.5b"))
	resp := do(t, "POST", s.URL()+"/v1/chat/completions",
		`{"model":"qwen2.5:0.5b","messages":[{"role":"user","content":"hi"}],"stream":true,"seed":5,"stream_options":{"include_usage":true}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var events []map[string]any
	doneSeen := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "" {
			continue
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		require.True(t, ok, sc.Text())
		if data == "[DONE]" {
			doneSeen = true
			break
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &ev))
		events = append(events, ev)
	}
	require.True(t, doneSeen)
	require.GreaterOrEqual(t, len(events), 3)
	var text strings.Builder
	for _, ev := range events[:len(events)-2] {
		assert.Equal(t, "chat.completion.chunk", ev["object"])
		assert.InDelta(t, float64(time.Now().Unix()), ev["created"], 5, "created in seconds")
		c := ev["choices"].([]any)[0].(map[string]any)
		assert.Nil(t, c["finish_reason"])
		text.WriteString(c["delta"].(map[string]any)["content"].(string))
	}
	fin := events[len(events)-2]["choices"].([]any)[0].(map[string]any)
	assert.Equal(t, "stop", fin["finish_reason"])
	usage := events[len(events)-1]["usage"].(map[string]any)
	assert.Positive(t, usage["completion_tokens"])

	var out struct {
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Choices []struct {
			Message      map[string]string `json:"message"`
			FinishReason string            `json:"finish_reason"`
		} `json:"choices"`
		Usage map[string]int `json:"usage"`
	}
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/v1/chat/completions",
		`{"model":"qwen2.5:0.5b","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"seed":5}`, &out))
	assert.Equal(t, "chat.completion", out.Object)
	assert.Equal(t, text.String(), out.Choices[0].Message["content"])
	assert.Equal(t, out.Usage["prompt_tokens"]+out.Usage["completion_tokens"], out.Usage["total_tokens"])

	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	require.Equal(t, http.StatusNotFound, call(t, "POST", s.URL()+"/v1/chat/completions",
		`{"model":"gemma3:1b","messages":[{"role":"user","content":"hi"}]}`, &e))
	assert.Equal(t, `model "gemma3:1b" not found, try pulling it first`, e.Error.Message)
	assert.Equal(t, "api_error", e.Error.Type)

	var models struct {
		Data []map[string]any `json:"data"`
	}
	require.Equal(t, http.StatusOK, call(t, "GET", s.URL()+"/v1/models", "", &models))
	require.Len(t, models.Data, 1)
	assert.Equal(t, "qwen2.5:0.5b", models.Data[0]["id"])
}

func TestPacing(t *testing.T) {
	cfg := withModels("gemma3:1b")
	cfg.TTFT = 80 * time.Millisecond
	cfg.TokensPerSec = 100
	s := start(t, cfg)
	begin := time.Now()
	var out map[string]any
	require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/generate",
		`{"model":"gemma3:1b","prompt":"x","stream":false,"options":{"num_predict":11}}`, &out))
	// The 11th token is due TTFT + 10/100 s after the start.
	assert.GreaterOrEqual(t, time.Since(begin), 180*time.Millisecond)
	assert.GreaterOrEqual(t, out["prompt_eval_duration"], float64(80*time.Millisecond))
	// From the start to the last token: prompt evaluation then generation.
	assert.GreaterOrEqual(t, out["prompt_eval_duration"].(float64)+out["eval_duration"].(float64), float64(180*time.Millisecond))
}

// TestStampTokens: every streamed token carries the time it began to be written, in order and
// no later than its line's arrival; unstamped, the text has no stamp.
func TestStampTokens(t *testing.T) {
	cfg := withModels("gemma3:1b")
	cfg.StampTokens = true
	s := start(t, cfg)
	begin := time.Now()
	resp := do(t, "POST", s.URL()+"/api/chat",
		`{"model":"gemma3:1b","messages":[{"role":"user","content":"x"}],"options":{"num_predict":7}}`)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	var stamps []time.Time
	for sc.Scan() {
		if at, ok := simtext.StampIn(sc.Bytes()); ok {
			assert.False(t, at.After(time.Now()), "a stamp from the future: %s", sc.Bytes())
			stamps = append(stamps, at)
		}
	}
	require.NoError(t, sc.Err())
	require.Len(t, stamps, 7)
	assert.False(t, stamps[0].Before(begin))
	assert.True(t, slices.IsSortedFunc(stamps, time.Time.Compare), "stamps out of order: %v", stamps)

	plain := start(t, withModels("gemma3:1b"))
	var out map[string]any
	require.Equal(t, http.StatusOK, call(t, "POST", plain.URL()+"/api/generate",
		`{"model":"gemma3:1b","prompt":"x","stream":false,"options":{"num_predict":7}}`, &out))
	assert.NotContains(t, out["response"], "[t=")
}

func TestRegistry(t *testing.T) {
	s := start(t, DefaultConfig())
	var man struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        layer  `json:"config"`
		Layers        []layer
	}
	resp := do(t, "GET", s.RegistryURL()+"/v2/library/llama3.2/manifests/1b", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, MediaTypeManifest, resp.Header.Get("Content-Type"))
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&man))
	assert.Equal(t, 2, man.SchemaVersion)
	var model layer
	kinds := map[string]bool{}
	for _, l := range man.Layers {
		kinds[l.MediaType] = true
		if l.MediaType == MediaTypeModel {
			model = l
		}
	}
	assert.EqualValues(t, 1321082688, model.Size, "the weights' size before any pull")
	for _, k := range []string{MediaTypeModel, MediaTypeTemplate, MediaTypeLicense, MediaTypeParams} {
		assert.True(t, kinds[k], k)
	}

	// Blobs: HEAD gives the size, a range GET the bytes (the weights start with a GGUF header).
	head := do(t, "HEAD", s.RegistryURL()+"/v2/library/llama3.2/blobs/"+model.Digest, "")
	require.Equal(t, http.StatusOK, head.StatusCode)
	assert.EqualValues(t, model.Size, head.ContentLength)
	req, _ := http.NewRequest("GET", s.RegistryURL()+"/v2/library/llama3.2/blobs/"+model.Digest, nil)
	req.Header.Set("Range", "bytes=0-3")
	rr, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	magic, _ := io.ReadAll(rr.Body)
	rr.Body.Close()
	assert.Equal(t, http.StatusPartialContent, rr.StatusCode)
	assert.Equal(t, "GGUF", string(magic))

	// Small layers are real content with real digests.
	var tmpl layer
	for _, l := range man.Layers {
		if l.MediaType == MediaTypeTemplate {
			tmpl = l
		}
	}
	resp = do(t, "GET", s.RegistryURL()+"/v2/library/llama3.2/blobs/"+tmpl.Digest, "")
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, tmpl.Digest, "sha256:"+sha(body))

	// "latest" is the 3b, as in the library.
	var latest struct{ Layers []layer }
	require.Equal(t, http.StatusOK, call(t, "GET", s.RegistryURL()+"/v2/library/llama3.2/manifests/latest", "", &latest))
	assert.EqualValues(t, 2019377376, latest.Layers[0].Size)

	var e struct {
		Errors []map[string]string `json:"errors"`
	}
	require.Equal(t, http.StatusNotFound, call(t, "GET", s.RegistryURL()+"/v2/library/nosuch/manifests/7b", "", &e))
	assert.Equal(t, "MANIFEST_UNKNOWN", e.Errors[0]["code"])
	require.Equal(t, http.StatusNotFound, call(t, "GET", s.RegistryURL()+"/v2/library/llama3.2/blobs/sha256:"+strings.Repeat("0", 64), "", &e))

	st := s.Stats()
	assert.Equal(t, 1, st.Registry["HEAD /v2/library/llama3.2/blobs/"+model.Digest])
	assert.Equal(t, 1, st.Registry["GET /v2/library/llama3.2/manifests/1b"])
	assert.Empty(t, st.Requests, "the registry is another host")
}

// The model blob's header is a GGUF a real parser reads, with the catalogue's figures.
func TestModelBlobIsGGUF(t *testing.T) {
	spec := lookup("qwen2.5:0.5b")
	rd, size, ok := spec.blob(spec.layers[0].Digest)
	require.True(t, ok)
	assert.Equal(t, spec.weights, size)
	path := filepath.Join(t.TempDir(), "head.gguf")
	head := make([]byte, 4096)
	_, err := rd.ReadAt(head, 0)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, head, 0o600))
	gf, err := parser.ParseGGUFFile(path)
	require.NoError(t, err)
	arch := gf.Architecture()
	assert.Equal(t, "qwen2", arch.Architecture)
	assert.EqualValues(t, 24, arch.BlockCount)
	assert.EqualValues(t, 896, arch.EmbeddingLength)
	assert.EqualValues(t, 2, arch.AttentionHeadCountKV)
	assert.EqualValues(t, 32768, arch.MaximumContextLength)

	tail := make([]byte, 10)
	n, err := rd.ReadAt(tail, size-5)
	assert.Equal(t, 5, n)
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, make([]byte, 5), tail[:5])
}

func TestStatsEndpoint(t *testing.T) {
	s := start(t, withModels("gemma3:1b"))
	call(t, "GET", s.URL()+"/api/tags", "", nil)
	call(t, "POST", s.URL()+"/api/chat", `{"model":"gemma3:1b","messages":[{"role":"user","content":"x"}],"stream":false}`, nil)
	var st Stats
	require.Equal(t, http.StatusOK, call(t, "GET", s.URL()+"/_sim/stats", "", &st))
	assert.Equal(t, 1, st.Requests["GET /api/tags"])
	assert.Equal(t, 1, st.Requests["POST /api/chat"])
	assert.NotContains(t, st.Requests, "GET /_sim/stats")
	assert.Equal(t, 1, st.Generations)
	assert.Equal(t, 1, st.Loads)
	assert.Equal(t, st, s.Stats())
}

func TestStartContextStopsServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, DefaultConfig(), nil)
	require.NoError(t, err)
	cancel()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("still running")
	}
	_, err = http.Get(s.URL() + "/")
	assert.Error(t, err)
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{
		"llama3.2":                             "llama3.2:latest",
		"Llama3.2:1B":                          "llama3.2:1b",
		"registry.ollama.ai/library/gemma3:1b": "gemma3:1b",
		"library/qwen2.5:0.5b":                 "qwen2.5:0.5b",
		"":                                     "",
	} {
		assert.Equal(t, want, canonical(in), in)
	}
	assert.Same(t, lookup("llama3.2:3b"), lookup("llama3.2"))
	assert.Nil(t, lookup("qwen2.5"))
	assert.Contains(t, CatalogueNames(), "gemma3:1b")
}

// With a models folder, a pulled model's blob is there, as Ollama keeps it: its GGUF header,
// the file as long as the model layer; /api/show's Modelfile names it; deleting the model removes
// it unless another name holds it.
func TestModelsDirHoldsTheBlobs(t *testing.T) {
	cfg := withModels("llama3.2:3b", "llama3.2:latest") // one model, two names
	cfg.ModelsDir = t.TempDir()
	s := start(t, cfg)
	resp := do(t, "POST", s.URL()+"/api/pull", `{"model":"gemma3:1b","stream":false}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	blobOf := func(name string) string {
		return filepath.Join(cfg.ModelsDir, "blobs", strings.Replace(lookup(name).layers[0].Digest, ":", "-", 1))
	}
	for _, name := range []string{"llama3.2:3b", "gemma3:1b"} {
		var show struct {
			Modelfile string `json:"modelfile"`
		}
		require.Equal(t, http.StatusOK, call(t, "POST", s.URL()+"/api/show", `{"model":"`+name+`"}`, &show))
		assert.Contains(t, show.Modelfile, "\nFROM "+blobOf(name)+"\n", name)
		f, err := os.Open(blobOf(name))
		require.NoError(t, err, name)
		fi, err := f.Stat()
		require.NoError(t, err)
		assert.Equal(t, lookup(name).layers[0].Size, fi.Size(), name)
		head := make([]byte, len(lookup(name).ggufHead))
		_, err = io.ReadFull(f, head)
		f.Close()
		require.NoError(t, err)
		assert.Equal(t, lookup(name).ggufHead, head, name)
	}
	require.Equal(t, http.StatusOK, do(t, "DELETE", s.URL()+"/api/delete", `{"model":"llama3.2:3b"}`).StatusCode)
	assert.FileExists(t, blobOf("llama3.2:3b"), "llama3.2:latest holds it still")
	require.Equal(t, http.StatusOK, do(t, "DELETE", s.URL()+"/api/delete", `{"model":"llama3.2:latest"}`).StatusCode)
	assert.NoFileExists(t, blobOf("llama3.2:3b"))
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		EnvPreloaded: "llama3.2:1b, gemma3:1b", EnvPullBytesPerSec: "1000000", EnvLoadDelay: "1s",
		EnvTokensPerSec: "30", EnvTTFT: "200ms", EnvKeepAlive: "-1", EnvMaxLoaded: "1", EnvNumCtx: "4096",
		EnvVRAM: "8589934592", EnvSeed: "9", EnvVersion: "0.6.0", EnvAddr: "127.0.0.1:0", EnvRegistryAddr: "127.0.0.1:0",
		EnvStampTokens: "true", EnvLongestAnswer: "200", EnvModelsDir: "/var/lib/ollama-sim",
	}
	cfg, err := ConfigFromEnv(func(k string) string { return env[k] }, DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, []string{"llama3.2:1b", "gemma3:1b"}, cfg.Preloaded)
	assert.EqualValues(t, 1000000, cfg.PullBytesPerSec)
	assert.Equal(t, time.Second, cfg.LoadDelay)
	assert.Equal(t, 30.0, cfg.TokensPerSec)
	assert.Equal(t, 200*time.Millisecond, cfg.TTFT)
	assert.Equal(t, Forever, cfg.KeepAlive)
	assert.Equal(t, 1, cfg.MaxLoaded)
	assert.Equal(t, 4096, cfg.NumCtx)
	assert.EqualValues(t, 8<<30, cfg.VRAM)
	assert.EqualValues(t, 9, cfg.Seed)
	assert.Equal(t, "0.6.0", cfg.Version)
	assert.True(t, cfg.StampTokens)
	assert.Equal(t, 200, cfg.LongestAnswer)
	assert.Equal(t, "/var/lib/ollama-sim", cfg.ModelsDir)

	for name, bad := range map[string]string{
		EnvPreloaded: "llama3.2:1b,mystery:9b", EnvPullBytesPerSec: "-5", EnvLoadDelay: "later",
		EnvTokensPerSec: "NaN", EnvKeepAlive: "5 minutes", EnvMaxLoaded: "0", EnvNumCtx: "x", EnvVRAM: "8G", EnvSeed: "1.5",
		EnvStampTokens: "sometimes", EnvLongestAnswer: "100001",
	} {
		_, err := ConfigFromEnv(func(k string) string {
			if k == name {
				return bad
			}
			return ""
		}, DefaultConfig())
		require.Error(t, err, "%s=%q", name, bad)
		if name == EnvPreloaded {
			assert.Contains(t, err.Error(), "mystery:9b")
		} else {
			assert.Contains(t, err.Error(), name)
		}
	}

	for v, want := range map[string]time.Duration{"300": 300 * time.Second, "5m": 5 * time.Minute, "0": 0, "-1m": Forever} {
		got, err := ParseKeepAlive(v)
		require.NoError(t, err)
		assert.Equal(t, want, got, v)
	}
}

func TestKeepAliveDecoding(t *testing.T) {
	for in, want := range map[string]time.Duration{`10`: 10 * time.Second, `"1h"`: time.Hour, `-1`: Forever, `"-5m"`: Forever, `0`: 0} {
		var k keepAlive
		require.NoError(t, json.Unmarshal([]byte(in), &k), in)
		assert.Equal(t, want, k.d, in)
	}
	var k keepAlive
	assert.Error(t, json.Unmarshal([]byte(`"-1"`), &k), `Ollama rejects "-1" as a string`)
	assert.Error(t, json.Unmarshal([]byte(`true`), &k))
}

func ExampleServer_RegistryURL() {
	s, err := Start(context.Background(), DefaultConfig(), nil)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	resp, err := http.Get(s.RegistryURL() + "/v2/library/qwen2.5/manifests/0.5b")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var m struct {
		Layers []struct {
			MediaType string `json:"mediaType"`
			Size      int64  `json:"size"`
		} `json:"layers"`
	}
	json.NewDecoder(resp.Body).Decode(&m)
	fmt.Println(m.Layers[0].MediaType, m.Layers[0].Size)
	// Output: application/vnd.ollama.image.model 397807936
}

func FuzzKeepAlive(f *testing.F) {
	for _, s := range []string{"5m", "-1", "0", "300", "1e309", "-0", "1h30m", "NaN", `"10s"`, `-3.5`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := ParseKeepAlive(s); err == nil && d < 0 {
			t.Fatalf("ParseKeepAlive(%q) = %v, negative", s, d)
		}
		var k keepAlive
		if err := json.Unmarshal([]byte(s), &k); err == nil && k.d < 0 {
			t.Fatalf("keep_alive %s decoded to %v, negative", s, k.d)
		}
	})
}

// TestChatToolsAndFormat: with tools, a call to the first tool (arguments an object, in a chunk
// of its own when streaming); after the tool's result, text; with format, a fitting JSON document.
func TestChatToolsAndFormat(t *testing.T) {
	s := start(t, withModels("llama3.2:1b"))
	tools := `"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Paris"]}}}}}]`
	var whole struct {
		Message struct {
			Content   string
			ToolCalls []struct {
				Function struct {
					Name      string
					Arguments map[string]any
				}
			} `json:"tool_calls"`
		}
		Done bool
	}
	require.Equal(t, 200, call(t, "POST", s.URL()+"/api/chat", `{"model":"llama3.2:1b","stream":false,"messages":[{"role":"user","content":"weather?"}],`+tools+`}`, &whole))
	require.Len(t, whole.Message.ToolCalls, 1)
	assert.Equal(t, "weather", whole.Message.ToolCalls[0].Function.Name)
	assert.Equal(t, map[string]any{"city": "Paris"}, whole.Message.ToolCalls[0].Function.Arguments)

	lines := ndjsonLines(t, do(t, "POST", s.URL()+"/api/chat", `{"model":"llama3.2:1b","messages":[{"role":"user","content":"weather?"}],`+tools+`}`).Body)
	require.Len(t, lines, 2)
	assert.NotNil(t, lines[0]["message"].(map[string]any)["tool_calls"])
	assert.Equal(t, true, lines[1]["done"])

	whole.Message.ToolCalls = nil
	require.Equal(t, 200, call(t, "POST", s.URL()+"/api/chat", `{"model":"llama3.2:1b","stream":false,"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"weather","arguments":{}}}]},{"role":"tool","content":"sunny","tool_name":"weather"}],`+tools+`}`, &whole))
	assert.Empty(t, whole.Message.ToolCalls)
	assert.NotEmpty(t, whole.Message.Content)

	require.Equal(t, 200, call(t, "POST", s.URL()+"/api/chat", `{"model":"llama3.2:1b","stream":false,"messages":[{"role":"user","content":"city?"}],"format":{"type":"object","properties":{"city":{"type":"string","enum":["Rome"]}}}}`, &whole))
	assert.JSONEq(t, `{"city":"Rome"}`, whole.Message.Content)
	require.Equal(t, 200, call(t, "POST", s.URL()+"/api/chat", `{"model":"llama3.2:1b","stream":false,"messages":[{"role":"user","content":"city?"}],"format":"json"}`, &whole))
	assert.True(t, json.Valid([]byte(whole.Message.Content)), whole.Message.Content)
}

func TestEmbed(t *testing.T) {
	s := start(t, withModels("llama3.2:1b"))
	var out struct {
		Embeddings      [][]float32
		PromptEvalCount int `json:"prompt_eval_count"`
	}
	require.Equal(t, 200, call(t, "POST", s.URL()+"/api/embed", `{"model":"llama3.2:1b","input":["hi","there"]}`, &out))
	require.Len(t, out.Embeddings, 2)
	assert.Len(t, out.Embeddings[0], maxEmbedDims)
	assert.NotEqual(t, out.Embeddings[0], out.Embeddings[1])
	assert.Positive(t, out.PromptEvalCount)
	require.Equal(t, 200, call(t, "POST", s.URL()+"/api/embed", `{"model":"llama3.2:1b","input":"hi"}`, &out))
	assert.Len(t, out.Embeddings, 1)
	assert.Equal(t, 404, call(t, "POST", s.URL()+"/api/embed", `{"model":"absent","input":"hi"}`, nil))
}
