package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/sim/simtest"
)

var readyLine = regexp.MustCompile(`^hailo-sim: serving (http://\S+) library (http://\S+)\n`)

func noEnv(string) string { return "" }

func TestRunServesUntilCancelled(t *testing.T) {
	home := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr simtest.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--listen", "127.0.0.1:0", "--home", home, "--preloaded", "qwen2:1.5b", "--hef-size", "4KiB"},
			noEnv, &stdout, &stderr)
	}()
	require.Eventually(t, func() bool { return readyLine.MatchString(stdout.String()) }, 10*time.Second, 5*time.Millisecond, stderr.String())
	m := readyLine.FindStringSubmatch(stdout.String())

	resp, err := http.Get(m[1] + "/api/tags")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `"size":4096`)
	resp, err = http.Head(m[2] + "/blob/sha256_" + "0000000000000000000000000000000000000000000000000000000000000000")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 404, resp.StatusCode)

	// The home holds a real install's layout.
	assert.FileExists(t, filepath.Join(home, ".local/share/hailo-ollama/models/manifests/qwen2/1.5b/manifest.json"))
	assert.FileExists(t, filepath.Join(home, ".config/hailo-ollama/hailo-ollama.json"))

	cancel()
	assert.Equal(t, 0, <-code)
}

func TestRunRejectsBadSettings(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--listen", "nowhere"}, nil, "listen address"},
		{[]string{"--hef-size", "lots"}, nil, "HAILO_SIM_HEF_SIZE"},
		{nil, map[string]string{"HAILO_SIM_HEF_SIZE": "0"}, "HEF size"},
		{nil, map[string]string{"HAILO_SIM_LIBRARY_LISTEN": "127.0.0.1:70000"}, "library listen address"},
		{[]string{"--switch-delay", "soon"}, nil, "HAILO_SIM_SWITCH_DELAY"},
		{[]string{"--preloaded", "gpt:1t"}, nil, "not in the 5.1.1 zoo"},
		{[]string{"--no-such-flag"}, nil, "flag provided but not defined"},
		{[]string{"extra"}, nil, "unexpected arguments"},
	} {
		var stdout, stderr simtest.Buffer
		getenv := func(k string) string { return c.env[k] }
		got := run(t.Context(), append([]string{"--home", t.TempDir()}, c.args...), getenv, &stdout, &stderr)
		assert.Equal(t, 2, got, "%v %v", c.args, c.env)
		assert.Contains(t, stderr.String(), c.want, "%v %v", c.args, c.env)
		assert.Empty(t, stdout.String())
	}
	// A flag beats its environment variable.
	var stdout, stderr simtest.Buffer
	got := run(t.Context(), []string{"--home", t.TempDir(), "--hef-size", "bad"},
		func(k string) string { return map[string]string{"HAILO_SIM_HEF_SIZE": "4096"}[k] }, &stdout, &stderr)
	assert.Equal(t, 2, got)
}

func TestHelp(t *testing.T) {
	var stdout, stderr simtest.Buffer
	assert.Equal(t, 0, run(t.Context(), []string{"-h"}, noEnv, &stdout, &stderr))
	for _, want := range []string{"HAILO_SIM_LISTEN", "HAILO_SIM_HEF_SIZE", "HAILO_SIM_HOME", "temporary home", "-home", "-tokens-per-second"} {
		assert.Contains(t, stderr.String(), want)
	}
}

// buildBinary builds hailo-sim once for the process tests.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "hailo-sim-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hailo-sim")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{err, out}
	}
	return bin, nil
})

type buildError struct {
	err error
	out []byte
}

