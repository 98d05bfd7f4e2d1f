package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/gateway"
	"github.com/llmkube/mesh/sim/cable"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// pull cuts the cable in front of n's API and stops n's gossip without a leave: to the mesh, n
// fell silent, as a host whose cable is pulled does.
func pull(t *testing.T, n *node, c *cable.Cable) {
	t.Helper()
	c.Pull()
	require.NoError(t, n.m.Shutdown())
}

// behindCable puts a cable in front of n's API: the mesh reaches n through it.
func behindCable(t *testing.T, n *node) *cable.Cable {
	c, err := cable.New(n.addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	n.advertise = c.Addr()
	return c
}

type answer struct {
	status int
	body   string
	err    error
}

// send posts a chat in the background and delivers the whole answer on the channel.
func send(ctx context.Context, url, token, body string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		if err != nil {
			ch <- answer{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- answer{status: resp.StatusCode, body: string(b), err: err}
	}()
	return ch
}

// await waits for an answer; a request left hanging on a silent owner fails the test at the
// deadline instead of holding it for good.
func await(t *testing.T, ch <-chan answer, what string) answer {
	t.Helper()
	select {
	case a := <-ch:
		require.NoError(t, a.err, what)
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still hanging on a silent owner after 30 s", what)
		return answer{}
	}
}

// inFlight waits until the engine has the request.
func inFlight(t *testing.T, sim *ollamasim.Server, route string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return sim.Stats().Requests[route] >= n }, 10*time.Second, time.Millisecond, "the owner's engine has the request")
}

