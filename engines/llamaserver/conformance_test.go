package llamaserver

// Conformance: the same checks run against the simulator and against the real llama-server
// (enginetest finds it, or the "real" subtests skip saying why). A simulator behaviour the real
// server contradicts fails its "real" subtest; a driver that only works against the simulator
// fails there too.

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/sim/gguf"
	simls "github.com/llmkube/mesh/sim/llamaserver"
	"github.com/llmkube/mesh/sim/simtest"
)

// engine is a llama-server to check and a model it loads.
type engine struct {
	bin, model string
	real       bool
}

// conform runs check against the simulator and the real llama-server.
func conform(t *testing.T, check func(t *testing.T, e engine)) {
	t.Run("sim", func(t *testing.T) { check(t, engine{bin: simBin, model: modelFile(t)}) })
	t.Run("real", func(t *testing.T) {
		check(t, engine{bin: enginetest.LlamaServer(t), model: enginetest.TinyGGUF(t), real: true})
	})
}

// run runs the binary with args to its end and returns its exit status and output.
func run(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var xe *exec.ExitError
	if errors.As(err, &xe) {
		return xe.ExitCode(), out.String()
	}
	require.NoError(t, err)
	return 0, out.String()
}

// Every flag the simulator accepts is one the real server accepts, with the same arity (a flag
// with a value swallows the "--version" after it; one without lets it through), and the driver
// passes only flags the simulator knows. Unknown flags, the "=" form and malformed numbers end
// both at once with status 1.
func TestConformanceFlags(t *testing.T) {
	known := simls.Flags()
	for _, a := range DefaultArgs {
		for _, n := range a.Names {
			assert.Contains(t, known, n, "the driver's allowlist holds %s, which the simulator does not know", n)
		}
	}
	for _, n := range append([]string{"-m", "--host", "--port", "--alias", "--metrics"}, memoryArgs(512, 2, 1<<20)...) {
		if strings.HasPrefix(n, "-") {
			assert.Contains(t, known, n, "the driver passes %s, which the simulator does not know", n)
		}
	}
	conform(t, func(t *testing.T, e engine) {
		names := make([]string, 0, len(known))
		for n := range known {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			args := []string{n, known[n], "--version"}
			if known[n] == "" {
				args = []string{n, "--version"}
			}
			code, out := run(t, e.bin, args...)
			assert.Equal(t, 0, code, "%q: %s", args, out)
			assert.Contains(t, out, "version: ", "%q", args)
		}
		for _, args := range [][]string{{"--no-such-flag", "--version"}, {"--port=8080", "--version"}, {"stray", "--version"}} {
			code, out := run(t, e.bin, args...)
			assert.Equal(t, 1, code, "%q: %s", args, out)
			assert.Contains(t, out, "error: invalid argument: "+args[0])
		}
		code, out := run(t, e.bin, "-c", "many", "--version")
		assert.Equal(t, 1, code)
		assert.Contains(t, out, `error while handling argument "-c"`)
		code, out = run(t, e.bin, "-m")
		assert.Equal(t, 1, code)
		assert.Contains(t, out, `error while handling argument "-m": expected value for argument`)
	})
}

// llama-server's own defaults, which the driver overrides: without -np it runs 4 slots sharing
// one context; with -np N it gives each slot -c / N; no slot gets more than the model's training
// context (it caps, and says so).
func TestConformanceSlotDefaults(t *testing.T) {
	slotsLine := regexp.MustCompile(`n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(\w+)'`)
	conform(t, func(t *testing.T, e engine) {
		trained, err := gguf.TrainedContext(e.model)
		require.NoError(t, err)
		require.Positive(t, trained)
		for _, c := range []struct {
			args []string
			want []string // n_slots, n_ctx_slot, kv_unified
		}{
			{[]string{"-c", "1024"}, []string{"4", "1024", "true"}},
			{[]string{"-c", "1024", "-np", "2"}, []string{"2", "512", "false"}},
			{[]string{"-c", strconv.Itoa(4 * trained), "-np", "1"}, []string{"1", strconv.Itoa(trained), "false"}},
		} {
			var out simtest.Buffer
			cmd := exec.Command(e.bin, append([]string{"-m", e.model, "--host", "127.0.0.1", "--port", "0"}, c.args...)...)
			cmd.Stdout, cmd.Stderr = &out, &out
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			require.Eventually(t, func() bool { return slotsLine.MatchString(out.String()) }, 30*time.Second, 10*time.Millisecond, "no slots line in %s", &out)
			assert.Equal(t, c.want, slotsLine.FindStringSubmatch(out.String())[1:], "%q", c.args)
			if c.want[1] == strconv.Itoa(trained) {
				assert.Contains(t, out.String(), "exceeds the training context of the model", "%q", c.args)
			}
			cmd.Process.Kill()
		}
	})
}

