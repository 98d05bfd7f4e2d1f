package hailo

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/ollama/ollamatest"
	hailosim "github.com/llmkube/mesh/sim/hailo"
)

func newDriver(t *testing.T, url string) *Driver {
	t.Helper()
	d, err := New(Config{URL: url}, nil)
	require.NoError(t, err)
	return d
}

var (
	qwen  = engines.Model{ID: "p1", Name: "qwen2:1.5b", Source: "hailo://qwen2:1.5b", Context: 2048}
	coder = engines.Model{ID: "p2", Name: "qwen2.5-coder:1.5b", Source: "hailo://qwen2.5-coder:1.5b", Context: 2048}
)

func TestLifecycle(t *testing.T) {
	sim := ollamatest.StartHailo(t, func(c *hailosim.Config) { c.HEFSize = 3<<20 + 5 })
	d := newDriver(t, sim.URL())
	ctx := t.Context()

	e := d.Detect(ctx)
	assert.True(t, e.Present, e.Detail)
	assert.True(t, e.Healthy, e.Detail)
	assert.Equal(t, api.RuntimeHailoOllama, e.Runtime)
	assert.Equal(t, "0.5.1", e.Version)
	assert.ElementsMatch(t, hailosim.ZooModels(), e.Models)
	assert.Equal(t, "no zoo model downloaded yet", e.Detail)

	// Pull with progress.
	var events []engines.Progress
	require.NoError(t, d.Pull(ctx, qwen, func(p engines.Progress) { events = append(events, p) }))
	ollamatest.CheckPull(t, events)
	assert.Equal(t, int64(3<<20+5), events[len(events)-1].Total)
	assert.Equal(t, 1, sim.Stats().Pulls)
	require.NoError(t, d.Pull(ctx, qwen, nil))
	assert.Equal(t, 1, sim.Stats().Pulls, "a HEF already present is not fetched again")
	assert.Equal(t, "downloaded: qwen2:1.5b", d.Detect(ctx).Detail)
	have, err := d.Downloaded(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"qwen2:1.5b"}, have)

	// Load without a prompt: the device really holds it (a prompt would have generated instead).
	inst, err := d.Load(ctx, qwen)
	require.NoError(t, err)
	assert.Equal(t, sim.URL(), inst.Endpoint())
	assert.Empty(t, inst.(*Instance).Replaced())
	st := sim.Stats()
	assert.Equal(t, 1, st.Loads)
	assert.Equal(t, "qwen2:1.5b", st.Loaded)
	loaded, err := d.Loaded(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"qwen2:1.5b"}, loaded)
	running, err := d.Client().PS(ctx)
	require.NoError(t, err)
	require.Len(t, running, 1)
	exp, err := time.Parse(time.RFC3339Nano, running[0].ExpiresAt)
	require.NoError(t, err)
	assert.Greater(t, exp.Year(), 2200, "keep_alive -1 never expires")
	require.NoError(t, d.Health(ctx, qwen))

	// Loading the same model again replaces nothing.
	inst, err = d.Load(ctx, qwen)
	require.NoError(t, err)
	assert.Empty(t, inst.(*Instance).Replaced())
	assert.Equal(t, 1, sim.Stats().Loads)

	// A second model replaces the first, and the driver says so.
	require.NoError(t, d.Pull(ctx, coder, nil))
	inst, err = d.Load(ctx, coder)
	require.NoError(t, err)
	assert.Equal(t, "qwen2:1.5b", inst.(*Instance).Replaced())
	loaded, err = d.Loaded(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"qwen2.5-coder:1.5b"}, loaded)
	err = d.Health(ctx, qwen)
	assert.Equal(t, api.CodeEngineError, ollamatest.CodeOf(err))
	assert.EqualError(t, err, "EngineError: qwen2:1.5b is no longer on the Hailo-10H: qwen2.5-coder:1.5b replaced it")

	// Chat streams through /api/chat.
	ollamatest.CheckChat(t, ollamatest.Collect(t, d, coder, ollamatest.Hello()))
	st = sim.Stats()
	assert.Equal(t, 1, st.Requests["POST /api/chat"])
	assert.Zero(t, st.Requests["POST /v1/chat/completions"])
	assert.Equal(t, 2, st.Loads, "the chat did not reload")

	limited := ollamatest.Hello()
	limited.MaxTokens = 2
	chunks := ollamatest.Collect(t, d, coder, limited)
	assert.Equal(t, "length", chunks[len(chunks)-1].FinishReason)
	assert.Equal(t, 2, chunks[len(chunks)-1].CompletionTokens)

	// A chat with the replaced model is refused rather than swapping it back.
	err = d.Chat(ctx, qwen, ollamatest.Hello(), func(engines.ChatChunk) error { return nil })
	assert.Equal(t, api.CodeEngineError, ollamatest.CodeOf(err))
	assert.EqualError(t, err, "EngineError: qwen2:1.5b is not on the Hailo-10H (qwen2.5-coder:1.5b is); answering would swap it back in, so the chat is refused")
	assert.Equal(t, 2, sim.Stats().Loads)

	// Unloading the replaced model leaves the device alone; unloading the loaded one frees it.
	require.NoError(t, d.Unload(ctx, qwen))
	loaded, err = d.Loaded(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"qwen2.5-coder:1.5b"}, loaded)
	require.NoError(t, d.Unload(ctx, coder))
	loaded, err = d.Loaded(ctx)
	require.NoError(t, err)
	assert.Empty(t, loaded)
	assert.Empty(t, sim.Stats().Loaded)
	err = d.Health(ctx, coder)
	assert.Equal(t, api.CodeEngineError, ollamatest.CodeOf(err))
	assert.ErrorContains(t, err, "no model is on the Hailo-10H")
}

