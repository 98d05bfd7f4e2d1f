package sizing

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/sim/gguf"
	simollama "github.com/llmkube/mesh/sim/ollama"
)

const qwenModelLayer = 934_964_576

// registry plays an Ollama registry's manifest route; it refuses a request without the
// manifest media type in Accept, as a distribution registry may.
func registry(t *testing.T) *httptest.Server {
	t.Helper()
	manifests := map[string]string{
		"/v2/library/qwen2/manifests/1.5b": `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
			"config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:aa","size":485},
			"layers":[
			 {"mediaType":"application/vnd.ollama.image.model","digest":"sha256:bb","size":934964576},
			 {"mediaType":"application/vnd.ollama.image.template","digest":"sha256:cc","size":182},
			 {"mediaType":"application/vnd.ollama.image.license","digest":"sha256:dd","size":11344}]}`,
		"/v2/someone/vision/manifests/v1": `{"layers":[
			 {"mediaType":"application/vnd.ollama.image.model","size":1000000000},
			 {"mediaType":"application/vnd.ollama.image.projector","size":600000000}]}`,
		"/v2/library/empty/manifests/latest":   `{"layers":[{"mediaType":"application/vnd.ollama.image.template","size":10}]}`,
		"/v2/library/garbage/manifests/latest": `<html>`,
		"/v2/library/negative/manifests/latest": `{"layers":[{"mediaType":"application/vnd.ollama.image.model","size":-5},
			{"mediaType":"application/vnd.ollama.image.model","size":10}]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != ollamaManifestType {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotAcceptable)
			return
		}
		body, ok := manifests[r.URL.Path]
		if !ok {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", ollamaManifestType)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestOllamaFromRegistry(t *testing.T) {
	reg := registry(t)
	s := &Sizer{Guard: allowLoopback(reg.Client()), OllamaRegistry: reg.URL}
	est, err := s.Estimate(context.Background(), parse(t, "ollama://qwen2:1.5b"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeRegistry, est.Method)
	assert.Equal(t, api.DeviceHost, est.Device)
	assert.Equal(t, int64(qwenModelLayer), est.Weights, "only the model layer counts")
	assert.Equal(t, int64(qwenModelLayer)+Overhead, est.Bytes)
	assert.Contains(t, est.Detail, "weights 892 MiB + overhead 512 MiB (KV for 2048 ctx unknown before the pull")
	assert.Contains(t, est.Detail, reg.URL+"/v2/library/qwen2/manifests/1.5b")

	est, err = s.Estimate(context.Background(), parse(t, "ollama://someone/vision:v1"), 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1_600_000_000), est.Weights, "a vision projector is loaded beside the model")
}

func TestOllamaRegistryRefusals(t *testing.T) {
	reg := registry(t)
	s := &Sizer{Guard: allowLoopback(reg.Client()), OllamaRegistry: reg.URL}
	ctx := context.Background()

	_, err := s.Estimate(ctx, parse(t, "ollama://nosuch:7b"), 0)
	requireCode(t, err, api.CodeNotFound, "the Ollama registry has no model nosuch:7b: check its name and tag")

	_, err = s.Estimate(ctx, parse(t, "ollama://empty"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "has no application/vnd.ollama.image.model layer")

	_, err = s.Estimate(ctx, parse(t, "ollama://garbage"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "answered something that is not the expected JSON")

	_, err = s.Estimate(ctx, parse(t, "ollama://negative"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "a layer of negative size")
}

// daemon plays a local Ollama daemon that has qwen2:1.5b, and counts /api/show calls.
func daemon(t *testing.T, modelInfo map[string]any) (*httptest.Server, *int) {
	t.Helper()
	var mu sync.Mutex
	shows := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/show", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		shows++
		mu.Unlock()
		var req struct {
			Model string `json:"model"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		if req.Model != "qwen2:1.5b" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"model '`+req.Model+`' not found"}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"details":    map[string]any{"parameter_size": "1.5B", "quantization_level": "Q4_0"},
			"model_info": modelInfo,
		})
	})
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"models":[{"name":"llama3:latest","model":"llama3:latest","size":4661224676},
			{"name":"qwen2:1.5b","model":"qwen2:1.5b","size":934964814}]}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &shows
}

