package llamaserver

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
)

// TestProjectorPulledWithTheModel: a model's projector is downloaded after it, stored like a
// model, reported as the projector's progress, and needed before the engine starts; only a
// model with one reads images. (The real llama-server loading it: gateway's
// TestRealLlamaServerProjector.)
func TestProjectorPulledWithTheModel(t *testing.T) {
	content, err := os.ReadFile(modelFile(t))
	require.NoError(t, err)
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		http.ServeContent(w, r, "x.gguf", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(srv.Close)
	d := newDriver(t, func(c *Config) {
		c.HFBase = srv.URL
		c.Download = download.Options{AllowHosts: []string{"127.0.0.1"}}
	})
	m := engines.Model{ID: "v", Source: "hf://acme/vision-GGUF/vision-Q8_0.gguf", MMProj: "hf://acme/vision-GGUF/mmproj-f16.gguf"}
	require.Error(t, d.ReadsImages(engines.Model{ID: "t", Source: m.Source}))
	assert.ErrorContains(t, d.ReadsImages(engines.Model{ID: "t", Source: m.Source}), "without a projector (mmproj)")
	require.NoError(t, d.ReadsImages(m))

	var last engines.Progress
	require.NoError(t, d.Pull(t.Context(), m, func(p engines.Progress) { last = p }))
	size := int64(len(content))
	assert.Equal(t, engines.Progress{Status: "projector: success", Completed: size, Total: size}, last, "the projector comes last")
	assert.Equal(t, []string{"/acme/vision-GGUF/resolve/main/vision-Q8_0.gguf", "/acme/vision-GGUF/resolve/main/mmproj-f16.gguf"}, paths)
	assert.FileExists(t, filepath.Join(d.cfg.ModelsDir, "hf", "acme", "vision-GGUF", "mmproj-f16.gguf"))

	// A projector that is not there stops the start before any engine runs.
	gone := engines.Model{ID: "g", Source: modelFile(t), MMProj: filepath.Join(t.TempDir(), "mmproj.gguf")}
	_, err = d.Load(t.Context(), gone)
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	assert.ErrorContains(t, err, "projector: model file")
	assert.ErrorContains(t, err, "(pull it first)")
}
