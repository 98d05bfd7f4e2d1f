package localmesh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// A model one host downloaded reaches another over the sealed channel when the origin is gone:
// sized from the peer's header, copied from the peer, verified against the digest.
func TestModelFromAPeerWithTheOriginGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hosts := []HostSpec{
		{Name: "a", Demo: "mac-mini", OS: "darwin", Arch: "arm64", Runtimes: []api.Runtime{api.RuntimeLlamaServer}},
		{Name: "b", Demo: "mac-mini", OS: "darwin", Arch: "arm64", Runtimes: []api.Runtime{api.RuntimeLlamaServer}},
	}
	m, err := Start(ctx, Options{Dir: t.TempDir(), Hosts: hosts, LlamaServer: llamaServer, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })

	content, err := os.ReadFile(m.Host("a").ModelPath("sim-tiny"))
	require.NoError(t, err)
	d := sha256.Sum256(content)
	sum := hex.EncodeToString(d[:])
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "tiny.gguf", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(origin.Close)
	req := api.PlacementRequest{Source: origin.URL + "/tiny.gguf", SHA256: sum, Name: "tiny"}

	_, err = m.Place(ctx, Placed{Host: "a", Request: req})
	require.NoError(t, err)
	// b learns by gossip that a holds the file.
	require.Eventually(t, func() bool {
		v, err := m.Client("b").Mesh(ctx)
		if err != nil {
			return false
		}
		for _, mb := range v.Members {
			if mb.Name == "a" && mb.Host != nil && mb.Host.Files != nil {
				return slices.Contains(mb.Host.Files.Holds, sum[:api.HoldPrefix])
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)

	origin.Close() // from here, only a has the file
	req.Name = "tiny-b"
	placed, err := m.Place(ctx, Placed{Host: "b", Request: req})
	require.NoError(t, err)
	require.Equal(t, api.StateReady, placed[0].State, placed[0].Reason)
	assert.Contains(t, placed[0].Memory.Detail, "from peer a")

	// A digest nobody holds, with the origin gone: refused, nothing lands.
	req.SHA256 = sum[:63] + "0"
	if sum[63] == '0' {
		req.SHA256 = sum[:63] + "1"
	}
	req.Name = "tiny-none"
	pl, err := m.Client("b").Place(ctx, req)
	if err == nil {
		pl, err = m.Client("b").WaitPlacement(ctx, pl.ID, 50*time.Millisecond, nil)
		require.NoError(t, err)
		assert.Equal(t, api.StateFailed, pl.State)
	}
}
