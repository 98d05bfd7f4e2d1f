package ollama

// Conformance: the same checks against the Ollama simulator and the real Ollama (enginetest
// finds it, or the "real" subtest skips saying why).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/engines/ollama/ollamatest"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// A model the daemon already has — pulled before, or made with `ollama create`, which the
// registry never heard of — is placed without a pull: Ollama's /api/pull would ask the
// registry, and fail offline. Then it loads at the placement's context, answers and unloads.
func TestConformanceModelTheDaemonHas(t *testing.T) {
	check := func(t *testing.T, url string, m engines.Model, version string) {
		d := newDriver(t, url)
		ctx := t.Context()
		e := d.Detect(ctx)
		require.True(t, e.Healthy, e.Detail)
		assert.Regexp(t, version, e.Version)
		assert.Contains(t, e.Models, m.Ref)

		var events []engines.Progress
		require.NoError(t, d.Pull(ctx, m, func(p engines.Progress) { events = append(events, p) }))
		require.Len(t, events, 1)
		assert.Equal(t, "success", events[0].Status)
		assert.Positive(t, events[0].Total)

		_, err := d.Load(ctx, m)
		require.NoError(t, err)
		require.NoError(t, d.Health(ctx, m))
		req := ollamatest.Hello()
		req.MaxTokens = 6
		chunks := ollamatest.Collect(t, d, m, req)
		final := chunks[len(chunks)-1]
		assert.True(t, final.Done)
		assert.Contains(t, []string{"stop", "length"}, final.FinishReason)
		assert.Positive(t, final.PromptTokens)
		require.NoError(t, d.Unload(ctx, m))
		loaded, err := d.Loaded(ctx)
		require.NoError(t, err)
		assert.Empty(t, loaded)
	}
	t.Run("sim", func(t *testing.T) {
		sim := ollamatest.StartOllama(t, func(c *ollamasim.Config) { c.Preloaded = []string{"qwen2.5:0.5b"} })
		check(t, sim.URL(), engines.Model{ID: "p", Name: "qwen", Source: "ollama://qwen2.5:0.5b", Ref: "qwen2.5:0.5b", Context: 1024}, `^\d+\.\d+\.\d+`)
		assert.Zero(t, sim.Stats().Requests["POST /api/pull"], "no pull for a model the daemon has")
	})
	t.Run("real", func(t *testing.T) {
		gguf := enginetest.TinyGGUF(t)
		daemon := enginetest.StartOllama(t)
		daemon.Create(t, "tiny", gguf)
		// "tiny" is "tiny:latest" to Ollama.
		check(t, daemon.URL, engines.Model{ID: "p", Name: "tiny", Source: "ollama://tiny", Ref: "tiny:latest", Context: 1024}, `^\d+\.\d+\.\d+`)
	})
}

// An answer the caller ends itself (emit's engines.ErrEnough: the gateway's stop sequences end
// answers so) is read to its end, not cut: Ollama can lose a model for good when a stream is cut
// mid-answer (Client.finishAnswer). The simulator shows the answer ran to its end; the real
// Ollama, with a model fast enough to lose it in a few dozen cuts, still answers after a
// hundred.
func TestConformanceAnAnswerEndedEarlyIsFinished(t *testing.T) {
	enough := fmt.Errorf("a stop sequence: %w", engines.ErrEnough)
	// Greedy, so every answer is the same and long enough to be ended early: sampled, the
	// tiny model's answer now and then ended by itself after a piece or two (3 chats of ~2,800
	// tried), and the chat returned no error because the caller never ended it.
	greedy := func() engines.ChatRequest {
		req := ollamatest.Hello()
		req.MaxTokens = 24
		req.Temperature = new(0.0)
		return req
	}
	stopEarly := func(t *testing.T, d *Driver, m engines.Model, after int) {
		pieces := 0
		req := greedy()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a lost model fails, not hangs
		defer cancel()
		err := d.Chat(ctx, m, req, func(c engines.ChatChunk) error {
			if c.Content != "" {
				if pieces++; pieces > after {
					return enough
				}
			}
			return nil
		})
		require.ErrorIs(t, err, enough)
	}
	t.Run("sim", func(t *testing.T) {
		sim := ollamatest.StartOllama(t, func(c *ollamasim.Config) { c.Preloaded = []string{"qwen2.5:0.5b"}; c.TokensPerSec = 1000 })
		d := newDriver(t, sim.URL())
		stopEarly(t, d, qwen, 1)
		require.Eventually(t, func() bool { return sim.Stats().Generations == 1 }, 5*time.Second, time.Millisecond, "%+v", sim.Stats())
		assert.Zero(t, sim.Stats().Cancelled, "not cut")
	})
	t.Run("real", func(t *testing.T) {
		gguf := enginetest.TinyGGUF(t)
		daemon := enginetest.StartOllama(t)
		daemon.Create(t, "tiny", gguf)
		d := newDriver(t, daemon.URL)
		m := engines.Model{ID: "p", Name: "tiny", Source: "ollama://tiny", Ref: "tiny:latest", Context: 512}
		_, err := d.Load(t.Context(), m)
		require.NoError(t, err)
		require.Greater(t, len(ollamatest.Collect(t, d, m, greedy())), 4, "the answer runs past the pieces the caller takes")
		for i := range 100 {
			stopEarly(t, d, m, i%4)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		req := ollamatest.Hello()
		req.MaxTokens = 4
		require.NoError(t, d.Chat(ctx, m, req, func(engines.ChatChunk) error { return nil }), "the model still answers")
	})
}
