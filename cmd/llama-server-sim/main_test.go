package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/sim/simtest"
)

// binary is the simulator built once for all tests, named like the real program.
var binary string

func TestMain(m *testing.M) {
	simtest.Main(m, func(dir string) (err error) {
		binary, err = simtest.Build(dir, ".", "llama-server")
		return err
	})
}

// proc is a running simulator process whose stderr is collected line by line.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	grew   chan struct{} // signalled when a line arrives or stderr ends
	exited chan struct{}
	err    error // Wait's result, once exited is closed
}

func launch(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, grew: make(chan struct{}, 1), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			p.signal()
		}
		p.err = cmd.Wait()
		close(p.exited)
		p.signal()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *proc) signal() {
	select {
	case p.grew <- struct{}{}:
	default:
	}
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLine waits for a stderr line matching re and returns its submatches.
func (p *proc) waitLine(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(10 * time.Second)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if m := rx.FindStringSubmatch(l); m != nil {
				p.mu.Unlock()
				return m
			}
		}
		p.mu.Unlock()
		select {
		case <-p.grew:
		case <-p.exited:
			p.mu.Lock()
			for _, l := range p.lines { // lines that came with the exit
				if m := rx.FindStringSubmatch(l); m != nil {
					p.mu.Unlock()
					return m
				}
			}
			p.mu.Unlock()
			t.Fatalf("process exited (%v) without a line matching %q; stderr:\n%s", p.err, re, p.output())
		case <-deadline:
			t.Fatalf("no line matching %q; stderr:\n%s", re, p.output())
		}
	}
}

// exitCode waits for the process to end and returns its status.
func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("process did not exit; stderr:\n%s", p.output())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, p.err)
	return 0
}

// ready launches the simulator on a free port and returns it with its base URL once loaded.
func ready(t *testing.T, env []string, args ...string) (*proc, string) {
	t.Helper()
	p := launch(t, env, append([]string{"--host", "127.0.0.1", "--port", "0"}, args...)...)
	url := p.waitLine(t, `server is listening on (http://\S+)`)[1]
	return p, url
}

func modelFile(t *testing.T, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny-q4.gguf")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = f.WriteString("GGUF")
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
	return path
}

var quick = []string{"LLAMA_SIM_LOAD_DELAY=0"}