// Health does not queue behind a chat in progress on the device.
func TestHealthDuringChat(t *testing.T) {
	sim := ollamatest.StartHailo(t, func(c *hailosim.Config) { c.Preloaded = []string{"qwen2:1.5b"} })
	d := newDriver(t, sim.URL())
	_, err := d.Load(t.Context(), qwen)
	require.NoError(t, err)
	checked := false
	require.NoError(t, d.Chat(t.Context(), qwen, ollamatest.Hello(), func(c engines.ChatChunk) error {
		if !checked {
			checked = true
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			require.NoError(t, d.Health(ctx, qwen))
		}
		return nil
	}))
	assert.True(t, checked)
}

// Requests on the device are serialised by the driver: the daemon never has one waiting.
func TestSerialised(t *testing.T) {
	sim := ollamatest.StartHailo(t, func(c *hailosim.Config) {
		c.Preloaded = []string{"qwen2:1.5b"}
		c.TokensPerSecond = 2000
	})
	d := newDriver(t, sim.URL())
	_, err := d.Load(t.Context(), qwen)
	require.NoError(t, err)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			errs <- d.Chat(t.Context(), qwen, ollamatest.Hello(), func(engines.ChatChunk) error {
				if w := sim.Stats().Waiting; w != 0 {
					return errors.New("the daemon had a request waiting")
				}
				return nil
			})
		}()
	}
	for range 3 {
		assert.NoError(t, <-errs)
	}
	assert.Equal(t, 3, sim.Stats().Requests["POST /api/chat"])
}

func TestChatStopsWhenEmitFails(t *testing.T) {
	sim := ollamatest.StartHailo(t, func(c *hailosim.Config) {
		c.Preloaded = []string{"qwen2:1.5b"}
		c.TokensPerSecond = 100
	})
	d := newDriver(t, sim.URL())
	gone := errors.New("client went away")
	err := d.Chat(t.Context(), qwen, ollamatest.Hello(), func(engines.ChatChunk) error { return gone })
	require.ErrorIs(t, err, gone)
	// The device is free again at once: the next request does not wait for the old answer.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err = d.Loaded(ctx)
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return sim.Stats().Waiting == 0 }, 2*time.Second, 10*time.Millisecond)
}

func TestRefusedOnPlainOllama(t *testing.T) {
	o := ollamatest.StartOllama(t, nil)
	d := newDriver(t, o.URL())
	want := "RuntimeMismatch: the daemon at " + o.URL() + " is not hailo-ollama: it has no /hailo/v1/list (is it plain Ollama?); hailo:// models run only on hailo-ollama with a Hailo-10H"

	err := d.Pull(t.Context(), qwen, nil)
	assert.Equal(t, api.CodeRuntimeMismatch, ollamatest.CodeOf(err))
	assert.EqualError(t, err, want)

	_, err = d.Load(t.Context(), qwen)
	assert.Equal(t, api.CodeRuntimeMismatch, ollamatest.CodeOf(err))
	assert.EqualError(t, err, want)

	e := d.Detect(t.Context())
	assert.False(t, e.Present)
	assert.False(t, e.Healthy)
	assert.Contains(t, e.Detail, "is not hailo-ollama")
	assert.Zero(t, o.Stats().Requests["POST /api/pull"], "nothing was sent to the wrong daemon")
}

