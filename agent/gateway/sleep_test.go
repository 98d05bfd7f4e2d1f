package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

var admin = api.Principal{Admin: true}

// stateOf is a local placement's state now.
func stateOf(t testing.TB, n *node, id string) api.PlacementState {
	t.Helper()
	p, err := n.a.Get(admin, id)
	require.NoError(t, err)
	return p.State
}

// waitAsleep waits until a local placement sleeps.
func waitAsleep(t testing.TB, n *node, id string) {
	t.Helper()
	require.Eventually(t, func() bool { return stateOf(t, n, id) == api.StateSleeping }, 10*time.Second, 2*time.Millisecond, "placement sleeps")
}

// A placement idle for its TTL sleeps: the budget is freed here and in what the mesh gossips,
// and the engine let the model go. A streaming chat wakes it: ": loading" comments until the
// answer, which comes whole.
func TestSleepingModelWakesForAChat(t *testing.T) {
	sim := ollamaSim(t, func(c *ollamasim.Config) { c.LoadDelay = 50 * time.Millisecond }, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, nil)
	p := place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", TTL: "200ms"})
	require.Positive(t, n.a.Host().Memory.Committed)
	join(t, n)

	waitAsleep(t, n, p.ID)
	assert.Zero(t, n.a.Host().Memory.Committed, "a sleeping placement holds no budget")
	assert.Positive(t, sim.Stats().Unloads, "the engine let the model go before the budget was freed")
	require.Eventually(t, func() bool {
		m, ok := n.m.Member("node-a")
		return ok && m.Host != nil && m.Host.Memory.Committed == 0
	}, 10*time.Second, 5*time.Millisecond, "the mesh sees the budget freed")
	resp, b := call(t, "GET", n.url+"/v1/placements/"+p.ID, adminToken, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"state":"sleeping"`)
	// Listed, as Ollama lists a model it has, but not running.
	resp, b = call(t, "GET", n.url+"/v1/models", adminToken, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(b), `"id":"llama"`)
	resp, b = call(t, "GET", n.url+"/api/ps", adminToken, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"models":[]}`, string(b))

	resp, b = call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("llama", "Wake up.", true, ""))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.True(t, strings.HasPrefix(string(b), ": loading\n\n"), "keep-alive comments come first: %q", b)
	data := sseData(b)
	require.Greater(t, len(data), 2)
	assert.Equal(t, "[DONE]", data[len(data)-1])
	assert.Positive(t, n.a.Host().Memory.Committed, "the woken model is counted again")

	// Asleep again once idle; a plain chat, not streaming, waits for the load and is answered.
	waitAsleep(t, n, p.ID)
	resp, b = call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("llama", "Wake up.", false, ""))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"chat.completion"`)

	// An Anthropic stream is kept alive its own way: message_start, then ping events.
	waitAsleep(t, n, p.ID)
	resp, b = anCall(t, n.url, adminToken, anBody("llama", true, ""))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	events := anEvents(t, b)
	require.Greater(t, len(events), 3, "%s", b)
	assert.Equal(t, "message_start", events[0].name)
	assert.Equal(t, "ping", events[1].name, "%s", b)
	assert.Equal(t, "message_stop", events[len(events)-1].name)
	starts := 0
	for _, e := range events {
		if e.name == "message_start" {
			starts++
		}
	}
	assert.Equal(t, 1, starts)
}

// A chat at another agent is forwarded to the sleeping model's owner, which wakes it: the
// forwarder's view routes to a sleeping placement rather than answering "not found".
func TestChatThroughAnotherAgentWakesIt(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	a := ollamaNode(t, "node-a", sim, nil)
	b := newNode(t, nodeOpts{name: "node-b"})
	p := place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", TTL: "200ms"})
	join(t, a, b)
	waitAsleep(t, a, p.ID)
	require.Eventually(t, func() bool {
		for _, q := range b.m.View().Placements() {
			if q.ID == p.ID {
				return q.State == api.StateSleeping
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "node-b sees it sleeping")

	resp, body := call(t, "POST", b.url+"/api/chat", adminToken, `{"model":"llama","messages":[{"role":"user","content":"Across the mesh."}],"stream":false}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), `"done":true`)
	assert.Equal(t, 1.0, metricSum(t, b, "llmkube_gateway_requests_total", "forward"))
}