func (b *buildError) Error() string { return b.err.Error() + ": " + string(b.out) }

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := buildBinary(); err == nil {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

func startProcess(t *testing.T, env []string, args ...string) (*exec.Cmd, *bufio.Reader, *simtest.Buffer) {
	t.Helper()
	bin, err := buildBinary()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &simtest.Buffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, bufio.NewReader(stdout), stderr
}

func TestProcessServesAndStopsOnSIGTERM(t *testing.T) {
	home := t.TempDir()
	cmd, out, stderr := startProcess(t, []string{"HAILO_SIM_HEF_SIZE=8KiB", "HAILO_SIM_TTFT=0s", "HAILO_SIM_TOKENS_PER_SECOND=0"},
		"--listen", "127.0.0.1:0", "--home", home, "--preloaded", "llama3.2:3b", "--switch-delay", "0s", "--load-time", "0s")
	line, err := out.ReadString('\n')
	require.NoError(t, err, stderr.String())
	m := readyLine.FindStringSubmatch(line)
	require.NotNil(t, m, line)

	resp, err := http.Post(m[1]+"/api/chat", "application/json",
		bytes.NewBufferString(`{"model":"llama3.2:3b","messages":[{"role":"user","content":"hi"}],"stream":false}`))
	require.NoError(t, err)
	var chat struct {
		Message struct{ Content string }
		Done    bool
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&chat))
	resp.Body.Close()
	assert.True(t, chat.Done)
	assert.NotEmpty(t, chat.Message.Content)

	resp, err = http.Get(m[1] + "/_sim/stats")
	require.NoError(t, err)
	var stats struct {
		Pulls  int
		Loaded string
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&stats))
	resp.Body.Close()
	assert.Equal(t, 0, stats.Pulls, "a preloaded model needs no pull")
	assert.Equal(t, "llama3.2:3b", stats.Loaded)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), stderr.String())
	assert.Equal(t, 0, cmd.ProcessState.ExitCode())
}

func TestProcessExitsWhenLibraryCannotBind(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { busy.Close() })
	cmd, out, stderr := startProcess(t, []string{"HAILO_SIM_LIBRARY_LISTEN=" + busy.Addr().String()},
		"--listen", "127.0.0.1:0")
	_, err = out.ReadString('\n')
	assert.ErrorIs(t, err, io.EOF, "no ready line")
	cmd.Wait()
	assert.Equal(t, 1, cmd.ProcessState.ExitCode())
	assert.Contains(t, stderr.String(), "library listener")
}

func TestProcessRejectsBadEnvironment(t *testing.T) {
	cmd, out, stderr := startProcess(t, []string{"HAILO_SIM_HEF_SIZE=huge"})
	_, err := out.ReadString('\n')
	assert.ErrorIs(t, err, io.EOF)
	cmd.Wait()
	assert.Equal(t, 2, cmd.ProcessState.ExitCode())
	assert.Contains(t, stderr.String(), `HAILO_SIM_HEF_SIZE="huge"`)
}

// Without --listen, each release binds by its own setting: OLLAMA_HOST for 5.3, the JSON
// "server" for 5.1.1, each ignoring the other's.
func TestRunBindsByTheReleasesOwnSetting(t *testing.T) {
	for _, c := range []struct {
		version string
		env     map[string]string
		json    string
	}{
		{"5.3.0", map[string]string{"OLLAMA_HOST": "127.0.0.1:0"}, `{"server":{"host":"127.0.0.1","port":8000}}`},
		{"5.1.1", map[string]string{"OLLAMA_HOST": "127.0.0.1:8000"}, `{"server":{"host":"127.0.0.1","port":0}}`},
	} {
		home := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(home, ".config", "hailo-ollama"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(home, ".config", "hailo-ollama", "hailo-ollama.json"), []byte(c.json), 0o644))
		ctx, cancel := context.WithCancel(context.Background())
		var stdout, stderr simtest.Buffer
		code := make(chan int, 1)
		go func() {
			code <- run(ctx, []string{"--version", c.version, "--home", home, "--hef-size", "4KiB"},
				func(k string) string { return c.env[k] }, &stdout, &stderr)
		}()
		require.Eventually(t, func() bool { return readyLine.MatchString(stdout.String()) }, 10*time.Second, 5*time.Millisecond, stderr.String())
		m := readyLine.FindStringSubmatch(stdout.String())
		assert.NotContains(t, m[1], ":8000", "%s bound by the other release's setting", c.version)
		assert.Contains(t, stderr.String(), "binding by the release's own setting")
		cancel()
		assert.Equal(t, 0, <-code)
	}
}
