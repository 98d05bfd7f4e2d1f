package main

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
)

// The mirror is for a daemon on this host, in a mesh, unless turned off; the models folder is
// OLLAMA_MODELS's when that can be read.
func TestOllamaMirrorOnlyForALocalDaemonInAMesh(t *testing.T) {
	models := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(models, "blobs"), 0o755))
	t.Setenv("OLLAMA_MODELS", models)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	guard := download.Options{Peers: &download.Peers{}, Log: slog.New(slog.DiscardHandler)}
	with := func(url string) []engines.Driver {
		d, err := ollama.New(ollama.Config{URL: url}, nil)
		require.NoError(t, err)
		return []engines.Driver{d}
	}
	opts := func(mod func(*runOptions)) *runOptions {
		o := &runOptions{ollamaMirror: true, ollamaURL: ollama.DefaultURL, modelsDir: t.TempDir()}
		if mod != nil {
			mod(o)
		}
		return o
	}

	m := ollamaMirror(opts(nil), with(ollama.DefaultURL), ln, guard)
	require.NotNil(t, m)
	assert.Equal(t, models, m.Models)
	assert.Equal(t, sizing.DefaultOllamaRegistry, m.Registry)
	m = ollamaMirror(opts(func(o *runOptions) { o.ollamaModels, o.ollamaRegistry = "/srv/ollama", "http://reg.lan" }), with(ollama.DefaultURL), ln, guard)
	require.NotNil(t, m)
	assert.Equal(t, "/srv/ollama", m.Models)
	assert.Equal(t, "http://reg.lan", m.Registry)

	assert.Nil(t, ollamaMirror(opts(func(o *runOptions) { o.ollamaMirror = false }), with(ollama.DefaultURL), ln, guard), "turned off")
	assert.Nil(t, ollamaMirror(opts(func(o *runOptions) { o.noMesh = true }), with(ollama.DefaultURL), ln, guard), "no mesh, no peers")
	remote := opts(func(o *runOptions) { o.ollamaURL = "http://192.0.2.7:11434" })
	assert.Nil(t, ollamaMirror(remote, with(remote.ollamaURL), ln, guard), "a daemon on another host cannot reach our loopback")
	assert.Nil(t, ollamaMirror(opts(nil), nil, ln, guard), "no Ollama runtime")

	assert.True(t, loopbackURL("http://localhost:11434"))
	assert.True(t, loopbackURL("http://[::1]:11434"))
	assert.False(t, loopbackURL("http://ollama.lan:11434"))
	assert.False(t, loopbackURL("://"))
}
