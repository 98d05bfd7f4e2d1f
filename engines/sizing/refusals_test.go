package sizing

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
)

// The refusals not covered beside their happy paths, each with its code and message.

func TestUnparsedSourceIsRefused(t *testing.T) {
	est, err := (&Sizer{}).Estimate(context.Background(), source.Source{Raw: "x"}, 0)
	requireCode(t, err, api.CodeInvalidSource, `source "x" has no kind; parse it with source.Parse first`)
	assert.Equal(t, api.SizeUnknown, est.Method)
}

func TestAdapterGGUFIsNotAModel(t *testing.T) {
	// A LoRA adapter: a valid GGUF with no tensors and general.type "adapter".
	var b []byte
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str := func(s string) { u64(uint64(len(s))); b = append(b, s...) }
	kv := func(k, v string) { str(k); u32(8); str(v) }
	b = append(b, "GGUF"...)
	u32(3)
	u64(0) // tensors
	u64(3) // metadata
	kv("general.architecture", "llama")
	kv("general.type", "adapter")
	kv("adapter.type", "lora")
	path := filepath.Join(t.TempDir(), "lora.gguf")
	require.NoError(t, os.WriteFile(path, b, 0o600))

	_, err := (&Sizer{}).Estimate(context.Background(), parse(t, path), 0)
	requireCode(t, err, api.CodeInvalidSource, `the GGUF is of type "adapter" (llama), not a model llama-server can serve alone`)
}

func TestUnreadableLocalFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a mode-000 file")
	}
	path, _ := writeModel(t, "sim-tiny", nil)
	require.NoError(t, os.Chmod(path, 0))
	_, err := (&Sizer{}).Estimate(context.Background(), parse(t, path), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "cannot read model file")
}

func TestRemoteGGUFOddServers(t *testing.T) {
	header := "GGUF\x03\x00\x00\x00"
	mux := http.NewServeMux()
	// Ignores the range, streams (no Content-Length).
	mux.HandleFunc("/stream.gguf", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, header+strings.Repeat("\x00", 1<<16))
	})
	// Honours the range but gives no total, and refuses HEAD.
	mux.HandleFunc("/nototal.gguf", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Range", "bytes 0-7/*")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, header)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s := &Sizer{Guard: allowLoopback(srv.Client())}

	_, err := s.Estimate(context.Background(), parse(t, srv.URL+"/stream.gguf"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "the server gives no total size")

	_, err = s.Estimate(context.Background(), parse(t, srv.URL+"/nototal.gguf"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "the server gives no total size")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.Estimate(ctx, parse(t, srv.URL+"/nototal.gguf"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "context canceled")
}

func TestHailoLibraryOddAnswers(t *testing.T) {
	dir := t.TempDir()
	digest500 := strings.Repeat("5", 64)
	writeManifest(t, dir, "err:1b", `{"hef_h10h":"`+digest500+`"}`)
	writeManifest(t, dir, "nototal:1b", `{"hef_filename":"NoTotal.hef"}`)
	writeManifest(t, dir, "whole:1b", `{"hef_filename":"Whole.hef"}`)
	writeManifest(t, dir, "stream:1b", `{"hef_filename":"Stream.hef"}`)
	writeManifest(t, dir, "down:1b", `{"hef_filename":"Down.hef"}`)
	writeManifest(t, dir, "huge:1b", `{"hef_h10h":"`+qwen2Digest+`","license":"`+strings.Repeat("x", maxManifest)+`"}`)

	lib := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/blob/sha256_" + digest500:
			http.Error(w, "library on fire", http.StatusInternalServerError)
		case "/v5.4.0/blob/NoTotal.hef":
			w.Header().Set("Content-Range", "bytes 0-0/*")
			w.WriteHeader(http.StatusPartialContent)
			_, _ = w.Write([]byte{0})
		case "/v5.4.0/blob/Whole.hef": // ignores the range: the size is the Content-Length
			w.Header().Set("Content-Length", "1790000000")
			w.WriteHeader(http.StatusOK)
		case "/v5.4.0/blob/Stream.hef":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
		case "/v5.4.0/blob/Down.hef":
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(lib.Close)
	s := &Sizer{Guard: allowLoopback(lib.Client()), HailoManifestsDir: dir, HailoLibraryURL: lib.URL}
	ctx := context.Background()

	_, err := s.Estimate(ctx, parse(t, "hailo://err:1b"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "cannot size: HEAD "+lib.URL+"/blob/sha256_"+digest500+": HTTP 500")

	_, err = s.Estimate(ctx, parse(t, "hailo://nototal:1b"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "gave no total in its Content-Range")

	est, err := s.Estimate(ctx, parse(t, "hailo://whole:1b"), 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1_790_000_000), est.Bytes)
	assert.Equal(t, api.SizeRange, est.Method)

	_, err = s.Estimate(ctx, parse(t, "hailo://stream:1b"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "ignored the range and gave no Content-Length")

	_, err = s.Estimate(ctx, parse(t, "hailo://down:1b"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "HTTP 503")
	assert.NotContains(t, err.Error(), "maintenance", "a remote body never comes back in a refusal")

	_, err = s.Estimate(ctx, parse(t, "hailo://huge:1b"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, filepath.Join(dir, "huge", "1b", "manifest.json")+" is over 1048576 bytes")
}

func TestOllamaOddAnswers(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/library/busy/manifests/latest", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "slow down", http.StatusTooManyRequests)
	})
	mux.HandleFunc("/v2/library/huge/manifests/latest", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"layers":[`+strings.Repeat(" ", maxOllamaDocument)+`]}`)
	})
	mux.HandleFunc("/v2/library/qwen2/manifests/1.5b", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"layers":[{"mediaType":"application/vnd.ollama.image.model","size":1000}]}`)
	})
	// A daemon that shows the model but does not list it, and one that fails.
	mux.HandleFunc("POST /nolist/api/show", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"model_info":{}}`)
	})
	mux.HandleFunc("GET /nolist/api/tags", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"models":[]}`)
	})
	mux.HandleFunc("POST /broken/api/show", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s := &Sizer{Guard: allowLoopback(srv.Client()), OllamaRegistry: srv.URL}
	ctx := context.Background()

	_, err := s.Estimate(ctx, parse(t, "ollama://busy"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "HTTP 429")
	assert.NotContains(t, err.Error(), "slow down", "a remote body never comes back in a refusal")

	_, err = s.Estimate(ctx, parse(t, "ollama://huge"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "answered over 4 MiB")

	for _, d := range []string{"/nolist", "/broken"} {
		s.OllamaDaemon = srv.URL + d
		est, err := s.Estimate(ctx, parse(t, "ollama://qwen2:1.5b"), 0)
		require.NoError(t, err, d)
		assert.Equal(t, api.SizeRegistry, est.Method, "%s: the registry answers when the daemon cannot", d)
		assert.Equal(t, int64(1000)+Overhead, est.Bytes, d)
	}
}
