package sizing

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/download"
)

// secretPage stands for what lives on the LAN or the host (a router's page, a cloud metadata
// answer): it counts the requests that reach it, and answers with a secret.
func secretPage(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Range", "bytes 0-7/100")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write([]byte("SECRET-TOKEN-abcdef"))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// Sizing is the first request the agent makes for a source: with the default guard it reaches
// no loopback (or private, or link-local) address, for any kind of source, and the refusal says
// why in the agent's words.
func TestSizingIsGuarded(t *testing.T) {
	srv, hits := secretPage(t)
	dir := t.TempDir()
	writeManifest(t, dir, "m:1b", `{"hef_h10h":"`+strings.Repeat("a", 64)+`"}`)
	s := &Sizer{HFBase: srv.URL, OllamaRegistry: srv.URL, HailoLibraryURL: srv.URL, HailoManifestsDir: dir}
	ctx := context.Background()
	for _, src := range []string{srv.URL + "/m.gguf", "hf://o/r/m.gguf", "ollama://qwen2:1.5b", "hailo://m:1b"} {
		_, err := s.Estimate(ctx, parse(t, src), 0)
		requireCode(t, err, api.CodeInvalidSource, "a loopback address")
		assert.NotContains(t, err.Error(), "SECRET", src)
	}
	assert.Zero(t, hits.Load(), "no request reached the loopback server")

	// With the guard allowing private addresses (--allow-private-downloads) the same source is
	// sized — and an answer that is not a GGUF does not come back in the refusal either.
	s = &Sizer{Guard: download.Options{AllowPrivate: true}}
	_, err := s.Estimate(ctx, parse(t, srv.URL+"/m.gguf"), 0)
	requireCode(t, err, api.CodeInvalidSource, "is not a GGUF file")
	assert.NotContains(t, err.Error(), "SECRET")
	assert.NotZero(t, hits.Load())
}

// A redirect is checked like the first request: a host on the allowlist (which may be private:
// naming it is consent) cannot send the sizer on to one that is not.
func TestSizingRedirectIsGuarded(t *testing.T) {
	secret, hits := secretPage(t)
	hop := httptest.NewServer(http.RedirectHandler(secret.URL+"/m.gguf", http.StatusFound))
	t.Cleanup(hop.Close)
	s := &Sizer{Guard: download.Options{AllowHosts: []string{"localhost"}}}
	_, err := s.Estimate(context.Background(), parse(t, strings.Replace(hop.URL, "127.0.0.1", "localhost", 1)+"/m.gguf"), 0)
	requireCode(t, err, api.CodeInvalidSource, "not on the download allowlist")
	assert.Zero(t, hits.Load())
}

// A server that is not HTTP (an SSH daemon, a database) does not get its banner echoed, and
// its answer reads exactly like a closed port's: sizing tells nothing of what listens where.
func TestSizingIsNeitherBannerGrabberNorPortScanner(t *testing.T) {
	s := &Sizer{Guard: download.Options{AllowPrivate: true}}
	reason := func(addr string) string {
		_, err := s.Estimate(context.Background(), parse(t, "http://"+addr+"/m.gguf"), 0)
		require.Error(t, err)
		return strings.ReplaceAll(err.Error(), addr, "ADDR")
	}
	ssh := reason(listenRaw(t, "SSH-2.0-OpenSSH_9.6 SECRET-BANNER\r\n"))
	assert.NotContains(t, ssh, "SECRET")
	assert.NotContains(t, ssh, "OpenSSH")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	ln.Close()
	assert.Equal(t, reason(closed), ssh)
	assert.Contains(t, ssh, download.ErrNoAnswer.Error())
}

// listenRaw accepts connections on loopback and answers each with banner, whatever is asked.
func listenRaw(t *testing.T, banner string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(banner))
			c.Close()
		}
	}()
	return ln.Addr().String()
}
