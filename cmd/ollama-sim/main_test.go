package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/sim/simtest"
)

var binary string

func TestMain(m *testing.M) {
	simtest.Main(m, func(dir string) (err error) {
		binary, err = simtest.Build(dir, ".", "ollama-sim")
		return err
	})
}

var ready = regexp.MustCompile(`^ollama-sim: serving (http://\S+) registry (http://\S+)$`)

// launch runs the simulator on free ports and returns it with its two URLs.
func launch(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, url, registry string, exited chan error) {
	t.Helper()
	cmd = exec.Command(binary, append([]string{"serve", "-addr", "127.0.0.1:0", "-registry-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = io.Discard
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited = make(chan error, 1)
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	select {
	case l, ok := <-line:
		require.True(t, ok, "no ready line")
		m := ready.FindStringSubmatch(l)
		require.NotNil(t, m, "ready line %q", l)
		return cmd, m[1], m[2], exited
	case <-time.After(10 * time.Second):
		t.Fatal("no ready line")
	}
	return
}

func TestServesOllamaAndRegistry(t *testing.T) {
	_, url, registry, _ := launch(t, []string{"OLLAMA_SIM_PRELOADED=gemma3:1b"}, "-preloaded", "qwen2.5:0.5b,llama3.2:1b")

	resp, err := http.Get(url + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "Ollama is running", string(body))

	var tags struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	resp, err = http.Get(url + "/api/tags")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&tags))
	resp.Body.Close()
	var names []string
	for _, m := range tags.Models {
		names = append(names, m.Name)
	}
	assert.ElementsMatch(t, []string{"qwen2.5:0.5b", "llama3.2:1b"}, names, "the flag overrides the variable")

	resp, err = http.Get(registry + "/v2/library/gemma3/manifests/1b")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	// A chat streams NDJSON from the separate process.
	resp, err = http.Post(url+"/api/chat", "application/json",
		strings.NewReader(`{"model":"qwen2.5:0.5b","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	lines := bytes.Split(bytes.TrimSpace(must(io.ReadAll(resp.Body))), []byte("\n"))
	var last map[string]any
	require.NoError(t, json.Unmarshal(lines[len(lines)-1], &last))
	assert.Equal(t, true, last["done"])

	var st struct {
		Requests map[string]int `json:"requests"`
		Registry map[string]int `json:"registry"`
	}
	resp, err = http.Get(url + "/_sim/stats")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	resp.Body.Close()
	assert.Equal(t, 1, st.Requests["POST /api/chat"])
	assert.Equal(t, 1, st.Registry["GET /v2/library/gemma3/manifests/1b"])
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestSIGTERMExitsZero(t *testing.T) {
	cmd, _, _, exited := launch(t, nil)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		assert.NoError(t, err, "exit status 0")
	case <-time.After(10 * time.Second):
		t.Fatal("did not exit")
	}
}

func TestRefusesBadSettings(t *testing.T) {
	for name, c := range map[string]struct {
		env  []string
		args []string
		want string
	}{
		"unknown preloaded": {args: []string{"-preloaded", "mystery:9b"}, want: "not in the catalogue"},
		"bad variable":      {env: []string{"OLLAMA_SIM_NUM_CTX=lots"}, want: "OLLAMA_SIM_NUM_CTX"},
		"bad keep-alive":    {args: []string{"-keep-alive", "soon"}, want: "-keep-alive"},
		"bad flag":          {args: []string{"-no-such-flag"}, want: "flag provided but not defined"},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(context.Background(), c.args, func(k string) string {
				for _, kv := range c.env {
					if k2, v, _ := strings.Cut(kv, "="); k2 == k {
						return v
					}
				}
				return ""
			}, io.Discard, &stderr)
			assert.NotZero(t, code)
			assert.Contains(t, stderr.String(), c.want)
		})
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr simtest.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-keep-alive", "-1"}, func(string) string { return "" }, &stdout, &stderr)
	}()
	require.Eventually(t, func() bool { return ready.MatchString(strings.TrimSpace(stdout.String())) }, 5*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case code := <-done:
		assert.Zero(t, code)
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return")
	}
	assert.Contains(t, stderr.String(), "Listening on")
}

// BenchmarkStartToReady measures a process start until its ready line (target: well under a
// second).
func BenchmarkStartToReady(b *testing.B) {
	for b.Loop() {
		cmd := exec.Command(binary, "-addr", "127.0.0.1:0")
		stdout, err := cmd.StdoutPipe()
		require.NoError(b, err)
		require.NoError(b, cmd.Start())
		bufio.NewScanner(stdout).Scan()
		cmd.Process.Signal(syscall.SIGTERM)
		io.Copy(io.Discard, stdout)
		cmd.Wait()
	}
}
