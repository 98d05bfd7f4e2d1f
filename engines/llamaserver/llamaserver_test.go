package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/sim/gguf"
	simls "github.com/llmkube/mesh/sim/llamaserver"
	"github.com/llmkube/mesh/sim/simtest"
)

// simBin is cmd/llama-server-sim built as "llama-server", launched exactly as the real binary.
var simBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "llamaserver-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	simBin, err = simtest.LlamaServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// modelFile writes a small valid GGUF file.
func modelFile(t testing.TB) string {
	t.Helper()
	spec, ok := gguf.Preset("sim-tiny")
	require.True(t, ok)
	p := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, gguf.Write(p, spec))
	return p
}

func newDriver(t testing.TB, tune func(*Config)) *Driver {
	t.Helper()
	cfg := Config{Binary: simBin, LogDir: t.TempDir(), ModelsDir: t.TempDir(), StopGrace: 5 * time.Second, HealthTimeout: 30 * time.Second}
	if tune != nil {
		tune(&cfg)
	}
	d, err := New(cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.StopAll(context.Background()) })
	return d
}

func codeOf(err error) api.Code {
	var ee *engines.Error
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ""
}

func hello() engines.ChatRequest {
	return engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: "Say hello to the mesh."}}}
}

func collect(t *testing.T, d *Driver, m engines.Model, req engines.ChatRequest) []engines.ChatChunk {
	t.Helper()
	var chunks []engines.ChatChunk
	require.NoError(t, d.Chat(t.Context(), m, req, func(c engines.ChatChunk) error {
		if c.Content == "" && len(c.ToolCalls) == 0 && !c.Done {
			assert.False(t, c.More, "an empty chunk only lets held pieces go")
			return nil // not a piece of the answer
		}
		chunks = append(chunks, c)
		return nil
	}))
	return chunks
}

func simStats(t *testing.T, endpoint string) simls.Stats {
	t.Helper()
	resp, err := http.Get(endpoint + "/_sim/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	var st simls.Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie waiting for a parent that is not reaping it is dead too.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // not Linux: kill(0) is all there is
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}

func TestLifecycle(t *testing.T) {
	path := modelFile(t)
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=300ms"} })
	ctx := t.Context()
	m := engines.Model{ID: "p1", Name: "tiny", Source: path, Context: 1024, Args: []string{"-ngl", "0", "--threads=2"}}

	e := d.Detect(ctx)
	assert.True(t, e.Present, e.Detail)
	assert.True(t, e.Healthy, e.Detail)
	assert.Equal(t, simBin, e.Address)
	assert.Equal(t, "5000 (llmsim00)", e.Version)

	var events []engines.Progress
	require.NoError(t, d.Pull(ctx, m, func(p engines.Progress) { events = append(events, p) }))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, []engines.Progress{{Status: "success", Completed: fi.Size(), Total: fi.Size()}}, events)
	lp, err := d.LocalPath(m)
	require.NoError(t, err)
	assert.Equal(t, path, lp)

	start := time.Now()
	inst, err := d.Load(ctx, m)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "Load waits while /health answers 503")
	li := inst.(*Instance)
	assert.True(t, strings.HasPrefix(inst.Endpoint(), "http://127.0.0.1:"))
	assert.Equal(t, filepath.Join(d.cfg.LogDir, "p1.log"), inst.LogPath())
	pgid, err := syscall.Getpgid(li.Pid())
	require.NoError(t, err)
	assert.Equal(t, li.Pid(), pgid, "llama-server leads its own process group")

	st := simStats(t, inst.Endpoint())
	assert.Equal(t, path, st.Settings.ModelPath)
	assert.Equal(t, "tiny", st.Settings.Alias)
	assert.Equal(t, 1024, st.Settings.CtxSize)
	assert.Equal(t, 2, st.Settings.Threads)
	assert.True(t, st.Settings.Metrics)
	assert.Equal(t, 1, st.Settings.Parallel, "one slot unless asked: each request gets the whole context")
	assert.False(t, st.Settings.UnifiedKV)
	assert.Equal(t, 0, st.Settings.CacheRAM, "no prompt cache when the estimate counted none")

	require.NoError(t, d.Health(ctx, m))
	names, err := d.Loaded(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"tiny"}, names)

	again, err := d.Load(ctx, m)
	require.NoError(t, err)
	assert.Same(t, inst, again, "a running placement is returned as it is")

	chunks := collect(t, d, m, hello())
	require.Greater(t, len(chunks), 2)
	final := chunks[len(chunks)-1]
	assert.True(t, final.Done)
	assert.Equal(t, "stop", final.FinishReason)
	assert.Positive(t, final.PromptTokens)
	assert.Equal(t, len(chunks)-1, final.CompletionTokens)
	for _, c := range chunks[:len(chunks)-1] {
		assert.False(t, c.Done)
		assert.NotEmpty(t, c.Content)
	}
	limited := hello()
	limited.MaxTokens = 3
	chunks = collect(t, d, m, limited)
	assert.Equal(t, "length", chunks[len(chunks)-1].FinishReason)
	assert.Equal(t, 3, chunks[len(chunks)-1].CompletionTokens)

	logText, err := os.ReadFile(inst.LogPath())
	require.NoError(t, err)
	assert.Contains(t, string(logText), "main: model loaded")

	require.NoError(t, d.Unload(ctx, m))
	select {
	case <-inst.Done():
	default:
		t.Fatal("Unload returned before the process exited")
	}
	assert.NoError(t, inst.Err(), "a requested stop is not a failure")
	assert.False(t, alive(li.Pid()))
	names, err = d.Loaded(ctx)
	require.NoError(t, err)
	assert.Empty(t, names)
	err = d.Health(ctx, m)
	assert.Equal(t, api.CodeEngineUnavailable, codeOf(err))
	assert.EqualError(t, err, "EngineUnavailable: placement p1 has no llama-server running")
	err = d.Chat(ctx, m, hello(), func(engines.ChatChunk) error { return nil })
	assert.Equal(t, api.CodeEngineUnavailable, codeOf(err))
	logText, err = os.ReadFile(inst.LogPath())
	require.NoError(t, err)
	assert.Contains(t, string(logText), "cleaning up before exit", "stopped by SIGTERM, gracefully")

	// A restart keeps the previous run's log.
	inst2, err := d.Load(ctx, m)
	require.NoError(t, err)
	assert.NotEqual(t, li.Pid(), inst2.(*Instance).Pid())
	prev, err := os.ReadFile(inst.LogPath() + ".1")
	require.NoError(t, err)
	assert.Contains(t, string(prev), "cleaning up before exit")
}

