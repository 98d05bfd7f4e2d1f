package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/internal/seal"
)

// filesFixture is an agent serving one file of its store on the sealed channel, and clients of
// each kind.
type filesFixture struct {
	s              *served
	addr, sum      string
	content        []byte
	peer, console  *http.Client
	url            func(sum string) string
	namespaceToken string
}

func newFilesFixture(t *testing.T, mod func(*Config)) *filesFixture {
	a := newBareAgent(t, "x86-nvidia", mod)
	content := []byte(strings.Repeat("model bytes ", 100000))
	require.NoError(t, os.MkdirAll(filepath.Join(a.store.Path(), "hf", "o", "r"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(a.store.Path(), "hf", "o", "r", "m.gguf"), content, 0o600))
	d := sha256.Sum256(content)
	sum := hex.EncodeToString(d[:])
	s := serve(t, a, nil)
	ca, err := seal.NewCA("test", s.secret)
	require.NoError(t, err)
	addr := sealedServe(t, s.srv, sealIdentity(t, ca, a.Name(), seal.RoleAgent))
	over := func(id *seal.Identity) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: id.ClientConfig(seal.Peer{Name: a.Name()})}}
	}
	ns, err := api.NamespaceToken(api.AdminToken(s.secret), "team-a")
	require.NoError(t, err)
	// The file is found by the store's walk (hashed then, having no record), and gossiped.
	waitFor(t, func() bool {
		f := a.Host().Files
		return f != nil && slices.Contains(f.Holds, sum[:api.HoldPrefix])
	}, "the store's file to be held")
	return &filesFixture{s: s, addr: addr, sum: sum, content: content,
		peer:    over(sealIdentity(t, ca, "beta", seal.RoleAgent)),
		console: over(sealIdentity(t, ca, "laptop", seal.RoleConsole)),
		url:     func(sum string) string { return "https://" + addr + FilesPath + sum }, namespaceToken: ns}
}

func get(t *testing.T, c *http.Client, url string, h map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestFilesAreServedToAgentsByDigestWithRanges(t *testing.T) {
	f := newFilesFixture(t, nil)
	resp, body := get(t, f.peer, f.url(f.sum), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, f.content, body)

	resp, body = get(t, f.peer, f.url(f.sum), map[string]string{"Range": "bytes=10-19"})
	require.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Equal(t, f.content[10:20], body)

	// A range past the end.
	resp, _ = get(t, f.peer, f.url(f.sum), map[string]string{"Range": "bytes=" + strconv.Itoa(len(f.content)+5) + "-"})
	assert.Equal(t, http.StatusRequestedRangeNotSatisfiable, resp.StatusCode)

	// A digest nobody here holds, and names that are not digests.
	other := strings.Repeat("0", 64)
	resp, _ = get(t, f.peer, f.url(other), nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	for _, bad := range []string{strings.ToUpper(f.sum), f.sum[:63], f.sum + "0", "..%2f..%2fetc%2fpasswd"} {
		resp, _ = get(t, f.peer, f.url(bad), nil)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}
}

// Files are named by content, not by namespace: the route is the agents' alone. A console, a
// namespace token, even the admin token, are refused.
func TestFilesAreRefusedToAllButTheMeshsAgents(t *testing.T) {
	f := newFilesFixture(t, nil)
	resp, _ := get(t, f.console, f.url(f.sum), nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a console")
	resp, _ = get(t, f.console, f.url(f.sum), map[string]string{"Authorization": "Bearer " + f.namespaceToken})
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a namespace token")
	resp, _ = get(t, http.DefaultClient, f.s.url+FilesPath+f.sum, map[string]string{"Authorization": "Bearer " + api.AdminToken(f.s.secret)})
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "the admin token on loopback")
	resp, _ = get(t, f.console, f.url(f.sum), map[string]string{PrincipalHeader: "admin"})
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "an asserted principal from a console")
}

func TestFilesUploadCapAndRateAreShown(t *testing.T) {
	f := newFilesFixture(t, func(c *Config) { c.ServeUploads = 1; c.ServeRate = 200 << 10 })
	fs := f.s.a.Host().Files
	assert.Equal(t, 1, fs.MaxUploads)
	assert.Equal(t, int64(200<<10), fs.Rate)

	// The one upload slot is taken by a slow copy (paced at 200 KiB/s, the file is 1.2 MB);
	// a second copy meanwhile is refused with 429.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url(f.sum), nil)
	resp, err := f.peer.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	second, _ := get(t, f.peer, f.url(f.sum), nil)
	assert.Equal(t, http.StatusTooManyRequests, second.StatusCode)
	cancel()
}

func TestAChangedFileIsNotServed(t *testing.T) {
	f := newFilesFixture(t, nil)
	p := filepath.Join(f.s.a.store.Path(), "hf", "o", "r", "m.gguf")
	require.NoError(t, os.WriteFile(p, []byte("other bytes"), 0o600))
	later := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(p, later, later))
	resp, _ := get(t, f.peer, f.url(f.sum), nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the record no longer fits the file")
	_, fresh := download.ReadDigest(p)
	assert.False(t, fresh)
}