// Ollama's keep_alive sets a placement's TTL from then on: 0 unloads the model once the
// request is answered, negative keeps it loaded past the agent's --idle-ttl; a load request
// with keep_alive 0 is Ollama's "stop", and one without it wakes the model.
func TestKeepAlive(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b", "qwen2.5:0.5b")
	n := ollamaNode(t, "node-a", sim, nil, func(c *agent.Config) { c.IdleTTL = 300 * time.Millisecond })
	chat := func(model, keep string) {
		t.Helper()
		resp, b := call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"stream":false,"keep_alive":`+keep+`}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	}

	p := place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	chat("llama", "0")
	waitAsleep(t, n, p.ID)
	got, _ := n.a.Get(admin, p.ID)
	assert.Equal(t, "0s", got.TTL)

	// Woken by a load request; "-1" (a string, as Ollama's clients send it too) never sleeps.
	resp, b := call(t, "POST", n.url+"/api/generate", adminToken, `{"model":"llama","keep_alive":"-1"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"done_reason":"load"`)
	assert.Equal(t, api.StateReady, stateOf(t, n, p.ID))
	chat("llama", `"-1"`)
	// A placement made after it, on the agent's --idle-ttl, sleeps; the "-1" one does not.
	q := place(t, n, api.PlacementRequest{Source: "ollama://qwen2.5:0.5b", Name: "qwen"})
	waitAsleep(t, n, q.ID)
	assert.Equal(t, api.StateReady, stateOf(t, n, p.ID), "keep_alive -1 never sleeps")

	// keep_alive 0 with no prompt is "ollama stop": unloaded at once.
	resp, b = call(t, "POST", n.url+"/api/generate", adminToken, `{"model":"llama","keep_alive":0}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"done_reason":"unload"`)
	waitAsleep(t, n, p.ID)

	resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"llama","messages":[{"role":"user","content":"hi"}],"keep_alive":"soon"}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
}

// A sleeping model whose memory another took cannot wake: the client is told so at once, with
// the code and a Retry-After, in its dialect, and the model sleeps on.
func TestWakeRefusedForMemory(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	probe := ollamaNode(t, "probe", sim, nil)
	est, err := probe.a.Estimate(context.Background(), admin, api.PlacementRequest{Source: "ollama://llama3.2:1b"})
	require.NoError(t, err)
	require.Positive(t, est.Estimate.Bytes)
	n := ollamaNode(t, "node-a", sim, nil, func(c *agent.Config) { c.Budget = est.Estimate.Bytes * 3 / 2 })

	p := place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "first", TTL: "100ms"})
	waitAsleep(t, n, p.ID)
	place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "second"})

	resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("first", "hi", true, ""))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", b)
	assert.Equal(t, "30", resp.Header.Get("Retry-After"))
	code, _, msg := oaErr(t, b)
	assert.Equal(t, "model_not_ready", code)
	assert.Contains(t, msg, "first is sleeping and cannot wake on host node-a")
	resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"first","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), "InsufficientMemory")
	assert.Equal(t, api.StateSleeping, stateOf(t, n, p.ID))
}

// Not a timed test: it logs how long a slept model takes to its first token against its load
// time (the target: within the load time + 1 s).
func TestWakeFirstTokenVersusLoadTime(t *testing.T) {
	const load = 300 * time.Millisecond
	sim := ollamaSim(t, func(c *ollamasim.Config) { c.LoadDelay = load }, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, nil)
	p := place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", TTL: "100ms"})
	waitAsleep(t, n, p.ID)
	req, err := http.NewRequest("POST", n.url+"/v1/chat/completions", strings.NewReader(chatBody("llama", "hi", true, "")))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "data: ") {
		k, err := resp.Body.Read(buf)
		seen.Write(buf[:k])
		require.NoError(t, err)
	}
	t.Logf("slept model: first token after %s; the engine's load takes %s (target: within load + 1s)", time.Since(start).Round(time.Millisecond), load)
}

// A wake whose load fails (the daemon lost the model) answers the client at once, saying so, and
// the placement sleeps on rather than restarting in a loop.
func TestWakeThatFailsToLoad(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, nil)
	p := place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", TTL: "100ms"})
	waitAsleep(t, n, p.ID)
	resp, b := call(t, "DELETE", sim.URL()+"/api/delete", "", `{"model":"llama3.2:1b"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)

	resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"llama","messages":[{"role":"user","content":"hi"}],"stream":false}`)
	assert.NotEqual(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(b), "the model failed to load again")
	got, err := n.a.Get(admin, p.ID)
	require.NoError(t, err)
	assert.Equal(t, api.StateSleeping, got.State)
	assert.Contains(t, got.Reason, "waking failed")
}
