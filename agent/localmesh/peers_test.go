package localmesh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/sim/simtest"
)

// peersMesh is a mesh of llama-server hosts named names, logging into logs, and a GGUF's origin
// on loopback; the placement request for it names its digest.
func peersMesh(ctx context.Context, t *testing.T, logs *simtest.Buffer, names ...string) (*Mesh, *httptest.Server, api.PlacementRequest, []byte) {
	var hosts []HostSpec
	for _, n := range names {
		hosts = append(hosts, HostSpec{Name: n, Demo: "mac-mini", OS: "darwin", Arch: "arm64", Runtimes: []api.Runtime{api.RuntimeLlamaServer}})
	}
	m, err := Start(ctx, Options{Dir: t.TempDir(), Hosts: hosts, LlamaServer: llamaServer, Fast: true, Log: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	content, err := os.ReadFile(m.Host(names[0]).ModelPath("sim-tiny"))
	require.NoError(t, err)
	d := sha256.Sum256(content)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "tiny.gguf", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(origin.Close)
	return m, origin, api.PlacementRequest{Source: origin.URL + "/tiny.gguf", SHA256: hex.EncodeToString(d[:])}, content
}

// waitHeld waits until host sees, by gossip, n hosts holding the file with digest sum.
func waitHeld(ctx context.Context, t *testing.T, m *Mesh, host, sum string, n int) {
	require.Eventually(t, func() bool {
		v, err := m.Client(host).Mesh(ctx)
		if err != nil {
			return false
		}
		held := 0
		for _, mb := range v.Members {
			if mb.Host != nil && mb.Host.Files != nil && slices.Contains(mb.Host.Files.Holds, sum[:api.HoldPrefix]) {
				held++
			}
		}
		return held == n
	}, 30*time.Second, 50*time.Millisecond)
}

// storeFile is the one GGUF host downloaded into its store.
func storeFile(t *testing.T, m *Mesh, host string) string {
	files, err := filepath.Glob(filepath.Join(m.dir, host, "models", "https", "*", "*.gguf"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	return files[0]
}

// A model one host downloaded reaches another over the sealed channel when the origin is gone:
// sized from the peer's header, copied from the peer, verified against the digest.
func TestModelFromAPeerWithTheOriginGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs simtest.Buffer
	m, origin, req, content := peersMesh(ctx, t, &logs, "a", "b")
	req.Name = "tiny"
	_, err := m.Place(ctx, Placed{Host: "a", Request: req})
	require.NoError(t, err)
	waitHeld(ctx, t, m, "b", req.SHA256, 1)

	origin.Close() // from here, only a has the file
	req.Name = "tiny-b"
	placed, err := m.Place(ctx, Placed{Host: "b", Request: req})
	require.NoError(t, err)
	require.Equal(t, api.StateReady, placed[0].State, placed[0].Reason)
	assert.Contains(t, placed[0].Memory.Detail, "from peer a")
	b, err := os.ReadFile(storeFile(t, m, "b"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(content, b))

	// A digest nobody holds, with the origin gone: refused or failed, nothing lands.
	other := req.SHA256[:63] + "0"
	if other == req.SHA256 {
		other = req.SHA256[:63] + "1"
	}
	req.SHA256, req.Name = other, "tiny-none"
	pl, err := m.Client("b").Place(ctx, req)
	if err == nil {
		pl, err = m.Client("b").WaitPlacement(ctx, pl.ID, 50*time.Millisecond, nil)
		require.NoError(t, err)
		assert.Equal(t, api.StateFailed, pl.State)
	}
	storeFile(t, m, "b") // still the one file
}

// A host whose copy went bad on its disk (its digest record still fitting) serves wrong bytes:
// the host pulling from it catches them by the digest, names it, and takes the file from another.
func TestACorruptPeerIsCaughtAndAnotherUsed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs simtest.Buffer
	m, origin, req, content := peersMesh(ctx, t, &logs, "bad", "good", "new")
	for _, h := range []string{"bad", "good"} {
		req.Name = "tiny-" + h
		_, err := m.Place(ctx, Placed{Host: h, Request: req})
		require.NoError(t, err)
	}
	// bad's copy rots: other bytes, the same length and time, so its record still fits.
	rotten := storeFile(t, m, "bad")
	fi, err := os.Stat(rotten)
	require.NoError(t, err)
	b := bytes.Clone(content)
	for i := len(b) / 2; i < len(b)/2+4096; i++ {
		b[i] ^= 0x5a
	}
	require.NoError(t, os.WriteFile(rotten, b, 0o600))
	require.NoError(t, os.Chtimes(rotten, fi.ModTime(), fi.ModTime()))

	waitHeld(ctx, t, m, "new", req.SHA256, 2)
	origin.Close()
	req.Name = "tiny-new"
	placed, err := m.Place(ctx, Placed{Host: "new", Request: req})
	require.NoError(t, err)
	require.Equal(t, api.StateReady, placed[0].State, placed[0].Reason)
	assert.Contains(t, logs.String(), "peer=bad")
	assert.Contains(t, logs.String(), "not the file")
	got, err := os.ReadFile(storeFile(t, m, "new"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(content, got), "the good copy landed")
}