func TestCrashReported(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_CRASH_AFTER=1", "LLAMA_SIM_LOAD_DELAY=0s"} })
	m := engines.Model{ID: "crashy", Source: modelFile(t)}
	inst, err := d.Load(t.Context(), m)
	require.NoError(t, err)
	collect(t, d, m, hello())

	select {
	case <-inst.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the crash was not reported")
	}
	err = inst.Err()
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	var xe *ExitError
	require.ErrorAs(t, err, &xe)
	assert.Equal(t, 1, xe.Code)
	assert.Empty(t, xe.Signal)
	assert.Contains(t, xe.Tail, "simulated crash after 1 completion requests")
	assert.True(t, strings.HasPrefix(err.Error(), "EngineError: llama-server exited with status 1; last log lines:\n"), err.Error())

	err = d.Health(t.Context(), m)
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	assert.ErrorAs(t, err, &xe)
	names, err := d.Loaded(t.Context())
	require.NoError(t, err)
	assert.Empty(t, names)

	// The placement can be started again.
	inst2, err := d.Load(t.Context(), m)
	require.NoError(t, err)
	assert.NotSame(t, inst, inst2)
}

func TestKilledBySignal(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"} })
	inst, err := d.Load(t.Context(), engines.Model{ID: "k", Source: modelFile(t)})
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(inst.(*Instance).Pid(), syscall.SIGKILL))
	<-inst.Done()
	var xe *ExitError
	require.ErrorAs(t, inst.Err(), &xe)
	assert.Equal(t, -1, xe.Code)
	assert.Equal(t, "killed", xe.Signal)
	assert.Contains(t, inst.Err().Error(), "llama-server was killed by signal killed")
}

func TestStartFailureReported(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_HOLD_MEMORY=lots"} })
	_, err := d.Load(t.Context(), engines.Model{ID: "bad", Source: modelFile(t)})
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	var xe *ExitError
	require.ErrorAs(t, err, &xe)
	assert.Equal(t, 1, xe.Code)
	assert.Contains(t, err.Error(), `EngineError: while starting, llama-server exited with status 1: error: LLAMA_SIM_HOLD_MEMORY="lots": want a fraction`)
	assert.Contains(t, xe.Tail, "LLAMA_SIM_HOLD_MEMORY")
}

func TestHealthTimeout(t *testing.T) {
	d := newDriver(t, func(c *Config) {
		c.Env = []string{"LLAMA_SIM_LOAD_DELAY=1h"}
		c.HealthTimeout = 400 * time.Millisecond
	})
	m := engines.Model{ID: "slow", Source: modelFile(t)}
	_, err := d.Load(t.Context(), m)
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	assert.ErrorContains(t, err, "llama-server did not become healthy, and for 400ms it read nothing of the model from the disk; last log lines:")
	// The process was stopped (gracefully), not left behind.
	logText, rerr := os.ReadFile(filepath.Join(d.cfg.LogDir, "slow.log"))
	require.NoError(t, rerr)
	assert.Contains(t, string(logText), "cleaning up before exit")
	names, _ := d.Loaded(t.Context())
	assert.Empty(t, names)
}