// A file that is not a model ends the engine at once, and the driver says why in its words.
func TestConformanceNotAModel(t *testing.T) {
	conform(t, func(t *testing.T, e engine) {
		d := newDriver(t, func(c *Config) { c.Binary = e.bin; c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"} })
		bad := filepath.Join(t.TempDir(), "bad.gguf")
		require.NoError(t, os.WriteFile(bad, bytes.Repeat([]byte("not a model "), 100), 0o644))
		_, err := d.Load(t.Context(), engines.Model{ID: "bad", Source: bad})
		// Refused before the engine starts: llama-server exits 1 on it, but does not always
		// manage to log why.
		assert.Equal(t, api.CodeEngineError, codeOf(err), "%v", err)
		assert.ErrorContains(t, err, "model file "+bad+` is not a GGUF file: it does not start with "GGUF"`)
		loaded, err := d.Loaded(t.Context())
		require.NoError(t, err)
		assert.Empty(t, loaded)
	})
}

// The driver against the engine: start, version, health, answers streamed and not, concurrent
// answers at the requested context, a prompt too long, memory measured, kill -9 and restart.
func TestConformanceDriver(t *testing.T) {
	conform(t, func(t *testing.T, e engine) {
		d := newDriver(t, func(c *Config) { c.Binary = e.bin; c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"} })
		ctx := t.Context()

		det := d.Detect(ctx)
		require.True(t, det.Healthy, det.Detail)
		assert.Regexp(t, `^\d+ \([0-9a-z]+\)$`, det.Version, "build number and commit")

		const context = 512
		m := engines.Model{ID: "conf", Name: "tiny", Source: e.model, Context: context, Args: []string{"-np", "4"}, CacheBytes: 4 << 20}
		inst, err := d.Load(ctx, m)
		require.NoError(t, err)
		require.NoError(t, d.Health(ctx, m))

		var props struct {
			BuildInfo  string `json:"build_info"`
			TotalSlots int    `json:"total_slots"`
		}
		getJSON(t, inst.Endpoint()+"/props", &props)
		build, commit, _ := strings.Cut(strings.TrimSuffix(det.Version, ")"), " (")
		assert.Equal(t, "b"+build+"-"+commit, props.BuildInfo, "--version and /props agree")
		assert.Equal(t, 4, props.TotalSlots)
		var slots []struct {
			NCtx int `json:"n_ctx"`
		}
		getJSON(t, inst.Endpoint()+"/slots", &slots)
		require.Len(t, slots, 4)
		for _, s := range slots {
			assert.Equal(t, context, s.NCtx, "each slot has the whole context the placement asked for")
		}

		seed, zero := 7, 0.0
		ask := func(words int) engines.ChatRequest {
			return engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: strings.Repeat("hello ", words)}},
				MaxTokens: 8, Seed: &seed, Temperature: &zero}
		}
		chunks := collect(t, d, m, ask(5))
		final := chunks[len(chunks)-1]
		assert.True(t, final.Done)
		assert.Contains(t, []string{"stop", "length"}, final.FinishReason)
		assert.Positive(t, final.PromptTokens)
		assert.LessOrEqual(t, final.CompletionTokens, 8)
		// The counts come from the last event's timings (the driver does not ask for usage):
		// the same prompt again, served from llama-server's prompt cache, counts the same
		// tokens, and as many as llama-server's own usage says for it.
		cached := collect(t, d, m, ask(5))
		assert.Equal(t, final.PromptTokens, cached[len(cached)-1].PromptTokens, "a cached prompt counts whole")
		assert.Equal(t, final.CompletionTokens, cached[len(cached)-1].CompletionTokens)
		var counted struct {
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		resp, err := http.Post(inst.Endpoint()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":[{"role":"user","content":"`+strings.Repeat("hello ", 5)+`"}],"max_tokens":8,"seed":7,"temperature":0}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&counted))
		resp.Body.Close()
		assert.Equal(t, counted.Usage.PromptTokens, final.PromptTokens, "the prompt's tokens as llama-server's usage counts them")
		assert.Equal(t, counted.Usage.CompletionTokens, final.CompletionTokens)

		var answer struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
				Message      struct {
					Role string `json:"role"`
				} `json:"message"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		resp, err = http.Post(inst.Endpoint()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":[{"role":"user","content":"hello"}],"max_tokens":4}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
		resp.Body.Close()
		require.Len(t, answer.Choices, 1)
		assert.Equal(t, "assistant", answer.Choices[0].Message.Role)
		assert.Positive(t, answer.Usage.PromptTokens)

		// Four prompts of ~300 tokens at once: each fits its slot's 512, together they would
		// not fit one shared context.
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = d.Chat(ctx, m, ask(300), func(engines.ChatChunk) error { return nil }) })
		}
		wg.Wait()
		for i, err := range errs {
			assert.NoError(t, err, "concurrent chat %d", i)
		}

		err = d.Chat(ctx, m, ask(700), func(engines.ChatChunk) error { return nil })
		assert.Equal(t, api.CodeContextLimit, codeOf(err), "%v", err)

		mi, ok := inst.(engines.Measurer)
		require.True(t, ok)
		r, err := mi.Resident()
		require.NoError(t, err)
		assert.Positive(t, r.Anon)
		assert.GreaterOrEqual(t, r.RSS, r.Anon)

		pid := inst.(*Instance).Pid()
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		select {
		case <-inst.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("kill -9 not noticed")
		}
		var xe *ExitError
		require.ErrorAs(t, inst.Err(), &xe)
		assert.Equal(t, "killed", xe.Signal)
		assert.Error(t, d.Health(ctx, m))

		again, err := d.Load(ctx, m)
		require.NoError(t, err)
		assert.NotEqual(t, pid, again.(*Instance).Pid())
		chunks = collect(t, d, m, ask(5))
		assert.True(t, chunks[len(chunks)-1].Done)
	})
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
}
