package routeprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/sim/gguf"
	"github.com/llmkube/mesh/sim/hailo"
	"github.com/llmkube/mesh/sim/llamaserver"
	"github.com/llmkube/mesh/sim/ollama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func startHailo(t *testing.T) *hailo.Server {
	t.Helper()
	cfg := hailo.FastConfig(t.TempDir())
	cfg.Preloaded = []string{"qwen2:1.5b"}
	s, err := hailo.Start(t.Context(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func route(t *testing.T, rep Report, method, path, note string) RouteResult {
	t.Helper()
	for _, r := range rep.Routes {
		if r.Method == method && r.Path == path && r.Note == note {
			return r
		}
	}
	t.Fatalf("no %s %s (%s) in the report", method, path, note)
	return RouteResult{}
}

func TestHailoSim(t *testing.T) {
	s := startHailo(t)
	rep, err := Run(t.Context(), s.URL(), nil)
	require.NoError(t, err)
	assert.Equal(t, api.RuntimeHailoOllama, rep.Kind)
	assert.Equal(t, "0.5.1", rep.Version)
	for _, r := range rep.Routes {
		assert.Equal(t, OK, r.Verdict, "%s %s (%s): %s; expected %s", r.Method, r.Path, r.Note, r.Observation, r.Expected)
	}
	assert.Zero(t, rep.Differs())

	// The documented quirks show as such.
	for _, p := range []struct{ method, path string }{
		{"GET", "/v1/models"}, {"POST", "/v1/completions"}, {"POST", "/v1/responses"},
		{"POST", "/api/embed"}, {"GET", "/health"}, {"GET", "/metrics"},
	} {
		assert.Equal(t, 404, route(t, rep, p.method, p.path, "").Status, p.path)
	}
	assert.Equal(t, 500, route(t, rep, "POST", "/api/chat", "form content type").Status)
	show := route(t, rep, "POST", "/api/show", "")
	assert.Equal(t, 200, show.Status)
	assert.Contains(t, show.Observation, "not found")
	assert.Contains(t, route(t, rep, "POST", "/v1/chat/completions", "stream:true").Observation, "streaming not supported")
	assert.Contains(t, route(t, rep, "GET", "/api/tags", "").Observation, "qwen2:1.5b (4096 bytes)")
	assert.Contains(t, route(t, rep, "GET", "/hailo/v1/list", "").Observation, "5 manifests")

	// Nothing was pulled, loaded, or deleted; the simulator's own route was not called.
	st := s.Stats()
	assert.Zero(t, st.Pulls)
	assert.Zero(t, st.Loads)
	assert.Zero(t, st.Unloads)
	assert.Empty(t, st.LibraryRequests)
	assert.NotContains(t, st.Requests, "GET /_sim/stats")
	for key := range st.Requests {
		assert.False(t, strings.HasPrefix(key, "GET /_sim"), key)
	}
	_, tags := get(t, s.URL()+"/api/tags")
	assert.Contains(t, tags, "qwen2:1.5b", "the model is still there")
}

func TestReportOutputs(t *testing.T) {
	s := startHailo(t)
	rep, err := Run(t.Context(), strings.TrimPrefix(s.URL(), "http://")+"/", nil) // bare host:port works
	require.NoError(t, err)
	assert.Equal(t, s.URL(), rep.URL)

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	out := table.String()
	for _, want := range []string{"kind", "hailo-ollama (says version 0.5.1)", "VERDICT", "/v1/models", "404",
		"/v1/chat/completions (stream:true)", "/api/chat (form content type)", "routes, " + strconv.Itoa(len(rep.Routes)) + " as the driver expects, 0 differ"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "expected:", "nothing differs")

	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var back struct {
		URL    string
		Kind   string
		Routes []map[string]any
	}
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, "hailo-ollama", back.Kind)
	require.NotEmpty(t, back.Routes)
	for _, key := range []string{"method", "path", "status", "observation", "verdict", "expected"} {
		assert.Contains(t, back.Routes[0], key)
	}
}

// A hailo-ollama that changed the way 5.4 did (404 for an unknown model on /api/show, a
// /v1/models route) shows those routes as differing, with what the driver expected.
func TestChangedHailoShowsDiffers(t *testing.T) {
	s := startHailo(t)
	target, _ := url.Parse(s.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	changed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/show":
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"model 'x' not found"}`)
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[]}`)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(changed.Close)

	rep, err := Run(t.Context(), changed.URL, nil)
	require.NoError(t, err)
	assert.Equal(t, api.RuntimeHailoOllama, rep.Kind)
	assert.Equal(t, 2, rep.Differs())
	show := route(t, rep, "POST", "/api/show", "")
	assert.Equal(t, Differs, show.Verdict)
	assert.Equal(t, 404, show.Status)
	assert.Contains(t, show.Expected, "200 with")
	assert.Equal(t, Differs, route(t, rep, "GET", "/v1/models", "").Verdict)

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	assert.Contains(t, table.String(), "expected:")
	assert.Contains(t, table.String(), "2 differ")
}