// The bound is on a stall, not on the start: a split's main that keeps sending its members
// their weights starts however long that takes, and fails once the bytes stop moving.
func TestHealthTimeoutCountsFromTheLastProgress(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.HealthTimeout = 400 * time.Millisecond })
	// moving is a split's count of bytes sent: 1 MiB every 50 ms, up to limit.
	moving := func(limit int64) func() int64 {
		var sent atomic.Int64
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for sent.Load() < limit {
				select {
				case <-tick.C:
					sent.Add(1 << 20)
				case <-t.Context().Done():
					return
				}
			}
		}()
		return sent.Load
	}

	// Loading for 2 s, five times the bound, with bytes moving all along: ready.
	d.cfg.Env = []string{"LLAMA_SIM_LOAD_DELAY=2s"}
	inst, err := d.Load(t.Context(), engines.Model{ID: "moving", Source: modelFile(t), Sent: moving(1 << 40)})
	require.NoError(t, err)
	require.NotNil(t, inst)

	// The bytes stop at 8 MiB: the start fails a bound later, and is stopped.
	d.cfg.Env = []string{"LLAMA_SIM_LOAD_DELAY=1h"}
	sent := moving(8 << 20)
	_, err = d.Load(t.Context(), engines.Model{ID: "stalled", Source: modelFile(t), Sent: sent})
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	assert.ErrorContains(t, err, "for 400ms it read nothing of the model from the disk and sent its split's members nothing")
	assert.GreaterOrEqual(t, sent(), int64(8<<20), "it failed only once the bytes stopped")
	names, _ := d.Loaded(t.Context())
	assert.Len(t, names, 1, "the stalled start was stopped: only the first runs")
}