func TestRefusals(t *testing.T) {
	sim := ollamatest.StartHailo(t, nil)
	d := newDriver(t, sim.URL())
	ctx := t.Context()

	t.Run("pull of an unknown model", func(t *testing.T) {
		err := d.Pull(ctx, engines.Model{ID: "x", Source: "hailo://nosuch:1b"}, nil)
		assert.Equal(t, api.CodePullFailed, ollamatest.CodeOf(err))
		assert.ErrorIs(t, err, engines.ErrNotFound)
		zoo, _, lerr := d.Client().HailoList(ctx)
		require.NoError(t, lerr)
		assert.EqualError(t, err, "PullFailed: hailo-ollama: model 'nosuch:1b' not found (HTTP 200); this hailo-ollama lists: "+strings.Join(zoo, ", "))
	})
	t.Run("load of a model not downloaded", func(t *testing.T) {
		_, err := d.Load(ctx, qwen)
		assert.Equal(t, api.CodeEngineError, ollamatest.CodeOf(err))
		assert.ErrorIs(t, err, engines.ErrNotFound)
		assert.EqualError(t, err, "EngineError: hailo-ollama: model 'qwen2:1.5b' not found (HTTP 200)")
	})
	t.Run("chat with a model not downloaded", func(t *testing.T) {
		err := d.Chat(ctx, qwen, ollamatest.Hello(), func(engines.ChatChunk) error { return nil })
		assert.Equal(t, api.CodeEngineError, ollamatest.CodeOf(err))
		assert.ErrorIs(t, err, engines.ErrNotFound)
	})
	t.Run("ollama source", func(t *testing.T) {
		err := d.Pull(ctx, engines.Model{ID: "x", Source: "ollama://qwen2:1.5b"}, nil)
		assert.Equal(t, api.CodeRuntimeMismatch, ollamatest.CodeOf(err))
		assert.ErrorContains(t, err, "hailo-ollama serves only Hailo's zoo (use hailo://name:tag)")
	})
	t.Run("GGUF source", func(t *testing.T) {
		_, err := d.Load(ctx, engines.Model{ID: "x", Source: "hf://o/r/x.gguf"})
		assert.Equal(t, api.CodeRuntimeMismatch, ollamatest.CodeOf(err))
	})
	t.Run("bad URL", func(t *testing.T) {
		_, err := New(Config{URL: "ftp://x"}, nil)
		assert.EqualError(t, err, `hailo-ollama URL "ftp://x": want http://host:port`)
	})
}

func TestDaemonGone(t *testing.T) {
	sim := ollamatest.StartHailo(t, func(c *hailosim.Config) { c.Preloaded = []string{"qwen2:1.5b"} })
	d := newDriver(t, sim.URL())
	_, err := d.Load(t.Context(), qwen)
	require.NoError(t, err)
	require.NoError(t, sim.Close())

	err = d.Health(t.Context(), qwen)
	assert.Equal(t, api.CodeEngineUnavailable, ollamatest.CodeOf(err))
	assert.ErrorContains(t, err, "hailo-ollama at "+sim.URL()+" does not answer")
	e := d.Detect(t.Context())
	assert.False(t, e.Present)
	assert.Contains(t, e.Detail, "no hailo-ollama answers at "+sim.URL())
}

