package sizing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/sim/gguf"
)

// A model another host's Ollama holds sizes from that host's manifest and a peer's copy of the
// model blob's header, with no registry: a peer whose manifest is not one is passed over.
func TestOllamaFromPeersWithoutTheRegistry(t *testing.T) {
	path, spec := writeModel(t, "sim-tiny", func(s *gguf.Spec) { s.WeightBytes = 1 << 30 })
	fi, err := os.Stat(path)
	require.NoError(t, err)
	sum := strings.Repeat("ab", 32)
	manifest := `{"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:` + sum + `","size":` + strconv.FormatInt(fi.Size(), 10) + `}]}`
	serve := func(body string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
		t.Cleanup(s.Close)
		return s
	}
	broken, good := serve("<html>"), serve(manifest)
	blob := serveFile(t, path, true)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()

	peers := &download.Peers{}
	peers.UseManifests(func(ref string) []download.Peer {
		if ref != "tiny:q8" {
			return nil
		}
		return []download.Peer{{Name: "broken", URL: broken.URL, Client: http.DefaultClient}, {Name: "good", URL: good.URL, Client: http.DefaultClient}}
	})
	peers.Use(func(s string) []download.Peer {
		if s != sum {
			return nil
		}
		return []download.Peer{{Name: "holder", URL: blob.URL + "/blob", Client: http.DefaultClient}}
	})
	// The guard allows no private address: the peers are reached over their own clients.
	s := &Sizer{OllamaRegistry: gone.URL, Guard: download.Options{Peers: peers}}
	est, err := s.Estimate(context.Background(), parse(t, "ollama://tiny:q8"), 8192)
	require.NoError(t, err)
	assert.Equal(t, fi.Size(), est.Weights)
	kv := kvBytes(int64(spec.BlockCount), 8192, int64(spec.EmbeddingLength), int64(spec.HeadCount), int64(spec.HeadCountKV))
	assert.Equal(t, kv, est.KV)
	assert.Positive(t, est.Compute)
	assert.Contains(t, est.Detail, "weights from peer good")

	// No peer lists it: the registry is asked, and it is gone.
	_, err = s.Estimate(context.Background(), parse(t, "ollama://other:1"), 8192)
	var ae *api.Error
	assert.ErrorAs(t, err, &ae)
}
