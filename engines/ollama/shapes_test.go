package ollama

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/engines/ollama/ollamatest"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// answer is a request's status and the key paths of its answer (of every NDJSON line, merged).
func answer(t *testing.T, method, url, body string) (int, map[string]bool) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	keys := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var v any
		if json.Unmarshal([]byte(line), &v) == nil {
			enginetest.KeyPaths(v, "", keys)
		}
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, keys
}

// The Ollama simulator answers in the real Ollama's shape: the same status, and no member the
// real one lacks, for the routes the drivers and the gateway use.
func TestConformanceShapes(t *testing.T) {
	gguf := enginetest.TinyGGUF(t)
	daemon := enginetest.StartOllama(t)
	daemon.Create(t, "tiny", gguf)
	sim := ollamatest.StartOllama(t, func(c *ollamasim.Config) { c.Preloaded = []string{"qwen2.5:0.5b"} })
	models := map[string]string{sim.URL(): "qwen2.5:0.5b", daemon.URL: "tiny"}
	for _, c := range []struct{ name, method, path, body string }{
		{"version", "GET", "/api/version", ""},
		{"tags", "GET", "/api/tags", ""},
		{"show", "POST", "/api/show", `{"model":"MODEL"}`},
		{"load", "POST", "/api/generate", `{"model":"MODEL","keep_alive":-1,"options":{"num_ctx":1024}}`},
		{"ps", "GET", "/api/ps", ""},
		{"chat", "POST", "/api/chat", `{"model":"MODEL","messages":[{"role":"user","content":"hello"}],"options":{"num_predict":4,"num_ctx":1024}}`},
		{"chat whole", "POST", "/api/chat", `{"model":"MODEL","stream":false,"messages":[{"role":"user","content":"hello"}],"options":{"num_predict":4,"num_ctx":1024}}`},
		{"unknown model", "POST", "/api/chat", `{"model":"no-such-model","messages":[{"role":"user","content":"hello"}]}`},
		{"show unknown", "POST", "/api/show", `{"model":"no-such-model"}`},
		{"unload", "POST", "/api/generate", `{"model":"MODEL","keep_alive":0}`},
	} {
		got := map[string]map[string]bool{}
		status := map[string]int{}
		for url, model := range models {
			status[url], got[url] = answer(t, c.method, url+c.path, strings.ReplaceAll(c.body, "MODEL", model))
		}
		assert.Equal(t, status[daemon.URL], status[sim.URL()], "%s: status", c.name)
		var extra []string
		for k := range got[sim.URL()] {
			// /api/show says what the model has: its architecture's figures, a licence, a
			// system prompt. The two daemons hold different models.
			if c.name == "show" && (strings.HasPrefix(k, "model_info.") || k == "license" || k == "system") {
				continue
			}
			if !got[daemon.URL][k] {
				extra = append(extra, k)
			}
		}
		sort.Strings(extra)
		assert.Empty(t, extra, "%s: members the simulator has and the real Ollama does not", c.name)
	}
}