func TestFoundOnPATHAsLlamaServer(t *testing.T) {
	t.Setenv("PATH", filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	found, err := exec.LookPath("llama-server")
	require.NoError(t, err)
	assert.Equal(t, binary, found)
}

func TestHealth503WhileLoadingThen200(t *testing.T) {
	model := modelFile(t, 1<<20)
	p := launch(t, []string{"LLAMA_SIM_LOAD_DELAY=1500ms"}, "-m", model, "--host", "127.0.0.1", "--port", "0")
	port := p.waitLine(t, `HTTP server is listening, hostname: 127\.0\.0\.1, port: (\d+)`)[1]
	url := "http://127.0.0.1:" + port

	resp, err := http.Get(url + "/health")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "health while loading")
	assert.JSONEq(t, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, string(body))

	p.waitLine(t, `model loaded`)
	resp, err = http.Get(url + "/health")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"status":"ok"}`, string(body))
}

func TestServesLikeLlamaServer(t *testing.T) {
	model := modelFile(t, 1<<20)
	_, url := ready(t, quick, "-m", model, "-c", "2048", "-ngl", "99", "--metrics", "--alias", "tiny:1b",
		"-t", "2", "--mlock", "-fa", "on", "--jinja", "--temp", "0.7")

	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	getJSON(t, url+"/v1/models", &models)
	require.Len(t, models.Data, 1)
	assert.Equal(t, "tiny:1b", models.Data[0].ID)

	var props struct {
		Default struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
		ModelPath string `json:"model_path"`
	}
	getJSON(t, url+"/props", &props)
	assert.Equal(t, 2048, props.Default.NCtx)
	assert.Equal(t, model, props.ModelPath)

	// Streaming: role chunk, content chunks, a final chunk with finish_reason and timings, [DONE].
	resp, err := post(url+"/v1/chat/completions", `{"model":"tiny:1b","messages":[{"role":"user","content":"hello"}],"stream":true}`)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var events []map[string]any
	sawDone := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, line)
		if data == "[DONE]" {
			sawDone = true
			break
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &ev))
		events = append(events, ev)
	}
	require.True(t, sawDone)
	require.GreaterOrEqual(t, len(events), 3)
	var text strings.Builder
	for _, ev := range events[1 : len(events)-1] {
		text.WriteString(ev["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)["content"].(string))
	}
	last := events[len(events)-1]
	assert.Equal(t, "stop", last["choices"].([]any)[0].(map[string]any)["finish_reason"])
	assert.Contains(t, last, "timings")

	// Not streaming: the same answer, with usage and timings.
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage   map[string]int     `json:"usage"`
		Timings map[string]float64 `json:"timings"`
	}
	postJSON(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hello"}]}`, &out)
	assert.Equal(t, text.String(), out.Choices[0].Message.Content)
	assert.Positive(t, out.Usage["completion_tokens"])
	assert.Positive(t, out.Timings["predicted_per_second"])

	resp, err = http.Get(url + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Regexp(t, `(?m)^llamacpp:prompt_tokens_total [1-9]\d*$`, string(metrics))
	assert.Regexp(t, fmt.Sprintf(`(?m)^llamacpp:tokens_predicted_total %d$`, 2*out.Usage["completion_tokens"]), string(metrics))

	var st struct {
		Requests    map[string]int `json:"requests"`
		Completions int            `json:"completions"`
		Settings    struct {
			CtxSize   int    `json:"ctx_size"`
			GPULayers int    `json:"n_gpu_layers"`
			Threads   int    `json:"threads"`
			Metrics   bool   `json:"metrics"`
			MLock     bool   `json:"mlock"`
			FlashAttn string `json:"flash_attn"`
			Jinja     bool   `json:"jinja"`
			Alias     string `json:"alias"`
		} `json:"settings"`
	}
	getJSON(t, url+"/_sim/stats", &st)
	assert.Equal(t, 2, st.Completions)
	assert.Equal(t, 2, st.Requests["POST /v1/chat/completions"])
	// The command line as the simulator understood it, for tests of how the agent launches it.
	assert.Equal(t, 2048, st.Settings.CtxSize)
	assert.Equal(t, 99, st.Settings.GPULayers)
	assert.Equal(t, 2, st.Settings.Threads)
	assert.True(t, st.Settings.Metrics && st.Settings.MLock && st.Settings.Jinja)
	assert.Equal(t, "on", st.Settings.FlashAttn)
	assert.Equal(t, "tiny:1b", st.Settings.Alias)
}

func TestMetricsNeedTheFlag(t *testing.T) {
	_, url := ready(t, quick, "-m", modelFile(t, 1024))
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotImplemented, resp.StatusCode)
}

// Like the real llama-server, the simulator refuses a flag it does not know, at once, with
// status 1 and llama-server's words.
func TestUnknownFlagExits1(t *testing.T) {
	p := launch(t, quick, "-m", modelFile(t, 1024), "--cache-type-k", "q8_0", "--brand-new-flag", "7")
	assert.Equal(t, 1, p.exitCode(t))
	assert.Contains(t, p.output(), "error: invalid argument: --brand-new-flag")
	assert.NotContains(t, p.output(), "listening")
}

func TestSIGTERMExitsZero(t *testing.T) {
	p, _ := ready(t, quick, "-m", modelFile(t, 1024))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, p.exitCode(t))
	assert.Contains(t, p.output(), "cleaning up before exit")
}

func TestSIGTERMWhileLoadingExitsZero(t *testing.T) {
	p := launch(t, []string{"LLAMA_SIM_LOAD_DELAY=1h"}, "-m", modelFile(t, 1024), "--port", "0")
	p.waitLine(t, `HTTP server is listening`)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 0, p.exitCode(t))
}

func TestCrashAfterN(t *testing.T) {
	p, url := ready(t, append([]string{"LLAMA_SIM_CRASH_AFTER=2"}, quick...), "-m", modelFile(t, 1024))
	var out map[string]any
	postJSON(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}]}`, &out)
	postJSON(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"b"}],"stream":true}`, nil)
	assert.Equal(t, 1, p.exitCode(t), "a crash exits with status 1")
	assert.Contains(t, p.output(), "simulated crash after 2 completion requests")
}

