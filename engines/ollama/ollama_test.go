package ollama

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/ollama/ollamatest"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

func newDriver(t *testing.T, url string) *Driver {
	t.Helper()
	d, err := New(Config{URL: url}, nil)
	require.NoError(t, err)
	return d
}

var qwen = engines.Model{ID: "p1", Name: "qwen2.5:0.5b", Source: "ollama://qwen2.5:0.5b", Context: 4096}

func TestLifecycle(t *testing.T) {
	sim := ollamatest.StartOllama(t, func(c *ollamasim.Config) { c.PullBytesPerSec = 2_000_000_000 }) // ~0.2 s for qwen2.5:0.5b
	d := newDriver(t, sim.URL())
	ctx := t.Context()

	e := d.Detect(ctx)
	assert.True(t, e.Present, e.Detail)
	assert.True(t, e.Healthy, e.Detail)
	assert.Equal(t, api.RuntimeOllama, e.Runtime)
	assert.Equal(t, "0.5.7", e.Version)
	assert.Equal(t, sim.URL(), e.Address)
	assert.Empty(t, e.Models)

	// Pull, with progress as the bytes arrive.
	var events []engines.Progress
	require.NoError(t, d.Pull(ctx, qwen, func(p engines.Progress) { events = append(events, p) }))
	ollamatest.CheckPull(t, events)
	assert.Equal(t, "pulling manifest", events[0].Status)
	assert.Contains(t, d.Detect(ctx).Models, "qwen2.5:0.5b")

	// Load, confirmed by /api/ps, kept forever.
	inst, err := d.Load(ctx, qwen)
	require.NoError(t, err)
	assert.Equal(t, sim.URL(), inst.Endpoint())
	assert.Empty(t, inst.LogPath())
	assert.NoError(t, inst.Err())
	select {
	case <-inst.Done():
		t.Fatal("a daemon's instance never reports done")
	default:
	}
	running, err := d.Client().PS(ctx)
	require.NoError(t, err)
	require.Len(t, running, 1)
	exp, err := time.Parse(time.RFC3339Nano, running[0].ExpiresAt)
	require.NoError(t, err)
	assert.Greater(t, exp.Year(), 2200, "keep_alive -1 never expires")
	names, err := d.Loaded(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"qwen2.5:0.5b"}, names)
	require.NoError(t, d.Health(ctx, qwen))

	// Chat, streamed chunk by chunk, without reloading the model.
	chunks := ollamatest.Collect(t, d, qwen, ollamatest.Hello())
	ollamatest.CheckChat(t, chunks)
	assert.Positive(t, chunks[len(chunks)-1].PromptTokens)
	assert.Equal(t, 1, sim.Stats().Loads, "a chat with the placement's num_ctx does not reload")

	limited := ollamatest.Hello()
	limited.MaxTokens = 3
	chunks = ollamatest.Collect(t, d, qwen, limited)
	assert.Equal(t, "length", chunks[len(chunks)-1].FinishReason)
	assert.Equal(t, 3, chunks[len(chunks)-1].CompletionTokens)

	// Unload, confirmed by /api/ps.
	require.NoError(t, d.Unload(ctx, qwen))
	names, err = d.Loaded(ctx)
	require.NoError(t, err)
	assert.Empty(t, names)
	assert.Equal(t, 1, sim.Stats().Unloads)

	// Unloading again is a no-op.
	require.NoError(t, d.Unload(ctx, qwen))

	// A model the daemon dropped (it restarted, or another client had it reloaded with other
	// options) is loaded again by the health check, kept forever with the placement's options.
	require.NoError(t, d.Health(ctx, qwen))
	names, err = d.Loaded(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"qwen2.5:0.5b"}, names)
	assert.Equal(t, 2, sim.Stats().Loads)

	// One it cannot load again fails the check, saying why.
	err = d.Health(ctx, engines.Model{ID: "gone", Source: "ollama://nosuch:1b"})
	assert.Equal(t, api.CodeEngineError, ollamatest.CodeOf(err))
	assert.ErrorContains(t, err, "nosuch:1b is no longer loaded in Ollama")
	assert.ErrorContains(t, err, "loading it again failed")
}

func TestLoadContext(t *testing.T) {
	sim := ollamatest.StartOllama(t, func(c *ollamasim.Config) { c.Preloaded = []string{"qwen2.5:0.5b"} })
	d := newDriver(t, sim.URL())
	_, err := d.Load(t.Context(), qwen)
	require.NoError(t, err)
	var ps struct {
		Models []struct {
			ContextLength int `json:"context_length"`
		} `json:"models"`
	}
	require.NoError(t, d.Client().GetJSON(t.Context(), "/api/ps", &ps))
	require.Len(t, ps.Models, 1)
	assert.Equal(t, 4096, ps.Models[0].ContextLength)
}

