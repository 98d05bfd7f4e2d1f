package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/internal/seal"
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

// hailoHolder is an agent whose mirror got the library's 5.4-form HEF hef (and verified it),
// serving the mesh on the sealed channel at addr; as makes clients of that channel.
type hailoHolder struct {
	a     *Agent
	s     *served
	sum   string
	blobs *atomic.Int32
	addr  string
	as    func(name, role string) *http.Client
}

const hef54 = "v5.4.0/blob/Qwen2-1.5B"

func newHailoHolder(t *testing.T, hef []byte) hailoHolder {
	up, sum, blobs := hailoUpstream(t, hef)
	a := newBareAgent(t, "x86-nvidia", func(c *Config) {
		c.HailoLibrary = &HailoLibrary{Upstream: up.URL, Download: download.Options{AllowPrivate: true, RetryBackoff: time.Millisecond}}
	})
	s := serve(t, a, nil)
	resp, body := get(t, http.DefaultClient, s.url+HailoLibraryPath+hef54+".hef", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	waitFor(t, func() bool { _, ok := a.files.lookup(sum); return ok }, "the HEF to be held")
	ca, err := seal.NewCA("test", s.secret)
	require.NoError(t, err)
	addr := sealedServe(t, s.srv, sealIdentity(t, ca, a.Name(), seal.RoleAgent))
	as := func(name, role string) *http.Client {
		id := sealIdentity(t, ca, name, role)
		return &http.Client{Transport: &http.Transport{TLSClientConfig: id.ClientConfig(seal.Peer{Name: a.Name()})}}
	}
	return hailoHolder{a: a, s: s, sum: sum, blobs: blobs, addr: addr, as: as}
}

// An offline host's mirror gets a 5.4-form HEF from a peer: the library unreachable, the
// companion (the HEF's digest) comes from the agent that verified the HEF when it got it, over
// the sealed channel, and then the HEF itself by that digest.
func TestHailoLibraryMirrorOfflineGetsA54HEFFromAPeer(t *testing.T) {
	hef := []byte(strings.Repeat("HEF 5.4 bytes ", 40000))
	h := newHailoHolder(t, hef)
	sum := h.sum
	asAgent := h.as("pi5b", seal.RoleAgent)
	peers := &download.Peers{}
	peers.Use(func(s string) []download.Peer {
		return []download.Peer{{Name: h.a.Name(), URL: "https://" + h.addr + FilesPath + s, Client: asAgent}}
	})
	peers.UseAgents(func(p string) []download.Peer {
		return []download.Peer{
			{Name: "pi5x", URL: "https://" + h.addr + strings.Replace(p, "Qwen2", "Other", 1), Client: asAgent}, // knows nothing of it: the next is asked
			{Name: h.a.Name(), URL: "https://" + h.addr + p, Client: asAgent},
		}
	})
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // the library: nothing answers there
	offline := newBareAgent(t, "x86-nvidia", func(c *Config) {
		c.HailoLibrary = &HailoLibrary{Upstream: dead.URL, Download: download.Options{AllowPrivate: true, RetryBackoff: time.Millisecond, Peers: peers}}
	})
	off := serve(t, offline, nil)

	// hailo-ollama 5.4 asks the companion first, then the HEF.
	resp, body := get(t, http.DefaultClient, off.url+HailoLibraryPath+hef54+".sha256", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, sum+"  Qwen2-1.5B.hef\n", string(body))
	resp, body = get(t, http.DefaultClient, off.url+HailoLibraryPath+hef54+".hef", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, hef, body)
	assert.Equal(t, int32(1), h.blobs.Load(), "the HEF came from the peer, not the library")

	// The offline host recorded the digest too: it tells it on, and needs no peer for it now.
	waitFor(t, func() bool { _, ok := offline.files.lookup(sum); return ok }, "the copy to be held")
	peers.UseAgents(func(string) []download.Peer { return nil })
	resp, body = get(t, http.DefaultClient, off.url+HailoLibraryPath+hef54+".sha256", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, sum+"  Qwen2-1.5B.hef\n", string(body))

	// A path no one recorded: no peer knows it, and the mirror says so.
	resp, body = get(t, http.DefaultClient, off.url+HailoLibraryPath+"v5.4.0/blob/Other.hef", nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, string(body))
}

// A holder tells a HEF's digest to the mesh's agents only, for a well-formed library path whose
// HEF it still holds.
func TestHailoLibraryDigestsAreToldToAgentsOnly(t *testing.T) {
	h := newHailoHolder(t, []byte(strings.Repeat("HEF ", 1000)))
	agent := h.as("other", seal.RoleAgent)
	url := "https://" + h.addr + HailoDigestsPath + hef54 + ".sha256"
	resp, body := get(t, agent, url, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, h.sum+"  Qwen2-1.5B.hef\n", string(body))

	resp, _ = get(t, h.as("laptop", seal.RoleConsole), url, nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a console")
	resp, _ = get(t, http.DefaultClient, h.s.url+HailoDigestsPath+hef54+".sha256", nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "plain HTTP, even from loopback")
	for _, bad := range []string{"v5.4.0/blob/..%2f..%2fstate.sha256", hef54 + ".hef", "blob/x.sha256", "v5.4.0/x/../blob/Qwen2-1.5B.sha256x"} {
		resp, _ = get(t, agent, "https://"+h.addr+HailoDigestsPath+bad, nil)
		assert.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, resp.StatusCode, bad)
	}
	resp, _ = get(t, agent, "https://"+h.addr+HailoDigestsPath+"v5.4.0/blob/Unknown.sha256", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "no record")

	// The HEF gone from the store: the host no longer vouches for its digest.
	held, _ := h.a.files.lookup(h.sum)
	require.NoError(t, os.Remove(held.Path))
	h.a.files.landed()
	waitFor(t, func() bool { _, ok := h.a.files.lookup(h.sum); return !ok }, "the HEF to be gone")
	resp, _ = get(t, agent, url, nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "a record whose HEF is gone")
}
