package llamaserver

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/sim/simtest"
)

// startRaw starts bin with llama-server's command line on a port of its own choosing and
// returns its base URL once it says where it listens.
func startRaw(t *testing.T, bin string, args ...string) string {
	t.Helper()
	var out simtest.Buffer
	cmd := exec.Command(bin, append([]string{"--host", "127.0.0.1", "--port", "0"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	listening := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)
	require.Eventually(t, func() bool { return listening.MatchString(out.String()) }, 30*time.Second, 10*time.Millisecond, "%s", &out)
	url := listening.FindStringSubmatch(out.String())[1]
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 10*time.Millisecond)
	return url
}

func paths(t *testing.T, b []byte) map[string]bool {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	out := map[string]bool{}
	enginetest.KeyPaths(v, "", out)
	return out
}

// exchange is one request and what came back: the status and the key paths of the answer (of
// each server-sent event, merged, for a stream).
type exchange struct {
	status int
	keys   map[string]bool
}

func do(t *testing.T, method, url, body string) exchange {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	// A connection of its own for each: llama-server closes one after a streamed answer without
	// saying so, and a reused one would fail the next case.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return exchange{resp.StatusCode, paths(t, b)}
	}
	keys := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		for k := range paths(t, []byte(data)) {
			keys[k] = true
		}
	}
	return exchange{resp.StatusCode, keys}
}

// The simulator's answers have the real llama-server's shape: the same status, and no member
// the real one lacks (a client written against the simulator reads only what is there).
func TestConformanceShapes(t *testing.T) {
	realBin, realModel := enginetest.LlamaServer(t), enginetest.TinyGGUF(t)
	args := []string{"-c", "1024", "-np", "1", "--metrics", "--alias", "tiny"}
	urls := map[string]string{
		"sim":  startRaw(t, simBin, append([]string{"-m", modelFile(t)}, args...)...),
		"real": startRaw(t, realBin, append([]string{"-m", realModel}, args...)...),
	}
	long := strings.Repeat("hello ", 1500)
	for _, c := range []struct{ name, method, path, body string }{
		{"health", "GET", "/health", ""},
		{"models", "GET", "/v1/models", ""},
		{"slots", "GET", "/slots", ""},
		{"props", "GET", "/props", ""},
		{"chat", "POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`},
		{"stream", "POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`},
		{"too long", "POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"` + long + `"}]}`},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"tiny"}`},
		{"unknown route", "GET", "/no/such/route", ""},
	} {
		sim, real := do(t, c.method, urls["sim"]+c.path, c.body), do(t, c.method, urls["real"]+c.path, c.body)
		assert.Equal(t, real.status, sim.status, "%s: status", c.name)
		var extra []string
		for k := range sim.keys {
			if !real.keys[k] {
				extra = append(extra, k)
			}
		}
		sort.Strings(extra)
		assert.Empty(t, extra, "%s: members the simulator has and the real llama-server does not", c.name)
	}
}