// The client going away stops generation upstream at once.
func TestChatStopsWhenEmitFails(t *testing.T) {
	sim := ollamatest.StartOllama(t, func(c *ollamasim.Config) {
		c.Preloaded = []string{"qwen2.5:0.5b"}
		c.TokensPerSec = 100
	})
	d := newDriver(t, sim.URL())
	_, err := d.Load(t.Context(), qwen)
	require.NoError(t, err)
	gone := errors.New("client went away")
	n := 0
	err = d.Chat(t.Context(), qwen, ollamatest.Hello(), func(engines.ChatChunk) error {
		n++
		return gone
	})
	require.ErrorIs(t, err, gone)
	assert.Equal(t, 1, n)
	assert.Eventually(t, func() bool { return sim.Stats().Cancelled == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Zero(t, sim.Stats().Generations)
}

func TestChatCancel(t *testing.T) {
	sim := ollamatest.StartOllama(t, func(c *ollamasim.Config) {
		c.Preloaded = []string{"qwen2.5:0.5b"}
		c.TokensPerSec = 100
	})
	d := newDriver(t, sim.URL())
	ctx, cancel := context.WithCancel(t.Context())
	err := d.Chat(ctx, qwen, ollamatest.Hello(), func(engines.ChatChunk) error {
		cancel()
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Eventually(t, func() bool { return sim.Stats().Cancelled == 1 }, 5*time.Second, 10*time.Millisecond)
}

func TestRefusals(t *testing.T) {
	sim := ollamatest.StartOllama(t, nil)
	d := newDriver(t, sim.URL())
	ctx := t.Context()

	t.Run("pull of an unknown model", func(t *testing.T) {
		err := d.Pull(ctx, engines.Model{ID: "x", Source: "ollama://nosuch:7b"}, nil)
		assert.Equal(t, api.CodePullFailed, ollamatest.CodeOf(err))
		assert.ErrorIs(t, err, engines.ErrNotFound)
		assert.EqualError(t, err, "PullFailed: Ollama: pull model manifest: file does not exist (HTTP 200)")
	})
	t.Run("load of a model not pulled", func(t *testing.T) {
		_, err := d.Load(ctx, qwen)
		assert.Equal(t, api.CodeEngineError, ollamatest.CodeOf(err))
		assert.ErrorIs(t, err, engines.ErrNotFound)
		assert.EqualError(t, err, `EngineError: Ollama: model 'qwen2.5:0.5b' not found (HTTP 404)`)
	})
	t.Run("chat with a model not pulled", func(t *testing.T) {
		err := d.Chat(ctx, qwen, ollamatest.Hello(), func(engines.ChatChunk) error { return nil })
		assert.Equal(t, api.CodeEngineError, ollamatest.CodeOf(err))
		assert.ErrorIs(t, err, engines.ErrNotFound)
		assert.ErrorContains(t, err, "try pulling it first")
	})
	t.Run("hailo source", func(t *testing.T) {
		err := d.Pull(ctx, engines.Model{ID: "x", Source: "hailo://qwen2:1.5b"}, nil)
		assert.Equal(t, api.CodeRuntimeMismatch, ollamatest.CodeOf(err))
		assert.ErrorContains(t, err, "cannot run on ollama: hailo:// models are HEF files for a Hailo-10H, which only hailo-ollama runs")
	})
	t.Run("GGUF source", func(t *testing.T) {
		_, err := d.Load(ctx, engines.Model{ID: "x", Source: "/models/x.gguf"})
		assert.Equal(t, api.CodeRuntimeMismatch, ollamatest.CodeOf(err))
		assert.ErrorContains(t, err, "GGUF sources run on llama-server")
	})
	t.Run("invalid source", func(t *testing.T) {
		err := d.Pull(ctx, engines.Model{ID: "x", Source: "ollama://"}, nil)
		assert.Equal(t, api.CodeInvalidSource, ollamatest.CodeOf(err))
	})
	t.Run("no model named", func(t *testing.T) {
		err := d.Pull(ctx, engines.Model{ID: "x"}, nil)
		assert.Equal(t, api.CodeBadRequest, ollamatest.CodeOf(err))
		assert.EqualError(t, err, `BadRequest: model "x" names neither a source nor an engine-side name`)
	})
	t.Run("chat without messages", func(t *testing.T) {
		err := d.Chat(ctx, qwen, engines.ChatRequest{}, func(engines.ChatChunk) error { return nil })
		assert.Equal(t, api.CodeBadRequest, ollamatest.CodeOf(err))
		assert.EqualError(t, err, "BadRequest: a chat needs at least one message")
	})
	t.Run("bad URL", func(t *testing.T) {
		_, err := New(Config{URL: "127.0.0.1:11434"}, nil)
		assert.EqualError(t, err, `Ollama URL "127.0.0.1:11434": want http://host:port`)
	})
}

// A daemon that goes away is reported by Health (its instances have no process to watch).
func TestDaemonGone(t *testing.T) {
	sim := ollamatest.StartOllama(t, func(c *ollamasim.Config) { c.Preloaded = []string{"qwen2.5:0.5b"} })
	d := newDriver(t, sim.URL())
	_, err := d.Load(t.Context(), qwen)
	require.NoError(t, err)
	require.NoError(t, d.Health(t.Context(), qwen))
	require.NoError(t, sim.Close())

	err = d.Health(t.Context(), qwen)
	assert.Equal(t, api.CodeEngineUnavailable, ollamatest.CodeOf(err))
	assert.ErrorContains(t, err, "Ollama at "+sim.URL()+" does not answer")

	e := d.Detect(t.Context())
	assert.False(t, e.Present)
	assert.False(t, e.Healthy)
	assert.Contains(t, e.Detail, "no Ollama daemon answers at "+sim.URL())
	assert.Contains(t, e.Detail, "https://ollama.com/download")

	err = d.Pull(t.Context(), qwen, nil)
	assert.Equal(t, api.CodeEngineUnavailable, ollamatest.CodeOf(err))
}

func TestDetectHailoOllama(t *testing.T) {
	h := ollamatest.StartHailo(t, nil)
	e := newDriver(t, h.URL()).Detect(t.Context())
	assert.False(t, e.Present)
	assert.False(t, e.Healthy)
	assert.Equal(t, "the daemon at "+h.URL()+" is hailo-ollama (it answers /hailo/v1/list), not Ollama: select the hailo-ollama runtime for it", e.Detail)
}

func TestSameModel(t *testing.T) {
	assert.True(t, SameModel("llama3.2", "llama3.2:latest"))
	assert.True(t, SameModel("registry.ollama.ai/library/llama3.2:1b", "llama3.2:1b"))
	assert.True(t, SameModel("user/model", "user/model:latest"))
	assert.False(t, SameModel("llama3.2:1b", "llama3.2:3b"))
}

// FuzzChatStream feeds arbitrary bytes to the chat stream reader as a daemon's answer: it must
// end with chunks or an error, never a panic, and never report success without a last chunk.
func FuzzChatStream(f *testing.F) {
	f.Add([]byte("{\"message\":{\"content\":\" hi\"},\"done\":false}\n{\"message\":{\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"eval_count\":1}\n"))
	f.Add([]byte("{\"error\":\"model 'x' not found\"}\r\n"))
	f.Add([]byte("{\"error\":{\"message\":\"boom\"}}\n"))
	f.Add([]byte("not json\n"))
	f.Add([]byte(""))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req struct {
			Model string `json:"model"`
		}
		json.Unmarshal(b, &req)
		io.WriteString(w, req.Model)
	}))
	f.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, "test", nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// The server echoes the model name as the answer body.
		done := false
		err := c.Chat(context.Background(), string(body), engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: "x"}}}, nil, func(ch engines.ChatChunk) error {
			if done {
				t.Fatal("a chunk after the last one")
			}
			done = ch.Done
			return nil
		})
		if err == nil && !done {
			t.Fatal("success without a last chunk")
		}
	})
}

// A chat whose deadline passes before the daemon answers (loading the model) ends with the
// deadline, not a cancel: the request has a cancel of its own (Client.finish), which the
// caller's end calls, and the caller's error is the one told.
func TestChatDeadlineBeforeTheAnswer(t *testing.T) {
	sim := ollamatest.StartOllama(t, func(c *ollamasim.Config) {
		c.Preloaded = []string{"qwen2.5:0.5b"}
		c.LoadDelay = 5 * time.Second
	})
	d := newDriver(t, sim.URL())
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err := d.Chat(ctx, qwen, ollamatest.Hello(), func(engines.ChatChunk) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