// A process that ignores SIGTERM is killed after the grace period, with everything it started.
func TestStopEscalatesToSIGKILL(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	script := filepath.Join(dir, "llama-server")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
trap '' TERM
"`+simBin+`" "$@" &
sleep 60 &
echo $! > "`+pidFile+`"
wait
`), 0o755))
	d := newDriver(t, func(c *Config) {
		c.Binary = script
		c.StopGrace = 300 * time.Millisecond
		c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"}
	})
	m := engines.Model{ID: "stubborn", Source: modelFile(t)}
	inst, err := d.Load(t.Context(), m)
	require.NoError(t, err)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.True(t, alive(child))

	start := time.Now()
	require.NoError(t, d.Unload(t.Context(), m))
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "SIGKILL only after the grace period")
	<-inst.Done()
	assert.NoError(t, inst.Err())
	assert.False(t, alive(inst.(*Instance).Pid()))
	assert.Eventually(t, func() bool { return !alive(child) }, 5*time.Second, 20*time.Millisecond, "the whole process group is killed")
}

// A port another server took between the choice and the bind is detected (the server there does
// not serve our alias, and ours cannot bind), and the start retried on another port.
func TestPortTakenRetried(t *testing.T) {
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.Write([]byte(`{"status":"ok"}`))
		case "/v1/models":
			w.Write([]byte(`{"object":"list","data":[{"id":"someone-else"}]}`))
		}
	}))
	t.Cleanup(foreign.Close)
	taken := foreign.Listener.Addr().(*net.TCPAddr).Port

	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"} })
	calls := 0
	d.freePort = func() (int, error) {
		calls++
		if calls == 1 {
			return taken, nil
		}
		return freePort()
	}
	inst, err := d.Load(t.Context(), engines.Model{ID: "p", Name: "mine", Source: modelFile(t)})
	require.NoError(t, err)
	assert.Equal(t, 2, calls)
	assert.NotEqual(t, taken, inst.(*Instance).Port())
	assert.Equal(t, "mine", simStats(t, inst.Endpoint()).Settings.Alias)

	// Every port taken: a clear error after a few attempts.
	d.freePort = func() (int, error) { return taken, nil }
	_, err = d.Load(t.Context(), engines.Model{ID: "q", Name: "other", Source: modelFile(t)})
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	// Its log's last lines follow when it wrote any before it was stopped (timing decides).
	assert.True(t, strings.HasPrefix(err.Error(), "EngineError: llama-server could not get a free port in 3 attempts: another process took each one first"), err.Error())
}

func TestMissingBinary(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Binary = "/nonexistent/llama-server" })
	e := d.Detect(t.Context())
	assert.False(t, e.Present)
	assert.False(t, e.Healthy)
	assert.Contains(t, e.Detail, "llama-server not found at /nonexistent/llama-server")
	assert.Contains(t, e.Detail, "brew install llama.cpp")

	_, err := d.Load(t.Context(), engines.Model{ID: "p", Source: modelFile(t)})
	assert.Equal(t, api.CodeEngineUnavailable, codeOf(err))
	assert.ErrorContains(t, err, "llama-server not found at /nonexistent/llama-server")

	t.Setenv("PATH", t.TempDir())
	d = newDriver(t, func(c *Config) { c.Binary = "" })
	e = d.Detect(t.Context())
	assert.False(t, e.Present)
	assert.Equal(t, "llama-server not found on PATH; "+InstallHint, e.Detail)

	// Found on PATH once it is there.
	t.Setenv("PATH", filepath.Dir(simBin))
	e = d.Detect(t.Context())
	assert.True(t, e.Present)
	assert.Equal(t, simBin, e.Address)
}

func TestBrokenBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "llama-server")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho 'error while loading shared libraries: libggml.so' >&2\nexit 127\n"), 0o755))
	e := newDriver(t, func(c *Config) { c.Binary = bin }).Detect(t.Context())
	assert.True(t, e.Present)
	assert.False(t, e.Healthy)
	assert.Equal(t, bin+" --version failed: exit status 127: error while loading shared libraries: libggml.so", e.Detail)

	dir := t.TempDir()
	e = newDriver(t, func(c *Config) { c.Binary = dir }).Detect(t.Context())
	assert.False(t, e.Present)
	assert.Contains(t, e.Detail, dir+" is not an executable file")
}

func TestArgsRefused(t *testing.T) {
	d := newDriver(t, nil)
	allowed := "; allowed: -ngl N|auto|all, -t N, -tb N, -b N, -ub N, -np 1-64, -fa on|off|auto, -ctk f32|f16|bf16|q8_0|q4_0|q4_1|iq4_nl|q5_0|q5_1, -ctv f32|f16|bf16|q8_0|q4_0|q4_1|iq4_nl|q5_0|q5_1, --mlock, --no-mmap, --jinja, --no-webui, --embeddings, --pooling mean|cls|last|rank"
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--host", "0.0.0.0"}, `llama-server argument "--host" is not allowed`},
		{[]string{"--api-key-file=/etc/shadow"}, `llama-server argument "--api-key-file" is not allowed`},
		{[]string{"-ngl", "lots"}, `llama-server argument -ngl "lots" is not valid: want N|auto|all`},
		{[]string{"-fa", "yes"}, `llama-server argument -fa "yes" is not valid: want on|off|auto`},
		{[]string{"--mlock=1"}, `llama-server argument --mlock takes no value (got "--mlock=1")`},
		{[]string{"-t"}, `llama-server argument -t needs a value: N`},
		{[]string{"stray"}, `llama-server argument "stray" is not a flag`},
	} {
		err := d.CheckArgs(c.args)
		assert.Equal(t, api.CodeBadRequest, codeOf(err), c.args)
		assert.EqualError(t, err, "BadRequest: "+c.msg+allowed, c.args)
	}
	out, err := checkArgs([]string{"-ngl", "99", "--threads=4", "--mlock", "-fa", "on", "-ctk=q8_0"}, DefaultArgs)
	require.NoError(t, err)
	assert.Equal(t, []string{"-ngl", "99", "--threads", "4", "--mlock", "-fa", "on", "-ctk", "q8_0"}, out)

	// Load refuses before starting anything.
	_, err = d.Load(t.Context(), engines.Model{ID: "p", Source: modelFile(t), Args: []string{"--port", "80"}})
	assert.Equal(t, api.CodeBadRequest, codeOf(err))
	assert.NoFileExists(t, filepath.Join(d.cfg.LogDir, "p.log"))

	// An operator's own allowlist replaces the default.
	d = newDriver(t, func(c *Config) { c.ExtraArgs = []Arg{{Names: []string{"--mlock"}}} })
	assert.EqualError(t, d.CheckArgs([]string{"-ngl", "1"}), `BadRequest: llama-server argument "-ngl" is not allowed; allowed: --mlock`)
}

func TestPullRefusals(t *testing.T) {
	d := newDriver(t, nil)
	ctx := t.Context()

	err := d.Pull(ctx, engines.Model{ID: "p", Source: "/nonexistent/x.gguf"}, nil)
	assert.Equal(t, api.CodePullFailed, codeOf(err))
	assert.ErrorIs(t, err, engines.ErrNotFound)
	assert.EqualError(t, err, "PullFailed: model file /nonexistent/x.gguf does not exist: model not found")

	dir := filepath.Join(t.TempDir(), "dir.gguf")
	require.NoError(t, os.Mkdir(dir, 0o755))
	err = d.Pull(ctx, engines.Model{ID: "p", Source: dir}, nil)
	assert.Equal(t, api.CodePullFailed, codeOf(err))
	assert.EqualError(t, err, "PullFailed: model file "+dir+" is not a regular file")

	err = d.Pull(ctx, engines.Model{ID: "p", Source: "ollama://llama3.2:1b"}, nil)
	assert.Equal(t, api.CodeRuntimeMismatch, codeOf(err))
	assert.ErrorContains(t, err, "cannot run on llama-server")

	err = d.Pull(ctx, engines.Model{ID: "p", Source: "gopher://x"}, nil)
	assert.Equal(t, api.CodeInvalidSource, codeOf(err))

	_, err = d.Load(ctx, engines.Model{ID: "p", Source: "/nonexistent/x.gguf"})
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	assert.ErrorIs(t, err, engines.ErrNotFound)
	assert.EqualError(t, err, "EngineError: model file /nonexistent/x.gguf does not exist: model not found (pull it first)")

	_, err = d.Load(ctx, engines.Model{ID: "../escape", Source: modelFile(t)})
	assert.Equal(t, api.CodeBadRequest, codeOf(err))
	assert.EqualError(t, err, `BadRequest: placement id "../escape" cannot name a log file`)

	noStore := newDriver(t, func(c *Config) { c.ModelsDir = "" })
	err = noStore.Pull(ctx, engines.Model{ID: "p", Source: "https://example.com/x.gguf"}, nil)
	assert.Equal(t, api.CodePullFailed, codeOf(err))
	assert.EqualError(t, err, "PullFailed: no models folder is configured for downloads")

	_, err = New(Config{}, nil)
	assert.EqualError(t, err, "llama-server driver: a log folder (Config.LogDir) is required")
}

// https and hf sources are downloaded into the models folder, then served.
func TestPullDownloads(t *testing.T) {
	content, err := os.ReadFile(modelFile(t))
	require.NoError(t, err)
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		http.ServeContent(w, r, "tiny.gguf", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(srv.Close)
	d := newDriver(t, func(c *Config) {
		c.HFBase = srv.URL
		c.Download = download.Options{AllowHosts: []string{"127.0.0.1"}}
		c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"}
	})
	ctx := t.Context()

	hf := engines.Model{ID: "h", Source: "hf://acme/tiny-GGUF/tiny-Q8_0.gguf"}
	var events []engines.Progress
	require.NoError(t, d.Pull(ctx, hf, func(p engines.Progress) { events = append(events, p) }))
	size := int64(len(content))
	require.GreaterOrEqual(t, len(events), 3)
	assert.Equal(t, engines.Progress{Status: "downloading", Completed: 0, Total: size}, events[0])
	assert.Equal(t, engines.Progress{Status: "downloading", Completed: size, Total: size}, events[len(events)-2])
	assert.Equal(t, engines.Progress{Status: "success", Completed: size, Total: size}, events[len(events)-1])
	assert.Equal(t, []string{"/acme/tiny-GGUF/resolve/main/tiny-Q8_0.gguf"}, paths)
	local, err := d.LocalPath(hf)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(d.cfg.ModelsDir, "hf", "acme", "tiny-GGUF", "tiny-Q8_0.gguf"), local)
	got, err := os.ReadFile(local)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(content, got))

	inst, err := d.Load(ctx, hf)
	require.NoError(t, err)
	assert.Equal(t, "tiny-Q8_0", simStats(t, inst.Endpoint()).Settings.Alias, "the alias defaults to the file's name")
	assert.Equal(t, local, simStats(t, inst.Endpoint()).Settings.ModelPath)

	web := engines.Model{ID: "w", Source: srv.URL + "/files/tiny.gguf"}
	require.NoError(t, d.Pull(ctx, web, nil))
	local, err = d.LocalPath(web)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(d.cfg.ModelsDir, "https"), filepath.Dir(filepath.Dir(local)))
	assert.True(t, strings.HasSuffix(local, "-tiny.gguf"), local)
	assert.FileExists(t, local)

	// Without the allowlist, the download guard refuses loopback.
	guarded := newDriver(t, func(c *Config) { c.HFBase = srv.URL })
	err = guarded.Pull(ctx, engines.Model{ID: "g", Source: "hf://acme/tiny-GGUF/other.gguf"}, nil)
	assert.Equal(t, api.CodePullFailed, codeOf(err))
	assert.ErrorIs(t, err, download.ErrRefused)
	assert.ErrorContains(t, err, "a loopback address")
}

func TestChatStopsWhenEmitFails(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s", "LLAMA_SIM_TOKENS_PER_SEC=100"} })
	m := engines.Model{ID: "c", Source: modelFile(t)}
	inst, err := d.Load(t.Context(), m)
	require.NoError(t, err)
	gone := errors.New("client went away")
	n := 0
	err = d.Chat(t.Context(), m, hello(), func(engines.ChatChunk) error { n++; return gone })
	require.ErrorIs(t, err, gone)
	assert.Equal(t, 1, n)
	assert.Eventually(t, func() bool { return simStats(t, inst.Endpoint()).Cancelled == 1 }, 5*time.Second, 20*time.Millisecond)
}

func TestChatErrors(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"} })
	m := engines.Model{ID: "c", Source: modelFile(t), Context: 64}
	_, err := d.Load(t.Context(), m)
	require.NoError(t, err)

	long := engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: strings.Repeat("many words ", 100)}}}
	err = d.Chat(t.Context(), m, long, func(engines.ChatChunk) error { return nil })
	assert.Equal(t, api.CodeContextLimit, codeOf(err))
	assert.ErrorContains(t, err, "exceeds the available context size (64 tokens)")

	err = d.Chat(t.Context(), m, engines.ChatRequest{}, func(engines.ChatChunk) error { return nil })
	assert.Equal(t, api.CodeBadRequest, codeOf(err))
	assert.EqualError(t, err, "BadRequest: a chat needs at least one message")
}

func TestLogRotation(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.log")
	require.NoError(t, os.WriteFile(p, []byte("previous run\n"), 0o640))
	lf, err := openLog(p, 10)
	require.NoError(t, err)
	prev, _ := os.ReadFile(p + ".1")
	assert.Equal(t, "previous run\n", string(prev))
	lf.Write([]byte("12345678\n"))
	lf.Write([]byte("abcdefgh\n"))
	require.NoError(t, lf.Close())
	cur, _ := os.ReadFile(p)
	old, _ := os.ReadFile(p + ".1")
	assert.Equal(t, "abcdefgh\n", string(cur))
	assert.Equal(t, "12345678\n", string(old))
	assert.Equal(t, "abcdefgh", tailLines(p, 3))
}

func FuzzReadEvents(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"error\":{\"message\":\"boom\"}}\n\n")
	f.Add("error: {\"message\":\"boom\"}\n")
	f.Add(": comment\nevent: x\ndata: nonsense\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, body string) {
		done := 0
		err := readEvents(context.Background(), strings.NewReader(body), func(c engines.ChatChunk) error {
			if done > 0 {
				t.Fatal("a chunk after the last one")
			}
			if c.Done {
				done++
			}
			return nil
		})
		if err == nil && done != 1 {
			t.Fatalf("success with %d last chunks", done)
		}
	})
}

// An Unload while the engine is still loading cancels the start and stops the process.
func TestUnloadWhileStarting(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=1h"} })
	m := engines.Model{ID: "s", Source: modelFile(t)}
	loadErr := make(chan error, 1)
	go func() {
		_, err := d.Load(t.Context(), m)
		loadErr <- err
	}()
	logPath := filepath.Join(d.cfg.LogDir, "s.log")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "loading model")
	}, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, d.Unload(t.Context(), m))
	b, err := os.ReadFile(logPath)
	require.NoError(t, err)
	assert.Contains(t, string(b), "cleaning up before exit", "stopped before Unload returned")
	err = <-loadErr
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	assert.EqualError(t, err, "EngineError: placement s was unloaded while llama-server started")
	names, _ := d.Loaded(t.Context())
	assert.Empty(t, names)
}

// A caller giving up on a start gets its context's error, and the process is stopped.
func TestLoadCancelled(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=1h"} })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := d.Load(ctx, engines.Model{ID: "c", Source: modelFile(t)})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	b, rerr := os.ReadFile(filepath.Join(d.cfg.LogDir, "c.log"))
	require.NoError(t, rerr)
	assert.Contains(t, string(b), "cleaning up before exit")
}

// Detect offers the GGUF files of its folders (and one or two levels below) as models the host
// runs without a pull; partial downloads and other files are not offered.
func TestDetectOffersLocalGGUF(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.gguf", "sub/b.gguf", "sub/deep/c.gguf", "notes.txt", "sub/d.gguf.partial"} {
		p := filepath.Join(dir, filepath.FromSlash(f))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("GGUF"), 0o644))
	}
	e := newDriver(t, func(c *Config) { c.GGUFDirs = []string{dir} }).Detect(t.Context())
	require.True(t, e.Present, e.Detail)
	assert.Equal(t, []string{filepath.Join(dir, "a.gguf"), filepath.Join(dir, "sub", "b.gguf"), filepath.Join(dir, "sub", "deep", "c.gguf")}, e.Models)
}

// Slots asked for with -np each get the whole context a placement asked for: llama-server gets
// -c context × slots. The prompt cache is bounded by what the estimate counted, in whole MiB.
func TestSlotsAndPromptCache(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"} })
	args := []string{"--parallel=3", "-t", "1"}
	run, err := d.SizeRun(args)
	require.NoError(t, err)
	assert.Equal(t, 3, run.Slots)
	run, err = d.SizeRun(nil)
	require.NoError(t, err)
	assert.Zero(t, run.Slots, "the default: one slot")
	_, err = d.SizeRun([]string{"--host", "0.0.0.0"})
	require.Error(t, err, "refused arguments are refused when sizing too")
	require.Error(t, d.CheckArgs([]string{"-np", "65"}))
	require.Error(t, d.CheckArgs([]string{"-np", "0"}))

	m := engines.Model{ID: "s", Name: "slotted", Source: modelFile(t), Context: 512, Args: args, CacheBytes: 5<<20 + 123}
	inst, err := d.Load(t.Context(), m)
	require.NoError(t, err)
	st := simStats(t, inst.Endpoint())
	assert.Equal(t, 1536, st.Settings.CtxSize)
	assert.Equal(t, 3, st.Settings.Parallel)
	assert.False(t, st.Settings.UnifiedKV)
	assert.Equal(t, 5, st.Settings.CacheRAM)
	assert.Equal(t, 1, st.Settings.Threads)
	var slots []struct {
		NCtx int `json:"n_ctx"`
	}
	resp, err := http.Get(inst.Endpoint() + "/slots")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&slots))
	require.Len(t, slots, 3)
	for _, s := range slots {
		assert.Equal(t, 512, s.NCtx)
	}
}

// llama-server splits --alias on commas: such a name is refused before anything starts.
func TestNameWithCommaRefused(t *testing.T) {
	d := newDriver(t, nil)
	require.NoError(t, d.CheckName("qwen2.5:0.5b"))
	err := d.CheckName("a,b")
	assert.Equal(t, api.CodeBadRequest, codeOf(err))
	assert.EqualError(t, err, `BadRequest: model name "a,b" has a comma, and llama-server splits its --alias on commas: choose a name without one`)
	_, err = d.Load(t.Context(), engines.Model{ID: "c", Name: "a,b", Source: modelFile(t)})
	assert.Equal(t, api.CodeBadRequest, codeOf(err))
	assert.NoFileExists(t, filepath.Join(d.cfg.LogDir, "c.log"))
}

// An engine of our own that serves the model under other names is reported as it is, with its
// log, never as a port taken by someone else.
func TestOwnServerUnderAnotherNameReported(t *testing.T) {
	script := filepath.Join(t.TempDir(), "llama-server")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nexec \""+simBin+"\" \"$@\" --alias someone-else\n"), 0o755))
	d := newDriver(t, func(c *Config) {
		c.Binary = script
		c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"}
	})
	calls := 0
	d.freePort = func() (int, error) { calls++; return freePort() }
	_, err := d.Load(t.Context(), engines.Model{ID: "o", Name: "mine", Source: modelFile(t)})
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	assert.ErrorContains(t, err, `llama-server serves the model as ["someone-else"], not as "mine"; last log lines:`)
	assert.ErrorContains(t, err, "listening on")
	assert.Equal(t, 1, calls, "not retried as a port collision")
}

// The reason an engine gives is its first error line near the end of its log: the cause, not
// the cascade llama-server prints after it.
func TestExitReason(t *testing.T) {
	tail := `0.00.012.223 I srv    load_model: loading model 'bad.gguf'
0.00.012.317 E gguf_init_from_reader: invalid magic characters: '???7', expected 'GGUF'
0.00.012.461 E llama_model_load: error loading model: llama_model_loader: failed to load model from bad.gguf
0.00.013.028 E srv  llama_server: exiting due to model loading error`
	assert.Equal(t, "gguf_init_from_reader: invalid magic characters: '???7', expected 'GGUF'", exitReason(tail))
	assert.Equal(t, "error: invalid argument: --bogus", exitReason("error: invalid argument: --bogus\n\nto show complete usage, run with -h"))
	assert.Equal(t, `error while handling argument "-c": stoi`, exitReason("error while handling argument \"-c\": stoi\n\nusage:"))
	assert.Empty(t, exitReason("0.00.1 I all is well\nmain: model loaded"))
	assert.Equal(t, "x", exitReason("0.1 E x\x1b"), "control characters are dropped")
}

// A stream that ends with an error line after some content (llama-server does when a slot
// fails mid-answer) is an error after the content came, never a complete answer.
func TestChatErrorAfterContent(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s", "LLAMA_SIM_STREAM_ERROR_AFTER=2"} })
	m := engines.Model{ID: "e", Source: modelFile(t)}
	_, err := d.Load(t.Context(), m)
	require.NoError(t, err)
	var got []engines.ChatChunk
	long := hello()
	long.MaxTokens = 20
	err = d.Chat(t.Context(), m, long, func(c engines.ChatChunk) error {
		if c.Content != "" || c.Done {
			got = append(got, c) // not the empty chunks that let held pieces go
		}
		return nil
	})
	assert.Equal(t, api.CodeEngineError, codeOf(err))
	assert.EqualError(t, err, "EngineError: llama-server: simulated failure after 2 tokens (LLAMA_SIM_STREAM_ERROR_AFTER)")
	require.Len(t, got, 2)
	for _, c := range got {
		assert.False(t, c.Done)
		assert.NotEmpty(t, c.Content)
	}
}

// A stream cut by llama-server's "Context size has been exceeded" (slots sharing one context,
// when -np is auto) is a context error, which clients are told as such.
func TestStreamContextExceededIsContextLimit(t *testing.T) {
	body := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"error\":{\"code\":500,\"message\":\"Context size has been exceeded.\",\"type\":\"server_error\"}}\n\n"
	n := 0
	err := readEvents(t.Context(), strings.NewReader(body), func(engines.ChatChunk) error { n++; return nil })
	assert.Equal(t, api.CodeContextLimit, codeOf(err))
	assert.EqualError(t, err, "ContextTooLong: llama-server: Context size has been exceeded.")
	assert.Equal(t, 1, n, "the content before it was passed on")
}

// readEvents reads an answer as llama-server (build 9749) writes it, copied from its output:
// the role alone first, pieces of content, the finish reason, and the counts from the last
// event's timings (the agent asks for no usage), the prompt's cached tokens included.
func TestReadEventsReadsLlamaServersAnswer(t *testing.T) {
	const tail = `],"created":1796133633,"id":"chatcmpl-PoJuPs4ythHSDNfzcanQRkqMOh7bOiim","model":"/work/shared/engines/models/tiny.gguf","system_fingerprint":"b9749-d32676d77","object":"chat.completion.chunk"`
	const timings = `,"timings":{"cache_n":32,"prompt_n":1,"prompt_ms":0.879,"prompt_per_token_ms":0.879,"prompt_per_second":1137.6564277588168,"predicted_n":3,"predicted_ms":1.057,"predicted_per_token_ms":0.35233333333333333,"predicted_per_second":2838.221381267739}`
	body := "data: " + `{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}` + tail + "}\n\n" +
		"data: " + `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" tele"}}` + tail + "}\n\n" +
		"data: " + `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" два"}}` + tail + "}\n\n" +
		"data: " + `{"choices":[{"finish_reason":"length","index":0,"delta":{}}` + tail + timings + "}\n\n" +
		"data: [DONE]\n\n"
	var got []engines.ChatChunk
	require.NoError(t, readEvents(t.Context(), strings.NewReader(body), func(c engines.ChatChunk) error {
		got = append(got, c)
		return nil
	}))
	assert.Equal(t, []engines.ChatChunk{
		{Content: " tele", More: true},
		{Content: " два", More: true},
		{Done: true, FinishReason: "length", PromptTokens: 33, CompletionTokens: 3},
	}, got)
}

// Pieces that arrive together go out with More, and an empty chunk follows them before the
// reader waits on the engine again; a piece that arrives alone is never left held.
func TestReadEventsHoldsOnlyWhatIsFollowed(t *testing.T) {
	event := func(s string) string {
		return `data: {"choices":[{"delta":{"content":"` + s + `"},"finish_reason":null,"index":0}],"id":"x"}` + "\n\n"
	}
	pr, pw := io.Pipe()
	got := make(chan engines.ChatChunk)
	next := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- readEvents(context.Background(), pr, func(c engines.ChatChunk) error {
			got <- c
			<-next
			return nil
		})
	}()
	recv := func() engines.ChatChunk {
		c := <-got
		next <- struct{}{}
		return c
	}
	go pw.Write([]byte(event("a") + event("b")))
	assert.Equal(t, engines.ChatChunk{Content: "a", More: true}, recv())
	assert.Equal(t, engines.ChatChunk{Content: "b", More: true}, recv())
	assert.Equal(t, engines.ChatChunk{}, recv(), "nothing more at hand: the held pieces are let go before waiting")
	go pw.Write([]byte(event("c")))
	assert.Equal(t, engines.ChatChunk{Content: "c", More: true}, recv())
	assert.Equal(t, engines.ChatChunk{}, recv())
	go func() {
		pw.Write([]byte(`data: {"choices":[{"delta":{},"finish_reason":"stop","index":0}],"id":"x"}` + "\n\ndata: [DONE]\n\n"))
	}()
	assert.Equal(t, engines.ChatChunk{Done: true, FinishReason: "stop"}, recv())
	require.NoError(t, <-errc)
}

// Detect asks the binary for its version once while the file stays the same (it is a process
// start every 30 s otherwise), and again once the file changes.
func TestDetectAsksTheVersionOncePerBinary(t *testing.T) {
	dir := t.TempDir()
	bin, runs := filepath.Join(dir, "llama-server"), filepath.Join(dir, "runs")
	script := func(v string) {
		require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho run >> "+runs+"\necho 'version: "+v+"'\n"), 0o755))
	}
	count := func() int {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run")
	}
	script("1 (aaa)")
	d := newDriver(t, func(c *Config) { c.Binary = bin })
	for range 3 {
		e := d.Detect(t.Context())
		require.True(t, e.Healthy, e.Detail)
		assert.Equal(t, "1 (aaa)", e.Version)
	}
	assert.Equal(t, 1, count())
	script("22 (bbbb)") // an upgrade: another size
	e := d.Detect(t.Context())
	assert.Equal(t, "22 (bbbb)", e.Version)
	assert.Equal(t, 2, count())
}
