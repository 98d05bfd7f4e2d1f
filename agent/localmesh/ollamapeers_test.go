package localmesh

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/sim/simtest"
)

// An Ollama model one host's daemon holds reaches another host's daemon through that agent's
// registry mirror, with no registry reachable: the manifest from a peer that lists the model,
// each blob from the peers holding it, verified. A peer whose blob rotted on its disk (same
// length, other bytes) is caught by the digest, named in the log, and the blob comes from the
// other. The real Ollama, three daemons on loopback.
func TestRealOllamaModelFromPeersThroughTheMirror(t *testing.T) {
	gguf := enginetest.TinyGGUF(t)
	bad, good, fresh := enginetest.StartOllama(t), enginetest.StartOllama(t), enginetest.StartOllama(t)
	bad.Create(t, "tiny:1", gguf)
	good.Create(t, "tiny:1", gguf)

	// The model blob of bad's copy rots: same length, other bytes.
	_, man, err := ollama.ReadManifest(bad.Models, ollama.Name{Namespace: "library", Model: "tiny", Tag: "1"})
	require.NoError(t, err)
	var modelBlob string
	for _, l := range man.Layers {
		if l.MediaType == "application/vnd.ollama.image.model" {
			modelBlob = strings.TrimPrefix(l.Digest, "sha256:")
		}
	}
	require.NotEmpty(t, modelBlob)
	rot := ollama.BlobFile(bad.Models, modelBlob)
	b, err := os.ReadFile(rot)
	require.NoError(t, err)
	for i := len(b) / 2; i < len(b)/2+4096; i++ {
		b[i] ^= 0xff
	}
	require.NoError(t, os.WriteFile(rot, b, 0o644))

	// The registry: a loopback port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	registry := "http://" + ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var logs simtest.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	host := func(name string, d *enginetest.OllamaDaemon) HostSpec {
		return HostSpec{Name: name, Demo: "mac-mini", OS: "darwin", Arch: "arm64", Runtimes: []api.Runtime{api.RuntimeOllama},
			Ollama: d.URL, OllamaModels: d.Models, OllamaRegistry: registry}
	}
	m, err := Start(ctx, Options{Dir: t.TempDir(), Hosts: []HostSpec{host("bad", bad), host("good", good), host("fresh", fresh)},
		Fast: true, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })

	// fresh sees both others list the model and hold its blob.
	require.Eventually(t, func() bool {
		v, err := m.Client("fresh").Mesh(ctx)
		if err != nil {
			return false
		}
		n := 0
		for _, mb := range v.Members {
			if mb.Host != nil && mb.Host.Files != nil && slices.Contains(mb.Host.Files.Holds, modelBlob[:api.HoldPrefix]) &&
				slices.ContainsFunc(engineModels(mb.Host, api.RuntimeOllama), func(s string) bool { return ollama.SameModel(s, "tiny:1") }) {
				n++
			}
		}
		return n == 2
	}, time.Minute, 50*time.Millisecond)

	said := make(chan struct{})
	ectx, ecancel := context.WithCancel(ctx)
	defer ecancel()
	opened := make(chan struct{})
	go m.Client("fresh").Events(ectx, 0, func() { close(opened) }, func(ev api.Event) error {
		if strings.Contains(ev.Message, "good over the LAN") {
			close(said)
			return errors.New("said")
		}
		return nil
	})
	<-opened
	placed, err := m.Place(ctx, Placed{Host: "fresh", Request: api.PlacementRequest{Source: "ollama://tiny:1"}})
	require.NoError(t, err)
	require.Equal(t, api.StateReady, placed[0].State, placed[0].Reason)
	assert.Contains(t, placed[0].Memory.Detail, "peer ")

	// The daemon knows the model by its name only, its blob the good one.
	tags := daemonTags(ctx, t, fresh.URL)
	assert.Contains(t, tags, "tiny:1")
	for _, name := range tags {
		assert.NotContains(t, name, "127.0.0.1", "the mirror's name was deleted")
	}
	got, err := os.ReadFile(ollama.BlobFile(fresh.Models, modelBlob))
	require.NoError(t, err)
	want, err := os.ReadFile(ollama.BlobFile(good.Models, modelBlob))
	require.NoError(t, err)
	assert.Equal(t, want, got)

	// The placement's progress said where the bytes came from.
	select {
	case <-said:
	case <-time.After(10 * time.Second):
		t.Error("no progress event says the bytes came from good")
	}

	out := logs.String()
	assert.Contains(t, out, "Ollama manifest from a peer")
	assert.Regexp(t, `a peer served bytes that are not the file.*peer=bad`, out)
	// The mirror's copies went once the pull ended: the daemon holds the blobs now.
	left, _ := filepath.Glob(filepath.Join(m.dir, "fresh", "models", "ollama-mirror", "sha256-*"))
	assert.Empty(t, left)
}

// daemonTags are the names a daemon's /api/tags lists.
func daemonTags(ctx context.Context, t *testing.T, base string) []string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/tags", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var l struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&l))
	var out []string
	for _, m := range l.Models {
		out = append(out, m.Name)
	}
	return out
}
