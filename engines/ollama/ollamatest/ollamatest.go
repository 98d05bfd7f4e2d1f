// Package ollamatest is the test set-up the Ollama and hailo-ollama drivers share: their
// simulators on loopback, and checks of what any driver's pulls and chats report. It does not
// import engines/ollama, so that package's own tests can use it.
package ollamatest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	hailosim "github.com/llmkube/mesh/sim/hailo"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// StartOllama starts an Ollama simulator with the default config, changed by tune when given,
// and closes it when the test ends.
func StartOllama(t testing.TB, tune func(*ollamasim.Config)) *ollamasim.Server {
	t.Helper()
	return start(t, ollamasim.DefaultConfig(), tune, ollamasim.Start)
}

// StartHailo starts a hailo-ollama simulator with the fast config in a temporary folder,
// changed by tune when given, and closes it when the test ends.
func StartHailo(t testing.TB, tune func(*hailosim.Config)) *hailosim.Server {
	t.Helper()
	return start(t, hailosim.FastConfig(t.TempDir()), tune, hailosim.Start)
}

// start is what starting either simulator takes: its config, tuned, and a close at the end.
func start[C any, S interface{ Close() error }](t testing.TB, cfg C, tune func(*C), run func(context.Context, C, *slog.Logger) (S, error)) S {
	t.Helper()
	if tune != nil {
		tune(&cfg)
	}
	s, err := run(t.Context(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// CodeOf is the API code of a driver error, "" when it has none.
func CodeOf(err error) api.Code {
	var ee *engines.Error
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ""
}

// Hello is a one-message chat.
func Hello() engines.ChatRequest {
	return engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: "Say hello to the mesh."}}}
}

// Collect chats with m through d and returns every piece of the answer it emitted: not the
// empty chunks that only let held pieces go (engines.ChatChunk.More).
func Collect(t testing.TB, d engines.Driver, m engines.Model, req engines.ChatRequest) []engines.ChatChunk {
	t.Helper()
	var chunks []engines.ChatChunk
	require.NoError(t, d.Chat(t.Context(), m, req, func(c engines.ChatChunk) error {
		if c.Content == "" && len(c.ToolCalls) == 0 && !c.Done {
			assert.False(t, c.More, "an empty chunk only lets held pieces go")
			return nil
		}
		chunks = append(chunks, c)
		return nil
	}))
	return chunks
}

// CheckPull checks a pull's progress events: they never go backwards, some arrive while the
// bytes do (not only at the end), and the last is a complete "success".
func CheckPull(t testing.TB, events []engines.Progress) {
	t.Helper()
	require.NotEmpty(t, events)
	last := events[len(events)-1]
	assert.Equal(t, "success", last.Status)
	assert.Positive(t, last.Total)
	assert.Equal(t, last.Total, last.Completed)
	partial := 0
	for i, p := range events {
		if p.Completed > 0 && p.Completed < p.Total {
			partial++
		}
		if i > 0 {
			assert.GreaterOrEqual(t, p.Completed, events[i-1].Completed, "progress went backwards")
		}
	}
	assert.Positive(t, partial, "progress is reported while the bytes arrive, not only at the end")
}

// CheckChat checks a whole streamed answer: text in several chunks, then one last chunk that
// finished with "stop" and counts the chunks before it as the completion's tokens.
func CheckChat(t testing.TB, chunks []engines.ChatChunk) {
	t.Helper()
	require.Greater(t, len(chunks), 2)
	final := chunks[len(chunks)-1]
	assert.True(t, final.Done)
	assert.Equal(t, "stop", final.FinishReason)
	assert.Equal(t, len(chunks)-1, final.CompletionTokens)
	var text strings.Builder
	for _, c := range chunks[:len(chunks)-1] {
		assert.False(t, c.Done)
		text.WriteString(c.Content)
	}
	assert.NotEmpty(t, strings.TrimSpace(text.String()))
}