// rss reads a process's resident set size from /proc.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB$`).FindSubmatch(status)
	require.NotNil(t, m, "VmRSS in /proc/%d/status", pid)
	kb, err := strconv.ParseInt(string(m[1]), 10, 64)
	require.NoError(t, err)
	return kb << 10
}

func TestHoldsMemoryInProportionToTheModel(t *testing.T) {
	const size = 96 << 20 // a sparse file: no disk used
	model := modelFile(t, size)
	lean, _ := ready(t, quick, "-m", model)
	fat, _ := ready(t, append([]string{"LLAMA_SIM_HOLD_MEMORY=1"}, quick...), "-m", model)
	leanRSS, fatRSS := rss(t, lean.cmd.Process.Pid), rss(t, fat.cmd.Process.Pid)
	assert.Less(t, leanRSS, int64(size/2), "without holding, the simulator is small")
	assert.GreaterOrEqual(t, fatRSS, int64(size), "holding the whole model file's size")
}

func TestRefusesBadCommandLines(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		env  []string
		want string
	}{
		"no model":      {args: []string{"--port", "0"}, want: "needs -m"},
		"missing model": {args: []string{"-m", "/nonexistent/model.gguf"}, want: "failed to load model"},
		"bad port":      {args: []string{"-m", "x", "--port", "70000"}, want: "invalid port"},
		"bad env":       {args: []string{"-m", "x"}, env: []string{"LLAMA_SIM_HOLD_MEMORY=lots"}, want: "LLAMA_SIM_HOLD_MEMORY"},
		"equals form":   {args: []string{"-m", "x", "--port=8080"}, want: "invalid argument"},
	} {
		t.Run(name, func(t *testing.T) {
			p := launch(t, c.env, c.args...)
			assert.Equal(t, 1, p.exitCode(t))
			assert.Contains(t, p.output(), c.want)
		})
	}
}

func TestPortInUse(t *testing.T) {
	_, url := ready(t, quick, "-m", modelFile(t, 1024))
	port := url[strings.LastIndex(url, ":")+1:]
	p := launch(t, quick, "-m", modelFile(t, 1024), "--port", port)
	assert.Equal(t, 1, p.exitCode(t))
	assert.Contains(t, p.output(), "couldn't bind HTTP server socket")
}

func TestVersionAndHelp(t *testing.T) {
	p := launch(t, nil, "--version")
	assert.Equal(t, 0, p.exitCode(t))
	assert.Contains(t, p.output(), "version:")
	out, err := exec.Command(binary, "-h").Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "LLAMA_SIM_CRASH_AFTER")
}

// BenchmarkStartToReady measures a process start until /health answers 200 (the target is well
// under a second).
func BenchmarkStartToReady(b *testing.B) {
	dir := b.TempDir()
	model := filepath.Join(dir, "m.gguf")
	require.NoError(b, os.WriteFile(model, []byte("GGUF"), 0o600))
	for b.Loop() {
		cmd := exec.Command(binary, "-m", model, "--port", "0")
		cmd.Env = append(os.Environ(), quick...)
		stderr, err := cmd.StderrPipe()
		require.NoError(b, err)
		require.NoError(b, cmd.Start())
		sc := bufio.NewScanner(stderr)
		for sc.Scan() && !strings.Contains(sc.Text(), "server is listening on") {
		}
		cmd.Process.Signal(syscall.SIGTERM)
		io.Copy(io.Discard, stderr)
		cmd.Wait()
	}
}

// post posts a JSON body; a streamed answer's on a connection of its own, as llama-server closes
// the connection after one without saying so, which a client reusing it would fail on.
func post(url, body string) (*http.Response, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Close = strings.Contains(body, `"stream":true`)
	return http.DefaultClient.Do(req)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

func postJSON(t *testing.T, url, body string, v any) {
	t.Helper()
	resp, err := post(url, body)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	if v != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	} else {
		io.Copy(io.Discard, resp.Body)
	}
}