func weatherChat() engines.ChatRequest {
	req := ollamatest.Hello()
	req.Tools = []engines.Tool{{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{}}`)}}
	return req
}

// Tools follow the version the daemon reports: refused by the driver on 5.1.1, which would drop
// them; on 5.3 and later sent, and a template without a tools branch is the daemon's refusal.
func TestToolsFollowTheReportedVersion(t *testing.T) {
	old := ollamatest.StartHailo(t, func(c *hailosim.Config) { c.Preloaded = []string{"qwen2:1.5b"} })
	d := newDriver(t, old.URL())
	_, err := d.Load(t.Context(), qwen)
	require.NoError(t, err)
	err = d.Chat(t.Context(), qwen, weatherChat(), func(engines.ChatChunk) error { return nil })
	require.ErrorIs(t, err, engines.ErrUnsupported)
	assert.Equal(t, api.CodeBadRequest, ollamatest.CodeOf(err))
	assert.Contains(t, err.Error(), `"0.5.1" (5.1-era`)
	assert.Zero(t, old.Stats().Requests["POST /api/chat"], "the chat never reached the daemon")

	for _, v := range []string{"5.3.0", "5.4"} {
		sim := ollamatest.StartHailo(t, func(c *hailosim.Config) {
			c.Version = v
			c.Preloaded = []string{"qwen2:1.5b", "qwen2.5:1.5b"}
		})
		d := newDriver(t, sim.URL())
		ctx := t.Context()

		// qwen2's template has no tools branch: the daemon's own 400 comes through.
		_, err := d.Load(ctx, qwen)
		require.NoError(t, err)
		err = d.Chat(ctx, qwen, weatherChat(), func(engines.ChatChunk) error { return nil })
		require.Error(t, err, v)
		assert.Equal(t, api.CodeBadRequest, ollamatest.CodeOf(err), v)
		assert.Contains(t, err.Error(), "qwen2:1.5b does not support tools", v)
		assert.NotErrorIs(t, err, engines.ErrUnsupported, "the daemon refused, not the driver")

		// qwen2.5 calls the tool, and the answer ends for it (the stream has no last chunk).
		q25 := engines.Model{ID: "p3", Name: "qwen2.5:1.5b", Source: "hailo://qwen2.5:1.5b", Context: 2048}
		_, err = d.Load(ctx, q25)
		require.NoError(t, err)
		chunks := ollamatest.Collect(t, d, q25, weatherChat())
		var calls []engines.ToolCall
		for _, c := range chunks {
			calls = append(calls, c.ToolCalls...)
		}
		require.Len(t, calls, 1, v)
		assert.Equal(t, "get_weather", calls[0].Name)
		assert.Equal(t, "tool_calls", chunks[len(chunks)-1].FinishReason, v)
	}
}

// A placement made on 5.1.1 keeps working after the upgrade to 5.3.0, which renamed its model,
// and the instance says which name ran; the reverse holds too.
func TestRenamedModelsRunUnderTheDaemonsName(t *testing.T) {
	oldName := engines.Model{ID: "p4", Name: "qwen2.5-instruct:1.5b", Source: "hailo://qwen2.5-instruct:1.5b", Context: 2048}
	sim := ollamatest.StartHailo(t, func(c *hailosim.Config) { c.Version = "5.3.0" })
	d := newDriver(t, sim.URL())
	ctx := t.Context()

	require.NoError(t, d.Pull(ctx, oldName, nil))
	inst, err := d.Load(ctx, oldName)
	require.NoError(t, err)
	assert.Equal(t, "qwen2.5:1.5b", inst.(*Instance).ServedAs())
	assert.Equal(t, "qwen2.5:1.5b", sim.Stats().Loaded)
	require.NoError(t, d.Health(ctx, oldName), "health asks after the daemon's name")
	ollamatest.CheckChat(t, ollamatest.Collect(t, d, oldName, ollamatest.Hello()))
	require.NoError(t, d.Unload(ctx, oldName))
	assert.Empty(t, sim.Stats().Loaded)

	// The same name on 5.1.1 needs no mapping; 5.3.0's name maps back to it there.
	old := ollamatest.StartHailo(t, nil)
	d = newDriver(t, old.URL())
	newName := engines.Model{ID: "p5", Name: "qwen2.5:1.5b", Source: "hailo://qwen2.5:1.5b", Context: 2048}
	require.NoError(t, d.Pull(ctx, newName, nil))
	inst, err = d.Load(ctx, newName)
	require.NoError(t, err)
	assert.Equal(t, "qwen2.5-instruct:1.5b", inst.(*Instance).ServedAs())
	require.NoError(t, d.Pull(ctx, qwen, nil))
	inst, err = d.Load(ctx, qwen)
	require.NoError(t, err)
	assert.Empty(t, inst.(*Instance).ServedAs())

	// A model no release renamed and this one does not list is the daemon's to refuse.
	gone := engines.Model{ID: "p6", Name: "llama3.2:3b", Source: "hailo://llama3.2:3b", Context: 2048}
	err = newDriver(t, sim.URL()).Pull(ctx, gone, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "this hailo-ollama lists: deepseek_r1:1.5b")
}

// simAt runs a hailo-ollama simulator of a release that can be restarted on the same address
// and data folder, as systemctl restart would.
type simAt struct {
	t      *testing.T
	cfg    hailosim.Config
	cancel context.CancelFunc
	srv    *hailosim.Server
}

func startSimAt(t *testing.T, cfg hailosim.Config) *simAt {
	s := &simAt{t: t, cfg: cfg}
	s.start()
	s.cfg.Listen = strings.TrimPrefix(s.srv.URL(), "http://") // the same port after a restart
	s.cfg.Preloaded = nil
	t.Cleanup(func() { s.cancel(); s.srv.Close() })
	return s
}

func (s *simAt) start() {
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := hailosim.Start(ctx, s.cfg, nil)
	require.NoError(s.t, err)
	s.srv, s.cancel = srv, cancel
}

func (s *simAt) restart(context.Context) error {
	s.cancel()
	if err := s.srv.Close(); err != nil {
		return err
	}
	s.start()
	return nil
}

// On 5.3.0 a load after another degrades answers until hailo-ollama restarts: with the means to
// restart it the driver does so before the second load; without, the swap cost says so.
func TestSwapOnAffectedReleaseRestartsTheDaemon(t *testing.T) {
	cfg := hailosim.FastConfig(t.TempDir())
	cfg.Version, cfg.FinalChunks = "5.3.0", true
	cfg.Preloaded = []string{"qwen2:1.5b", "qwen2.5-coder:1.5b"}
	answer := func(d *Driver, m engines.Model) string {
		var b strings.Builder
		for _, c := range ollamatest.Collect(t, d, m, ollamatest.Hello()) {
			b.WriteString(c.Content)
		}
		return b.String()
	}
	ctx := t.Context()

	// Without a way to restart: the swap degrades, and its cost is stated.
	plain := startSimAt(t, cfg)
	d := newDriver(t, plain.srv.URL())
	assert.True(t, d.Detect(ctx).Healthy)
	assert.Contains(t, d.SwapCost(), "answers degrade after this swap until hailo-ollama restarts")
	_, err := d.Load(ctx, qwen)
	require.NoError(t, err)
	_, err = d.Load(ctx, coder)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(answer(d, coder), hailosim.DegradedMarker))

	// With one: each load after another comes after a restart, so no answer degrades.
	cfg.DataDir = t.TempDir()
	managed := startSimAt(t, cfg)
	d = newDriver(t, managed.srv.URL())
	restarts := 0
	d.RestartBetweenModels(func(ctx context.Context) error { restarts++; return managed.restart(ctx) })
	assert.True(t, d.Detect(ctx).Healthy)
	assert.Contains(t, d.SwapCost(), "the agent restarts it first")
	_, err = d.Load(ctx, qwen)
	require.NoError(t, err)
	assert.Zero(t, restarts, "the first load of the daemon's life needs no restart")
	inst, err := d.Load(ctx, coder)
	require.NoError(t, err)
	assert.Equal(t, 1, restarts)
	assert.Equal(t, "qwen2:1.5b", inst.(*Instance).Replaced())
	assert.NotContains(t, answer(d, coder), hailosim.DegradedMarker)
	assert.False(t, managed.srv.Stats().Degraded)
	_, err = d.Load(ctx, coder)
	require.NoError(t, err)
	assert.Equal(t, 1, restarts, "the model already on the device is no swap")

	// 5.1.1 has no such defect: no restart, no cost.
	old := ollamatest.StartHailo(t, func(c *hailosim.Config) { c.Preloaded = []string{"qwen2:1.5b", "qwen2.5-coder:1.5b"} })
	d = newDriver(t, old.URL())
	d.RestartBetweenModels(func(context.Context) error { t.Error("restarted a 5.1.1 daemon"); return nil })
	d.Detect(ctx)
	assert.Empty(t, d.SwapCost())
	_, err = d.Load(ctx, qwen)
	require.NoError(t, err)
	_, err = d.Load(ctx, coder)
	require.NoError(t, err)
}