// TestOwnerLostMidStream: a host drops off the network while it streams an answer forwarded
// through another agent. The stream ends with an error event in its own form (SSE for OpenAI,
// an NDJSON line for Ollama) once the mesh finds the owner suspect past the grace or dead,
// instead of hanging on the silent socket.
func TestOwnerLostMidStream(t *testing.T) {
	for _, tc := range []struct {
		name, route, body string
	}{
		{"openai", "/v1/chat/completions", chatBody("llama", "a long story", true, "")},
		{"ollama", "/api/chat", `{"model":"llama","messages":[{"role":"user","content":"a long story"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := ollamaSim(t, func(c *ollamasim.Config) { c.TokensPerSec = 2 }, "llama3.2:1b")
			a := ollamaNode(t, "node-a", sim, nil)
			b := newNode(t, nodeOpts{name: "node-b"})
			place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
			cab := behindCable(t, a)
			join(t, a, b)

			req, err := http.NewRequestWithContext(t.Context(), "POST", b.url+tc.route, strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)
			sc := bufio.NewScanner(resp.Body)
			require.True(t, sc.Scan(), "a first line")

			pull(t, a, cab)
			rest := make(chan []string, 1)
			go func() {
				var lines []string
				for sc.Scan() {
					if l := strings.TrimSpace(sc.Text()); l != "" {
						lines = append(lines, l)
					}
				}
				rest <- lines
			}()
			var lines []string
			select {
			case lines = <-rest:
			case <-time.After(30 * time.Second):
				t.Fatal("the stream still hangs on a silent owner after 30 s")
			}
			require.NotEmpty(t, lines)
			last := lines[len(lines)-1]
			if tc.name == "openai" {
				data, ok := strings.CutPrefix(last, "data: ")
				require.True(t, ok, "an SSE event last: %q", last)
				code, typ, msg := oaErr(t, []byte(data))
				assert.Equal(t, string(api.CodeUnreachable), code)
				assert.Equal(t, "server_error", typ)
				assert.Contains(t, msg, "node-a")
				assert.Regexp(t, `is dead|has been suspect`, msg)
			} else {
				var e struct {
					Error string `json:"error"`
				}
				require.NoError(t, json.Unmarshal([]byte(last), &e), "an NDJSON line last: %q", last)
				assert.Contains(t, e.Error, "node-a")
				assert.Regexp(t, `is dead|has been suspect`, e.Error)
			}
			assert.Equal(t, 1.0, metricSum(t, b, "llmkube_gateway_errors_total", string(api.CodeUnreachable)))
		})
	}
}

// TestOwnerLostBeforeAnswering: a host drops off the network while it works on a non-streamed
// answer (nothing has come back yet). With no other replica the client gets a clear 502 naming
// the host; with one, the request goes there and succeeds — streamed or not.
func TestOwnerLostBeforeAnswering(t *testing.T) {
	slow := func(c *ollamasim.Config) { c.TTFT = time.Hour } // the answer never begins by itself

	t.Run("alone", func(t *testing.T) {
		sim := ollamaSim(t, slow, "llama3.2:1b")
		a := ollamaNode(t, "node-a", sim, nil)
		b := newNode(t, nodeOpts{name: "node-b"})
		place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
		cab := behindCable(t, a)
		join(t, a, b)

		oa := send(t.Context(), b.url+"/v1/chat/completions", adminToken, chatBody("llama", "hello", false, ""))
		inFlight(t, sim, "POST /api/chat", 1)
		ol := send(t.Context(), b.url+"/api/chat", adminToken, `{"model":"llama","messages":[{"role":"user","content":"hello"}],"stream":false}`)
		inFlight(t, sim, "POST /api/chat", 2)
		pull(t, a, cab)

		got := await(t, oa, "OpenAI chat")
		assert.Equal(t, http.StatusBadGateway, got.status, got.body)
		code, _, msg := oaErr(t, []byte(got.body))
		assert.Equal(t, string(api.CodeUnreachable), code)
		assert.Contains(t, msg, "node-a")
		got = await(t, ol, "Ollama chat")
		assert.Equal(t, http.StatusBadGateway, got.status, got.body)
		assert.Contains(t, got.body, "node-a")
	})

	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail over, stream %v", stream), func(t *testing.T) {
			simA, simC := ollamaSim(t, slow, "llama3.2:1b"), ollamaSim(t, nil, "llama3.2:1b")
			a := ollamaNode(t, "node-a", simA, nil)
			c := ollamaNode(t, "node-c", simC, nil)
			b := newNode(t, nodeOpts{name: "node-b"})
			place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
			place(t, c, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
			cab := behindCable(t, a)
			join(t, a, b, c)

			// Equal replicas are tried in the view's order: node-a first, whose answer never begins.
			ch := send(t.Context(), b.url+"/v1/chat/completions", adminToken, chatBody("llama", "hello", stream, ""))
			inFlight(t, simA, "POST /api/chat", 1)
			pull(t, a, cab)

			got := await(t, ch, "chat")
			require.Equal(t, http.StatusOK, got.status, got.body)
			if stream {
				data := sseData([]byte(got.body))
				require.NotEmpty(t, data)
				assert.Equal(t, "[DONE]", data[len(data)-1])
			} else {
				assert.Contains(t, got.body, `"finish_reason":"stop"`)
			}
			assert.Equal(t, 1, simC.Stats().Generations, "node-c answered")
		})
	}
}

// TestResponseHeaderTimeout: an owner alive in the mesh whose answer does not begin within the
// response-header timeout gets a 504 that names it, rather than holding the client for good.
func TestResponseHeaderTimeout(t *testing.T) {
	sim := ollamaSim(t, func(c *ollamasim.Config) { c.TTFT = time.Hour }, "llama3.2:1b")
	a := ollamaNode(t, "node-a", sim, nil)
	b := newNode(t, nodeOpts{name: "node-b", gateway: func(c *gateway.Config) { c.ResponseHeaderTimeout = 300 * time.Millisecond }})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	join(t, a, b)

	got := await(t, send(t.Context(), b.url+"/v1/chat/completions", adminToken, chatBody("llama", "hello", false, "")), "chat")
	assert.Equal(t, http.StatusGatewayTimeout, got.status, got.body)
	_, _, msg := oaErr(t, []byte(got.body))
	assert.Contains(t, msg, "node-a")
	assert.Contains(t, msg, "did not begin its answer within 300ms")
	require.Eventually(t, func() bool { return sim.Stats().Cancelled == 1 }, 5*time.Second, time.Millisecond, "the owner's engine request was cancelled")
}
