package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/engines/download"
)

// Hailo's library as the mirror's upstream: a HEF in both the 5.1.1 and the 5.4 forms.
func hailoUpstream(t *testing.T, hef []byte) (*httptest.Server, string, *atomic.Int32) {
	d := sha256.Sum256(hef)
	sum := hex.EncodeToString(d[:])
	var blobs atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/blob/sha256_" + sum, "/v5.4.0/blob/Qwen2-1.5B.hef":
			blobs.Add(1)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(hef))
		case "/v5.4.0/blob/Qwen2-1.5B.sha256":
			w.Write([]byte(sum + "  Qwen2-1.5B.hef\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s, sum, &blobs
}

func TestHailoLibraryMirrorKeepsWhatItFetched(t *testing.T) {
	hef := []byte(strings.Repeat("HEF bytes ", 50000))
	up, sum, blobs := hailoUpstream(t, hef)
	a := newBareAgent(t, "x86-nvidia", func(c *Config) {
		c.HailoLibrary = &HailoLibrary{Upstream: up.URL, Download: download.Options{AllowPrivate: true, RetryBackoff: time.Millisecond}}
	})
	s := serve(t, a, nil)
	get := func(path string) (int, []byte) {
		resp, body := get(t, http.DefaultClient, s.url+HailoLibraryPath+strings.TrimPrefix(path, "/"), nil)
		return resp.StatusCode, body
	}
	code, body := get("/blob/sha256_" + sum)
	require.Equal(t, http.StatusOK, code, string(body))
	assert.Equal(t, hef, body)
	code, body = get("/v5.4.0/blob/Qwen2-1.5B.hef")
	require.Equal(t, http.StatusOK, code, string(body))
	assert.Equal(t, hef, body)
	code, body = get("/v5.4.0/blob/Qwen2-1.5B.sha256")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), sum)
	assert.Equal(t, int32(1), blobs.Load(), "the HEF was fetched once, then served from the store")

	// Kept in the store, it is what the host serves its peers too.
	waitFor(t, func() bool { _, ok := a.files.lookup(sum); return ok }, "the HEF to be held")
	up.Close()
	code, body = get("/blob/sha256_" + sum)
	require.Equal(t, http.StatusOK, code, "served from the store with the library gone")
	assert.Equal(t, hef, body)

	code, _ = get("/blob/sha256_" + strings.ToUpper(sum))
	assert.Equal(t, http.StatusBadRequest, code)
	code, _ = get("/blob/sha256_" + strings.Repeat("0", 64))
	assert.Equal(t, http.StatusBadGateway, code, "a digest no one holds, and no library")
}

func TestHailoLibraryMirrorIsForThisHostOnly(t *testing.T) {
	up, sum, _ := hailoUpstream(t, []byte("hef"))
	a := newBareAgent(t, "x86-nvidia", func(c *Config) {
		c.HailoLibrary = &HailoLibrary{Upstream: up.URL, Download: download.Options{AllowPrivate: true, RetryBackoff: time.Millisecond}}
	})
	s := serve(t, a, nil)
	r := httptest.NewRequest(http.MethodGet, HailoLibraryPath+"blob/sha256_"+sum, nil)
	r.RemoteAddr = "192.0.2.9:40000" // another host, in plain
	w := httptest.NewRecorder()
	s.srv.Handler().ServeHTTP(w, r)
	assert.Equal(t, http.StatusForbidden, w.Code)
}