func TestOllamaFromLocalDaemon(t *testing.T) {
	d, _ := daemon(t, map[string]any{
		"general.architecture":           "qwen2",
		"qwen2.block_count":              28,
		"qwen2.embedding_length":         1536,
		"qwen2.attention.head_count":     12,
		"qwen2.attention.head_count_kv":  2,
		"qwen2.context_length":           32768,
		"general.parameter_count":        1543714304,
		"tokenizer.ggml.tokens":          nil,
		"qwen2.attention.layer_norm_eps": 1e-6,
	})
	reg := registry(t)
	s := &Sizer{OllamaDaemon: d.URL, OllamaRegistry: reg.URL, Guard: allowLoopback(nil)}
	est, err := s.Estimate(context.Background(), parse(t, "ollama://qwen2:1.5b"), 4096)
	require.NoError(t, err)
	assert.Equal(t, api.SizeShow, est.Method)
	assert.Equal(t, int64(934964814), est.Weights)
	// K and V × 28 layers × 4096 × 256 (2 KV heads of 128) × 2 bytes.
	assert.Equal(t, int64(2*28*4096*256*2), est.KV)
	assert.Equal(t, est.Weights+est.KV+Overhead, est.Bytes)
	assert.Equal(t, 32768, est.TrainContext, "model_info's context_length")
	assert.Contains(t, est.Detail, "KV 112 MiB (28 layers × 4096 ctx, f16)")
	assert.Contains(t, est.Detail, "from the local Ollama daemon")

	// A model the daemon lacks is sized from the registry.
	est, err = s.Estimate(context.Background(), parse(t, "ollama://someone/vision:v1"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeRegistry, est.Method)
}

func TestOllamaDaemonWithoutArchitecture(t *testing.T) {
	d, _ := daemon(t, map[string]any{})
	s := &Sizer{OllamaDaemon: d.URL}
	est, err := s.Estimate(context.Background(), parse(t, "ollama://qwen2:1.5b"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeShow, est.Method)
	assert.Zero(t, est.KV)
	assert.Contains(t, est.Detail, "KV unknown (no architecture in model_info; covered by the overhead)")
}

func TestOllamaDaemonDownFallsBackToRegistry(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	reg := registry(t)
	s := &Sizer{OllamaDaemon: down.URL, OllamaRegistry: reg.URL, Guard: allowLoopback(nil)}
	est, err := s.Estimate(context.Background(), parse(t, "ollama://qwen2:1.5b"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeRegistry, est.Method)
}

func TestSameOllamaModel(t *testing.T) {
	src := parse(t, "ollama://qwen2:1.5b")
	for name, want := range map[string]bool{
		"qwen2:1.5b": true, "registry.ollama.ai/library/qwen2:1.5b": true, "library/qwen2:1.5b": true,
		"QWEN2:1.5B": true, "qwen2": false, "qwen2:7b": false,
	} {
		assert.Equal(t, want, sameOllamaModel(name, src), name)
	}
	assert.True(t, sameOllamaModel("llama3", parse(t, "ollama://llama3")))
}

func TestKVBytes(t *testing.T) {
	assert.Equal(t, int64(2*32*2048*4096*2), kvBytes(32, 2048, 4096, 32, 0), "no KV head count: one per head")
	assert.Equal(t, int64(2*32*2048*1024*2), kvBytes(32, 2048, 4096, 32, 8))
	assert.Equal(t, int64(2*32*2048*4096*2), kvBytes(32, 2048, 4096, 32, 64), "a nonsense KV head count is ignored")
}

// A registry that serves the model blob with ranges lets the sizer read its GGUF header for
// the KV cache; one that ignores ranges leaves the KV unknown and the blob undownloaded.
func TestOllamaRegistryReadsBlobHeader(t *testing.T) {
	path, spec := writeModel(t, "sim-tiny", func(s *gguf.Spec) { s.WeightBytes = 1 << 30 })
	fi, err := os.Stat(path)
	require.NoError(t, err)
	digest := "sha256:" + strings.Repeat("ab", 32)
	manifest := `{"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"` + digest + `","size":` + strconv.FormatInt(fi.Size(), 10) + `}]}`

	for _, ranges := range []bool{true, false} {
		t.Run(fmt.Sprintf("ranges=%v", ranges), func(t *testing.T) {
			blob := serveFile(t, path, ranges)
			mux := http.NewServeMux()
			mux.HandleFunc("/v2/library/tiny/manifests/q8", func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, manifest)
			})
			mux.HandleFunc("/v2/library/tiny/blobs/"+digest, func(w http.ResponseWriter, r *http.Request) {
				// The real registry redirects blobs to a CDN.
				http.Redirect(w, r, blob.URL+"/blob", http.StatusTemporaryRedirect)
			})
			reg := httptest.NewServer(mux)
			t.Cleanup(reg.Close)

			s := &Sizer{OllamaRegistry: reg.URL, Guard: allowLoopback(nil)}
			est, err := s.Estimate(context.Background(), parse(t, "ollama://tiny:q8"), 8192)
			require.NoError(t, err)
			assert.Equal(t, api.SizeRegistry, est.Method)
			assert.Equal(t, fi.Size(), est.Weights, "weights come from the manifest")
			if ranges {
				kv := kvBytes(int64(spec.BlockCount), 8192, int64(spec.EmbeddingLength), int64(spec.HeadCount), int64(spec.HeadCountKV))
				assert.Equal(t, kv, est.KV)
				assert.Positive(t, est.Compute)
				assert.Equal(t, est.Weights+est.KV+est.Compute+Overhead, est.Bytes)
				assert.Contains(t, est.Detail, "(4 layers × 8192 ctx, f16)")
				assert.Contains(t, est.Detail, "the rest from the model blob's GGUF header")
			} else {
				assert.Zero(t, est.KV)
				assert.Equal(t, est.Weights+Overhead, est.Bytes)
				assert.Contains(t, est.Detail, "KV for 8192 ctx unknown before the pull")
			}
			blob.Close()
			assert.Less(t, blob.sent.Load(), int64(64*mib), "the blob was not downloaded")
		})
	}
}

// startOllamaSim starts the Ollama simulator, tuned, until t ends.
func startOllamaSim(t *testing.T, tune func(*simollama.Config)) *simollama.Server {
	t.Helper()
	cfg := simollama.DefaultConfig()
	tune(&cfg)
	sim, err := simollama.Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	return sim
}

// The Ollama simulator's daemon and registry: a model the daemon has is sized by /api/show, the
// others by the registry manifest and the model blob's header, and nothing is pulled.
func TestOllamaAgainstSimulator(t *testing.T) {
	ctx := context.Background()
	sim := startOllamaSim(t, func(c *simollama.Config) { c.Preloaded = []string{"llama3.2:1b"} })
	s := &Sizer{OllamaDaemon: sim.URL(), OllamaRegistry: sim.RegistryURL(), Guard: allowLoopback(nil)}

	est, err := s.Estimate(ctx, parse(t, "ollama://llama3.2:1b"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeShow, est.Method)
	assert.Equal(t, kvBytes(16, 2048, 2048, 32, 8), est.KV)
	assert.Contains(t, est.Detail, "KV 64 MiB (16 layers × 2048 ctx, f16)")

	est, err = s.Estimate(ctx, parse(t, "ollama://qwen2.5:0.5b"), 4096)
	require.NoError(t, err)
	assert.Equal(t, api.SizeRegistry, est.Method)
	assert.Greater(t, est.Weights, int64(390_000_000))
	assert.Equal(t, kvBytes(24, 4096, 896, 14, 2), est.KV, "KV from the blob's header")
	assert.Contains(t, est.Detail, "from the model blob's GGUF header")

	_, err = s.Estimate(ctx, parse(t, "ollama://nosuch:1b"), 0)
	requireCode(t, err, api.CodeNotFound, "the Ollama registry has no model nosuch:1b")

	st := sim.Stats()
	assert.Zero(t, st.Pulls)
	t.Logf("registry requests: %v", st.Registry)
}

// A model sizes the same before its pull (the registry's manifest and the blob's header by
// range requests) and after it (the daemon's /api/tags and its own blob's header, read from its
// models folder): the compute buffers count both times, and the registry is not asked again.
func TestOllamaSameSizeBeforeAndAfterThePull(t *testing.T) {
	ctx := context.Background()
	models := t.TempDir()
	sim := startOllamaSim(t, func(c *simollama.Config) { c.ModelsDir = models })
	s := &Sizer{OllamaDaemon: sim.URL(), OllamaRegistry: sim.RegistryURL(), Guard: allowLoopback(nil)}

	before, err := s.Estimate(ctx, parse(t, "ollama://qwen2.5:0.5b"), 4096)
	require.NoError(t, err)
	require.Equal(t, api.SizeRegistry, before.Method)
	require.Positive(t, before.Compute)

	resp, err := http.Post(sim.URL()+"/api/pull", "application/json", strings.NewReader(`{"model":"qwen2.5:0.5b","stream":false}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	asked := sim.Stats().Registry

	after, err := s.Estimate(ctx, parse(t, "ollama://qwen2.5:0.5b"), 4096)
	require.NoError(t, err)
	assert.Equal(t, api.SizeShow, after.Method)
	assert.Equal(t, before.KV, after.KV)
	assert.Equal(t, before.Compute, after.Compute, "the compute buffers count after the pull too")
	assert.Equal(t, before.TrainContext, after.TrainContext)
	// The daemon's size is the whole model (its template, license and config too): a few KiB.
	assert.InDelta(t, before.Bytes, after.Bytes, 64<<10, "before %s, after %s", api.FormatBytes(before.Bytes), api.FormatBytes(after.Bytes))
	assert.Contains(t, after.Detail, "the rest from its model blob's GGUF header ("+models+"/blobs/sha256-")
	assert.Equal(t, asked, sim.Stats().Registry, "a model the daemon holds is sized without the registry")

	// A daemon whose blob this host cannot read (another machine's folder): the estimate says
	// the compute buffers are unknown, and why.
	elsewhere := startOllamaSim(t, func(c *simollama.Config) { c.Preloaded = []string{"qwen2.5:0.5b"} })
	s.OllamaDaemon = elsewhere.URL()
	est, err := s.Estimate(ctx, parse(t, "ollama://qwen2.5:0.5b"), 4096)
	require.NoError(t, err)
	assert.Equal(t, api.SizeShow, est.Method)
	assert.Zero(t, est.Compute)
	assert.Contains(t, est.Detail, "compute unknown: model file /root/.ollama/models/blobs/sha256-")
}

func TestOllamaBlob(t *testing.T) {
	hex := strings.Repeat("0a", 32)
	for modelfile, want := range map[string]string{
		"# FROM qwen2:1.5b\n\nFROM /var/lib/ollama/models/blobs/sha256-" + hex + "\nTEMPLATE x\n": "/var/lib/ollama/models/blobs/sha256-" + hex,
		"FROM qwen2:1.5b\n":                  "", // built from another model by name
		"FROM ./blobs/sha256-" + hex + "\n":  "", // relative
		"FROM /etc/passwd\n":                 "",
		"FROM /x/blobs/sha256-abc\n":         "",
		"FROM /x/other/sha256-" + hex + "\n": "",
		"":                                   "",
		"FROM qwen2\nFROM /x/blobs/sha256-" + hex + "\n":        "", // only the first FROM is the model
		"  FROM   /x/blobs/sha256-" + hex + "  \r\nPARAMETER\n": "/x/blobs/sha256-" + hex,
	} {
		assert.Equal(t, want, ollamaBlob(modelfile), "%q", modelfile)
	}
}

// The real Ollama (../shared/engines; skipped without it): a model made with `ollama create`
// sizes from the daemon's own blob as the same GGUF file sizes by its path, with no registry.
func TestRealOllamaSizesFromItsBlob(t *testing.T) {
	gguf := enginetest.TinyGGUF(t)
	daemon := enginetest.StartOllama(t)
	daemon.Create(t, "tiny", gguf)
	// A registry on a closed loopback port: were the sizer to ask one, it would fail.
	s := &Sizer{OllamaDaemon: daemon.URL, OllamaRegistry: "http://127.0.0.1:9", Guard: allowLoopback(nil)}
	est, err := s.Estimate(context.Background(), parse(t, "ollama://tiny"), 1024)
	require.NoError(t, err)
	require.Equal(t, api.SizeShow, est.Method)
	file, err := s.Estimate(context.Background(), parse(t, gguf), 1024)
	require.NoError(t, err)
	assert.Equal(t, file.KV, est.KV)
	// Within bytes: ollama create writes its own copy of the file, whose header the estimator's
	// footprint counts (32 bytes apart with Ollama 0.33 and tiny.gguf).
	assert.InDelta(t, file.Compute, est.Compute, 4096)
	assert.Positive(t, est.Compute)
	assert.Contains(t, est.Detail, "the rest from its model blob's GGUF header (")
	t.Logf("daemon: %s", est.Detail)
}
