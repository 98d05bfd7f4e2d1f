package ollama

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
	err = d.Health(ctx, qwen)
	assert.Equal(t, api.CodeEngineError, ollamatest.CodeOf(err))
	assert.ErrorContains(t, err, "qwen2.5:0.5b is no longer loaded in Ollama")

	// Unloading again is a no-op.
	require.NoError(t, d.Unload(ctx, qwen))
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

// chatContent, the way most chat lines are read, reads what decoding the line reads: for every
// well-formed line it takes, the decoded line is one piece of content and nothing else. And the
// tail chatPiece gives with it, whatever the line, is the line's end and, after a model
// member, valid JSON of that same piece: what a client is sent as it is.
func FuzzChatContent(f *testing.F) {
	f.Add(`{"model":"m","created_at":"2026-01-01 00:00:00<b>","message":{"role":"assistant","content":"hi"},"done":false}`)
	f.Add("{\"model\":\"m\",\"created_at\":\"2026\x01\",\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},\"done\":false}")
	f.Add(`{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":"hi"},"done":false}`)
	f.Add(`{"model":"m","message":{"role":"assistant","content":"a \"b\"\n"},"done":false}`)
	f.Add(`{"model":"m","done":true,"message":{"role":"assistant","content":"x"},"done":false}`)
	f.Add(`{"error":"boom","message":{"role":"assistant","content":"x"},"done":false}`)
	f.Add(`{"response":"r","message":{"role":"assistant","content":"x"},"done":false}`)
	f.Add(`{"model":"m\"","created_at":"t","message":{"role":"assistant","content":"x"},"done":false}`)
	f.Add(`{"model":"m","created_at":"t","message":{"role":"assistant","content":"x\"},\"done\":false}"},"done":false}`)
	f.Add(`{"model":"m","created_at":"t","error":"e","message":{"role":"assistant","content":"x"},"done":false}`)
	f.Fuzz(func(t *testing.T, line string) {
		content, ok := chatContent([]byte(line))
		if piece, tail, pok := chatPiece([]byte(line), &stampTimes{}); tail != nil {
			require.True(t, pok && piece == content)
			require.True(t, strings.HasSuffix(line, string(tail)))
			whole := `{"model":"x",` + string(tail)
			require.True(t, json.Valid([]byte(whole)), "%s", whole)
			var m struct {
				Model   string `json:"model"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				Done bool `json:"done"`
			}
			require.NoError(t, json.Unmarshal([]byte(whole), &m))
			assert.Equal(t, content, m.Message.Content)
			assert.Equal(t, "x", m.Model)
			assert.False(t, m.Done)
		}
		if !ok || !json.Valid([]byte(line)) {
			return
		}
		var m struct {
			Message struct {
				Content   string            `json:"content"`
				ToolCalls []json.RawMessage `json:"tool_calls"`
			} `json:"message"`
			Response string          `json:"response"`
			Done     bool            `json:"done"`
			Error    json.RawMessage `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		assert.Equal(t, m.Message.Content+m.Response, content)
		assert.False(t, m.Done)
		assert.Empty(t, m.Message.ToolCalls)
		assert.Empty(t, m.Error)
	})
}

// TestChatPieceTail: the line is passed on only in Ollama's own shape with a created_at its
// clients can read as a time; any other line still gives its piece, to be written afresh.
func TestChatPieceTail(t *testing.T) {
	const rest = `"message":{"role":"assistant","content":"hi"},"done":false}`
	for _, c := range []struct{ line, tail string }{
		{`{"model":"m","created_at":"2026-01-01T00:00:00.5+01:00",` + rest, `"created_at":"2026-01-01T00:00:00.5+01:00",` + rest},
		{`{"model":"m","created_at":"2026-01-01 00:00:00",` + rest, ""},
		{`{"model":"m","created_at":"<b>",` + rest, ""},
		{`{"model":"m","created_at":"1764763200123456789",` + rest, ""},
		{`{"model":"m","created_at":"2026-02-31T00:00:00Z",` + rest, ""},
		{`{"model":"m","created_at":"2024-02-29T23:59:59.000000001Z",` + rest, `"created_at":"2024-02-29T23:59:59.000000001Z",` + rest},
		{`{"model":"m","created_at":"",` + rest, ""},
		{`{"created_at":"2026-01-01T00:00:00Z","model":"m",` + rest, ""},
		{`{"model":"m","created_at":"2026-01-01T00:00:00Z","x":1,` + rest, ""},
	} {
		content, tail, ok := chatPiece([]byte(c.line), &stampTimes{})
		require.True(t, ok, c.line)
		assert.Equal(t, "hi", content, c.line)
		assert.Equal(t, c.tail, string(tail), c.line)
	}
}

// A created_at timestamp passes on is one Go's time.Time decodes, as Ollama's Go client does
// (and the other clients' readers of RFC 3339 too).
func FuzzTimestamp(f *testing.F) {
	for _, s := range []string{"2026-12-03T12:00:00Z", "2026-12-03T12:00:00.123456789+01:00", "2024-02-29T00:00:00Z",
		"2023-02-29T00:00:00Z", "2026-12-03T24:00:00Z", "2026-12-03T12:00:00.Z", "2026-12-03T12:00:00+24:00", "2026-12-03 12:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if timestamp([]byte(s)) {
			var at time.Time
			require.NoError(t, at.UnmarshalText([]byte(s)), "%q", s)
			b, err := json.Marshal(s)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &at), "%q", s)
		}
	})
}

// stampTimes, reading an answer's stamps one after another, judges each as timestamp does.
func FuzzStampTimes(f *testing.F) {
	f.Add("2026-12-03T12:00:00.1Z", "2026-12-03T12:00:00.2Z")
	f.Add("2026-12-03T12:00:00.1Z", "2026-12-03T12:00:00.Z")
	f.Add("2026-12-03T12:00:00.1+01:00", "2026-12-03T12:00:00.1+01:0x")
	f.Add("2026-12-03T12:00:00Z", "2026-12-03T12:00:00.999Zx")
	f.Fuzz(func(t *testing.T, a, b string) {
		var times stampTimes
		assert.Equal(t, timestamp([]byte(a)), times.ok([]byte(a)), "%q", a)
		assert.Equal(t, timestamp([]byte(b)), times.ok([]byte(b)), "%q after %q", b, a)
	})
}
