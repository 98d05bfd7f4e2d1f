package keeper_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/localmesh"
)

func chat(ctx context.Context, c *apiclient.Client, model string) (string, error) {
	var text strings.Builder
	err := c.ChatStream(ctx, model, []apiclient.ChatMessage{{Role: "user", Content: "hello"}}, apiclient.ChatOptions{}, func(d apiclient.ChatDelta) error {
		text.WriteString(d.Content)
		return nil
	})
	return text.String(), err
}

// With on-demand on, a chat for a model nothing runs places it and is answered once it serves;
// a flood of chats for a model that cannot be placed is refused, each with the reason, and
// places nothing.
func TestAChatPlacesAModelOnDemand(t *testing.T) {
	m, ctx := startMesh(t, []string{"*"}, "a", "b")
	text, err := chat(ctx, m.Client("b"), "qwen2.5:0.5b")
	require.NoError(t, err)
	assert.NotEmpty(t, strings.TrimSpace(text))
	sts, err := m.Client("a").Intents(ctx)
	require.NoError(t, err)
	require.Len(t, sts, 1)
	assert.Equal(t, "qwen2.5:0.5b", sts[0].Name)

	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := chat(ctx, m.Client("a"), "no-such-model:7b")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		var e *api.Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, api.CodeNotFound, e.Code)
		assert.Contains(t, e.Message, `model "no-such-model:7b" is not served in the mesh for namespace default, and no host can place it on demand`)
	}
	sts, err = m.Client("a").Intents(ctx)
	require.NoError(t, err)
	assert.Len(t, sts, 1, "nothing recorded for the unplaceable model")
	code, lines := pull(ctx, t, m, "a", "no-such-model:7b")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, lines[0]["error"], "no host can place it on demand")
	for _, h := range []string{"a", "b"} {
		ps, err := m.Client(h).Placements(ctx)
		require.NoError(t, err)
		for _, p := range ps {
			assert.Equal(t, "qwen2.5:0.5b", p.Model)
		}
	}
}

// Off (the default), a chat or an Ollama pull for a model nothing runs is not found, saying the
// switch; once the mesh keeps an intent for it, a pull waits for it, streaming progress until
// it serves.
func TestOffByDefaultAndPullWaits(t *testing.T) {
	m, ctx := startMesh(t, nil, "a", "b")
	_, err := chat(ctx, m.Client("a"), "qwen2.5:0.5b")
	var e *api.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, api.CodeNotFound, e.Code)
	assert.Contains(t, e.Message, "placing models on demand is off there (--on-demand)")
	code, lines := pull(ctx, t, m, "a", "llama3.2:1b")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, lines[0]["error"], "placing models on demand is off there")

	_, err = m.Client("b").Intend(ctx, api.PlacementRequest{Source: "ollama://llama3.2:1b"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		sts, err := m.Client("a").Intents(ctx)
		return err == nil && len(sts) == 1
	}, 10*time.Second, 20*time.Millisecond, "a hears of the intent")
	code, lines = pull(ctx, t, m, "a", "llama3.2:1b")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "pulling manifest", lines[0]["status"])
	assert.Equal(t, "success", lines[len(lines)-1]["status"], "%v", lines)
	text, err := chat(ctx, m.Client("a"), "llama3.2:1b") // a saw it ready: the pull's answer
	require.NoError(t, err)
	assert.NotEmpty(t, text)
}

// pull posts Ollama's /api/pull for model to host and returns the status and the answer's lines.
func pull(ctx context.Context, t *testing.T, m *localmesh.Mesh, host, model string) (int, []map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.Host(host).URL+"/api/pull", strings.NewReader(`{"model":"`+model+`"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+m.AdminToken())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
		lines = append(lines, line)
	}
	require.NotEmpty(t, lines)
	return resp.StatusCode, lines
}

// An alias names a source mesh-wide: nothing is placed until a request names it, and then it is
// placed and served under the alias, and kept.
func TestAnAliasIsPlacedOnItsFirstRequest(t *testing.T) {
	m, ctx := startMesh(t, nil, "a", "b")
	in, err := m.Client("a").SetAlias(ctx, "qwen", api.AliasRequest{Source: "ollama://qwen2.5:0.5b"})
	require.NoError(t, err)
	assert.Equal(t, 0, in.Replicas)
	assert.Equal(t, "qwen is ollama://qwen2.5:0.5b, placed on the first request", api.IntentLine(api.IntentStatus{Intent: in}))
	for _, h := range []string{"a", "b"} {
		ps, err := m.Client(h).Placements(ctx)
		require.NoError(t, err)
		assert.Empty(t, ps, "nothing placed before a request")
	}
	require.Eventually(t, func() bool {
		sts, err := m.Client("b").Intents(ctx)
		return err == nil && len(sts) == 1
	}, 10*time.Second, 20*time.Millisecond, "the alias gossiped")
	text, err := chat(ctx, m.Client("b"), "qwen")
	require.NoError(t, err, "on-demand is off here: the alias is enough")
	assert.NotEmpty(t, text)
	sts, err := m.Client("a").Intents(ctx)
	require.NoError(t, err)
	require.Len(t, sts, 1)
	assert.Equal(t, 1, sts[0].Replicas, "kept from now on")

	var e *api.Error
	_, err = m.Client("a").SetAlias(ctx, "bad", api.AliasRequest{Source: "nonsense://x"})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, api.CodeInvalidSource, e.Code)
}
