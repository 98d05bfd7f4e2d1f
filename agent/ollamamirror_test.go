package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/ollama"
)

// ollamaModel is a model as a daemon keeps it and a registry serves it: a blob and a manifest
// naming it (as config and layer).
type ollamaModel struct {
	blob     []byte
	sum      string
	manifest []byte
}

func newOllamaModel() ollamaModel {
	blob := []byte(strings.Repeat("GGUF weights ", 40000))
	d := sha256.Sum256(blob)
	sum := hex.EncodeToString(d[:])
	man := `{"schemaVersion":2,"config":{"digest":"sha256:` + sum + `","size":1},"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:` + sum + `","size":1}]}`
	return ollamaModel{blob: blob, sum: sum, manifest: []byte(man)}
}

// write keeps the model in a daemon's models folder, as library/tiny:1.
func (m ollamaModel) write(t *testing.T) string {
	dir := t.TempDir()
	n := ollama.Name{Namespace: "library", Model: "tiny", Tag: "1"}
	require.NoError(t, os.MkdirAll(filepath.Dir(ollama.ManifestFile(dir, n)), 0o755))
	require.NoError(t, os.WriteFile(ollama.ManifestFile(dir, n), m.manifest, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "blobs"), 0o755))
	require.NoError(t, os.WriteFile(ollama.BlobFile(dir, m.sum), m.blob, 0o644))
	return dir
}

// The daemon's models folder is served like the store: its blobs by digest, gossiped, and the
// manifests by name, to the mesh's agents only.
func TestOllamaModelsAreServedToAgentsOnly(t *testing.T) {
	m := newOllamaModel()
	models := m.write(t)
	f := newFilesFixture(t, func(c *Config) { c.OllamaMirror = &OllamaMirror{Models: models} })
	a := f.s.a
	waitFor(t, func() bool { return slices.Contains(a.Host().Files.Holds, m.sum[:api.HoldPrefix]) }, "the daemon's blob to be held")

	resp, body := get(t, f.peer, f.url(m.sum), map[string]string{"Range": "bytes=13-25"})
	require.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Equal(t, m.blob[13:26], body)

	manifest := "https://" + f.addr + OllamaManifestPath + "library/tiny/1"
	resp, body = get(t, f.peer, manifest, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, m.manifest, body)
	resp, _ = get(t, f.peer, "https://"+f.addr+OllamaManifestPath+"library/tiny/2", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = get(t, f.peer, "https://"+f.addr+OllamaManifestPath+"library/..%2f..%2fx/1", nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	resp, _ = get(t, f.console, manifest, map[string]string{"Authorization": "Bearer " + f.namespaceToken})
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a namespace token")
	resp, _ = get(t, http.DefaultClient, f.s.url+OllamaManifestPath+"library/tiny/1", map[string]string{"Authorization": "Bearer " + api.AdminToken(f.s.secret)})
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "the admin token on loopback")
	resp, _ = get(t, f.console, f.url(m.sum), nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a console, for a blob")

	// A blob that went from the folder is no longer served.
	require.NoError(t, os.Remove(ollama.BlobFile(models, m.sum)))
	resp, _ = get(t, f.peer, f.url(m.sum), nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// With no peer holding the model, the mirror answers the daemon from the registry: the manifest
// checked, each blob copied into the store verified, sized by the HEAD, its GET redirected to
// its direct URL (another name of the same address), read there with ranges; and only on
// loopback.
func TestOllamaRegistryMirrorFromTheRegistry(t *testing.T) {
	m := newOllamaModel()
	var blobGets int
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/library/tiny/manifests/1":
			w.Write(m.manifest)
		case "/v2/library/tiny/manifests/broken":
			w.Write([]byte(`{"layers":[{"digest":"sha256:00"}]}`))
		case "/v2/library/tiny/blobs/sha256:" + m.sum:
			blobGets++
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(m.blob))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(reg.Close)
	a := newBareAgent(t, "x86-nvidia", func(c *Config) {
		c.OllamaMirror = &OllamaMirror{Registry: reg.URL, Download: download.Options{AllowPrivate: true, RetryBackoff: time.Millisecond}}
	})
	s := serve(t, a, nil)
	v2 := s.url + OllamaRegistryPath

	resp, body := get(t, http.DefaultClient, v2+"library/tiny/manifests/1", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, m.manifest, body)
	resp, _ = get(t, http.DefaultClient, v2+"library/tiny/manifests/broken", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "a manifest that names no digest is not passed on")

	blob := v2 + "library/tiny/blobs/sha256:" + m.sum
	head, err := http.Head(blob)
	require.NoError(t, err)
	head.Body.Close()
	require.Equal(t, http.StatusOK, head.StatusCode)
	assert.Equal(t, int64(len(m.blob)), head.ContentLength)

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, _ = get(t, noFollow, blob, nil)
	require.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode)
	loc, err := resp.Location()
	require.NoError(t, err)
	assert.Equal(t, "::ffff:127.0.0.1", loc.Hostname(), "another host name, which Ollama keeps as the direct URL")
	resp, body = get(t, http.DefaultClient, loc.String(), map[string]string{"Range": "bytes=5-9"})
	require.Equal(t, http.StatusPartialContent, resp.StatusCode, string(body))
	assert.Equal(t, m.blob[5:10], body)
	assert.Equal(t, 1, blobGets, "copied once, by the HEAD")

	resp, _ = get(t, http.DefaultClient, v2+"library/tiny/blobs/sha256:"+strings.ToUpper(m.sum), nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = get(t, http.DefaultClient, v2+"library/tiny/blobs/sha256:"+strings.Repeat("0", 64)+"?direct=1", nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "a blob no one has")

	r := httptest.NewRequest(http.MethodGet, OllamaRegistryPath+"library/tiny/manifests/1", nil)
	r.RemoteAddr = "192.0.2.9:40000" // another host, in plain
	w := httptest.NewRecorder()
	s.srv.Handler().ServeHTTP(w, r)
	assert.Equal(t, http.StatusForbidden, w.Code)

	// Once the daemon's pull ended, the mirror's copies go.
	require.NoError(t, DropOllamaMirrorCopies(a.store.Path()))
	left, _ := filepath.Glob(filepath.Join(OllamaMirrorDir(a.store.Path()), "sha256-*"))
	assert.Empty(t, left)
}
