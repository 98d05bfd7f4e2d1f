package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/gateway"
)

// onDemand is a gateway's on-demand placement held by the test: each request for a model no
// host runs is announced on asked, and waits until the test answers on done (nil: placed).
type onDemand struct {
	asked chan string
	done  chan error
}

func newOnDemand() *onDemand { return &onDemand{asked: make(chan string, 1), done: make(chan error)} }

func (o *onDemand) config(c *gateway.Config) {
	c.OnDemand = func(ctx context.Context, _ api.Principal, model string) error {
		o.asked <- model
		select {
		case err := <-o.done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// openStream posts a streaming request and returns its answer once its head arrived.
func openStream(t *testing.T, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readUntil reads the answer until it holds want, and returns what it read.
func readUntil(t *testing.T, r io.Reader, want string) string {
	t.Helper()
	var got []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(got), want) {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		require.NoError(t, err, "read %q, waiting for %q", got, want)
	}
	return string(got)
}

// TestOnDemandWaitKeepsTheStreamAlive: a streaming chat that waits for its model to be placed
// on demand is kept alive as a sleeping model's wake keeps it (": loading" comments; an
// Anthropic stream's message_start, then pings) before the placement is done, then answered —
// by a replica placed on the gateway's own agent, or on another, whose message_start the client
// does not get twice. A wait that fails after keep-alives ends the stream with an error event.
func TestOnDemandWaitKeepsTheStreamAlive(t *testing.T) {
	simA, simB := ollamaSim(t, nil, "llama3.2:1b"), ollamaSim(t, nil, "llama3.2:1b")
	od := newOnDemand()
	a, b := ollamaNode(t, "node-a", simA, nil), ollamaNode(t, "node-b", simB, od.config)
	join(t, a, b)

	t.Run("openai, placed on the gateway's agent", func(t *testing.T) {
		resp := openStream(t, b.url+"/v1/chat/completions", chatBody("near", "Hello?", true, ""), "Authorization", "Bearer "+adminToken)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "near", <-od.asked)
		head := readUntil(t, resp.Body, "\n\n")
		assert.Equal(t, ": loading\n\n", head, "a keep-alive before the model is placed")
		place(t, b, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "near"})
		od.done <- nil
		rest, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		data := sseData(rest)
		require.Greater(t, len(data), 2, "%s", rest)
		assert.Equal(t, "[DONE]", data[len(data)-1])
		assert.Equal(t, 1, simB.Stats().Generations)
	})

	t.Run("anthropic, placed on another agent", func(t *testing.T) {
		resp := openStream(t, b.url+"/v1/messages", anBody("far", true, ""), "X-Api-Key", adminToken, "Anthropic-Version", "2023-06-01")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "far", <-od.asked)
		head := readUntil(t, resp.Body, "event: ping\n")
		place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "far"})
		require.Eventually(t, func() bool { return len(b.m.Ready("", "far")) == 1 }, 10*time.Second, 5*time.Millisecond, "node-b sees it ready")
		od.done <- nil
		rest, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		events := anEvents(t, []byte(head+string(rest)))
		require.Greater(t, len(events), 3, "%s%s", head, rest)
		assert.Equal(t, "message_start", events[0].name)
		assert.Equal(t, "ping", events[1].name)
		assert.Equal(t, "message_stop", events[len(events)-1].name, "%s%s", head, rest)
		starts := 0
		for _, e := range events {
			if e.name == "message_start" {
				starts++
			}
		}
		assert.Equal(t, 1, starts, "one message_start: %s%s", head, rest)
		assert.Equal(t, 1, simA.Stats().Generations, "node-a answered")
	})

	t.Run("a wait that fails", func(t *testing.T) {
		resp := openStream(t, b.url+"/v1/chat/completions", chatBody("nowhere", "Hello?", true, ""), "Authorization", "Bearer "+adminToken)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		<-od.asked
		readUntil(t, resp.Body, ": loading\n\n")
		od.done <- api.Errorf(api.CodeEngineUnavailable, "model %q is still being placed", "nowhere")
		rest, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		data := sseData(rest)
		require.Len(t, data, 1, "%s", rest)
		assert.Contains(t, data[0], `model \"nowhere\" is still being placed`)
		assert.Contains(t, data[0], `"error"`)
	})

	t.Run("not streaming: no keep-alive, the answer once placed", func(t *testing.T) {
		done := send(t.Context(), b.url+"/api/chat", adminToken, `{"model":"later","messages":[{"role":"user","content":"Hi"}],"stream":false}`)
		assert.Equal(t, "later", <-od.asked)
		place(t, b, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "later"})
		od.done <- nil
		got := await(t, done, "the chat once placed")
		assert.Equal(t, http.StatusOK, got.status, got.body)
		assert.Contains(t, got.body, `"done":true`)
	})
}