func startLlama(t *testing.T, metrics bool) *llamaserver.Server {
	t.Helper()
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	spec, _ := gguf.Preset("sim-tiny")
	require.NoError(t, gguf.Write(model, spec)) // the simulator reads the header, as llama-server does
	cfg := llamaserver.DefaultConfig()
	cfg.ModelPath = model
	cfg.Alias = "tiny"
	cfg.Metrics = metrics
	cfg.LoadDelay = 0
	s, err := llamaserver.Start(t.Context(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("llama-server simulator never became ready")
	}
	return s
}

func TestLlamaServerSim(t *testing.T) {
	s := startLlama(t, true)
	rep, err := Run(t.Context(), s.URL(), nil)
	require.NoError(t, err)
	assert.Equal(t, api.RuntimeLlamaServer, rep.Kind)
	assert.NotEmpty(t, rep.Version)
	for _, r := range rep.Routes {
		assert.Equal(t, OK, r.Verdict, "%s %s: %s; expected %s", r.Method, r.Path, r.Observation, r.Expected)
	}
	assert.Contains(t, route(t, rep, "GET", "/v1/models", "").Observation, "tiny")
	assert.Contains(t, route(t, rep, "POST", "/v1/chat/completions", "stream:true, 1 token").Observation, "[DONE] true")
}

func TestLlamaServerWithoutMetricsDiffers(t *testing.T) {
	s := startLlama(t, false)
	rep, err := Run(t.Context(), s.URL(), nil)
	require.NoError(t, err)
	m := route(t, rep, "GET", "/metrics", "")
	assert.Equal(t, Differs, m.Verdict)
	assert.Equal(t, 501, m.Status)
	assert.Equal(t, 1, rep.Differs())
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, err = Run(t.Context(), "http://"+addr, nil)
	require.ErrorContains(t, err, "cannot reach")

	_, err = Run(t.Context(), "ftp://x", nil)
	require.ErrorContains(t, err, "want http://host:port")
}

func TestUnknownEngine(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html>hello</html>")
	}))
	t.Cleanup(other.Close)
	rep, err := Run(t.Context(), other.URL, nil)
	require.ErrorIs(t, err, ErrUnknownEngine)
	assert.Empty(t, rep.Kind)
	require.Len(t, rep.Routes, 3, "the detection requests are reported")
	for _, r := range rep.Routes {
		assert.Equal(t, Differs, r.Verdict)
		assert.Equal(t, 200, r.Status)
	}
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	assert.Contains(t, table.String(), "kind    unknown")
}

func TestCancelledContext(t *testing.T) {
	s := startHailo(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Run(ctx, s.URL(), nil)
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.Canceled), err)
}

func TestOllamaSim(t *testing.T) {
	cfg := ollama.DefaultConfig()
	cfg.Preloaded = []string{"llama3.2:1b"}
	s, err := ollama.Start(t.Context(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })

	rep, err := Run(t.Context(), s.URL(), nil)
	require.NoError(t, err)
	assert.Equal(t, api.RuntimeOllama, rep.Kind)
	assert.Equal(t, cfg.Version, rep.Version)
	for _, r := range rep.Routes {
		assert.Equal(t, OK, r.Verdict, "%s %s: %s; expected %s", r.Method, r.Path, r.Observation, r.Expected)
	}
	assert.Equal(t, 404, route(t, rep, "GET", "/hailo/v1/list", "").Status)
	assert.Equal(t, 404, route(t, rep, "GET", "/health", "").Status)
	assert.Contains(t, route(t, rep, "GET", "/api/tags", "").Observation, "llama3.2:1b")

	// Nothing pulled, loaded or deleted.
	st := s.Stats()
	assert.Zero(t, st.Pulls)
	assert.Zero(t, st.Loads)
	assert.Zero(t, st.Generations)
	assert.Empty(t, st.Registry)
	assert.Zero(t, st.Requests["DELETE /api/delete"]-1, "one delete, of the probe's unknown model")
	_, tags := get(t, s.URL()+"/api/tags")
	assert.Contains(t, tags, "llama3.2:1b", "the model is still there")
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// Only llama-server's one-token chat may name the model an engine serves; every other request
// names ProbeModel, so a delete, pull or load can never touch a real model.
func TestOnlyTheProbeModelIsNamed(t *testing.T) {
	for kind, plan := range map[string][]check{"hailo": hailoChecks, "ollama": ollamaChecks, "llama": llamaChecks} {
		for _, c := range plan {
			if strings.Contains(c.body, "%SERVED%") {
				assert.True(t, kind == "llama" && c.path == "/v1/chat/completions", "%s %s %s names the served model", kind, c.method, c.path)
			}
			if c.body != "" && !strings.Contains(c.body, "%SERVED%") {
				assert.Contains(t, c.body, `"model":"%MODEL%"`, "%s %s %s", kind, c.method, c.path)
			}
			if c.path == "/api/generate" || c.path == "/api/chat" {
				assert.NotRegexp(t, `"keep_alive"`, c.body, "no unload request")
			}
		}
	}
}
