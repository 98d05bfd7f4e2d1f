package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/gateway"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/sim/cable"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// TestForwardAcrossTheMesh: a client of node-b reaches a model only node-a serves; the owner
// checks the caller's token again; a forwarded request is never forwarded twice.
func TestForwardAcrossTheMesh(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	a := ollamaNode(t, "node-a", sim, nil)
	b := newNode(t, nodeOpts{name: "node-b"})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", Namespace: "team-a"})
	join(t, a, b)
	teamA, teamB := nsToken(t, "team-a"), nsToken(t, "team-b")
	ctx := t.Context()

	direct := openAIClient(a, teamA)
	want, err := direct.Chat.Completions.New(ctx, userChat("llama", "Across the mesh."))
	require.NoError(t, err)

	viaB := openAIClient(b, teamA)
	got, err := viaB.Chat.Completions.New(ctx, userChat("llama", "Across the mesh."))
	require.NoError(t, err)
	assert.Equal(t, want.Choices[0].Message.Content, got.Choices[0].Message.Content)
	assert.Equal(t, want.Usage, got.Usage)

	params := userChat("llama", "Across the mesh.")
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := viaB.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	require.NoError(t, stream.Err())
	assert.Greater(t, chunks, 2)
	assert.Equal(t, want.Choices[0].Message.Content, acc.Choices[0].Message.Content)

	// Ollama clients too.
	resp, body := call(t, "POST", b.url+"/api/chat", teamA, `{"model":"llama","messages":[{"role":"user","content":"Across the mesh."}]}`)
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	lines := ndjson(t, body)
	assert.Equal(t, true, lines[len(lines)-1]["done"])
	for k := range resp.Header {
		assert.False(t, strings.HasPrefix(k, "X-Llmkube-"), "internal header %s reached the client", k)
	}

	// Listings are mesh-wide.
	page, err := viaB.Models.List(ctx)
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, "llama", page.Data[0].ID)
	assert.Equal(t, "node-a", page.Data[0].OwnedBy)
	resp, body = call(t, "GET", b.url+"/api/tags", teamA, "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(body), `"name":"llama"`)

	// Another namespace's token learns nothing, at the forwarder or at the owner.
	resp, body = call(t, "POST", b.url+"/v1/chat/completions", teamB, chatBody("llama", "hi", false, ""))
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", body)
	resp, body = call(t, "POST", a.url+"/v1/chat/completions", teamB, chatBody("llama", "hi", false, ""), hop.Header, "1")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the owner checks the token again: %s", body)
	resp, body = call(t, "POST", a.url+"/v1/chat/completions", teamA, chatBody("llama", "hi", false, ""), hop.Header, "1")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	// A request that already made its hop is served locally or not at all.
	forwards := func() float64 { return metricSum(t, b, "llmkube_gateway_requests_total", "forward") }
	require.Eventually(t, func() bool { return forwards() == 3 }, 5*time.Second, time.Millisecond, "node-b forwarded three chats")
	resp, body = call(t, "POST", b.url+"/v1/chat/completions", teamA, chatBody("llama", "hi", false, ""), hop.Header, "1")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", body)
	assert.Equal(t, 3.0, forwards())
	assert.Equal(t, 2.0, metricSum(t, b, "llmkube_gateway_errors_total", "NotFound"), "node-b refused the other namespace and the hop, nothing else")
	assert.Positive(t, metricSum(t, b, "llmkube_gateway_ttft_seconds", "forward"))

	// node-a measured what it served, and the mesh carries the figure.
	require.Eventually(t, func() bool {
		for _, p := range b.m.View().Placements() {
			if p.Model == "llama" && p.TTFTMillis > 0 {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "node-b sees node-a's measured speed")
}

// startStream starts a streaming chat and returns once its first line arrived; the rest is
// read in the background until the returned channel closes.
func startStream(t *testing.T, ctx context.Context, url, token, body string) (done <-chan struct{}) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan(), "a first line")
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		for sc.Scan() {
		}
	}()
	return ch
}

// TestClientDisconnectCancelsTheEngine: a client that leaves mid-answer stops generation at
// once, on a local placement and through a forward.
func TestClientDisconnectCancelsTheEngine(t *testing.T) {
	sim := ollamaSim(t, func(c *ollamasim.Config) { c.TokensPerSec = 10 }, "llama3.2:1b")
	a := ollamaNode(t, "node-a", sim, nil)
	b := newNode(t, nodeOpts{name: "node-b"})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	join(t, a, b)

	for i, n := range []*node{a, b} {
		ctx, cancel := context.WithCancel(t.Context())
		done := startStream(t, ctx, n.url+"/v1/chat/completions", adminToken, chatBody("llama", "a long story", true, ""))
		cancel()
		<-done
		require.Eventually(t, func() bool { return sim.Stats().Cancelled == i+1 }, 3*time.Second, time.Millisecond,
			"the engine stopped generating (via %s)", n.name)
	}
	assert.Zero(t, sim.Stats().Generations, "no answer ran to its end")
	assert.Positive(t, metricSum(t, a, "llmkube_gateway_errors_total", "client_gone"))
}

// TestLeastBusyReplica: with a request in flight on one replica, the next goes to the other.
func TestLeastBusyReplica(t *testing.T) {
	pace := func(c *ollamasim.Config) { c.TokensPerSec = 10 }
	simA, simC := ollamaSim(t, pace, "llama3.2:1b"), ollamaSim(t, pace, "llama3.2:1b")
	a, c := ollamaNode(t, "node-a", simA, nil), ollamaNode(t, "node-c", simC, nil)
	b := newNode(t, nodeOpts{name: "node-b"})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	place(t, c, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	join(t, a, b, c)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first := startStream(t, ctx, b.url+"/v1/chat/completions", adminToken, chatBody("llama", "one", true, ""))
	second := startStream(t, ctx, b.url+"/v1/chat/completions", adminToken, chatBody("llama", "two", true, ""))
	chats := func(s *ollamasim.Server) int { return s.Stats().Requests["POST /api/chat"] }
	assert.Equal(t, 1, chats(simA), "one stream each")
	assert.Equal(t, 1, chats(simC), "one stream each")
	cancel()
	<-first
	<-second
}

// TestFailoverBeforeTheFirstByte: a replica whose engine is down (but not yet found so by its
// health check) fails before answering, and the request goes to the next replica.
func TestFailoverBeforeTheFirstByte(t *testing.T) {
	slowHealth := func(c *agent.Config) { c.HealthInterval = time.Minute }
	simA, simC := ollamaSim(t, nil, "llama3.2:1b"), ollamaSim(t, nil, "llama3.2:1b")
	a := ollamaNode(t, "node-a", simA, nil, slowHealth)
	c := ollamaNode(t, "node-c", simC, nil, slowHealth)
	b := newNode(t, nodeOpts{name: "node-b"})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	place(t, c, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	join(t, a, b, c)
	require.NoError(t, simA.Close()) // node-a's engine dies; its placement still shows ready

	// Equal replicas are tried in the view's order: node-a first, which fails, then node-c.
	resp, body := call(t, "POST", b.url+"/v1/chat/completions", adminToken, chatBody("llama", "still there?", true, ""))
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	data := sseData(body)
	require.NotEmpty(t, data)
	assert.Equal(t, "[DONE]", data[len(data)-1])
	assert.Equal(t, 1.0, metricSum(t, a, "llmkube_gateway_errors_total", "EngineUnavailable"), "node-a was tried and failed")
	assert.Equal(t, 1, simC.Stats().Generations, "node-c answered")

	// The same through Ollama's dialect, not streaming.
	resp, body = call(t, "POST", b.url+"/api/chat", adminToken, `{"model":"llama","messages":[{"role":"user","content":"still there?"}],"stream":false}`)
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	assert.Equal(t, true, m["done"])
}

// TestLocalReplicaFailsOverToARemoteOne: an idle local replica is chosen first; when its
// engine fails before answering, the request goes to a remote replica.
func TestLocalReplicaFailsOverToARemoteOne(t *testing.T) {
	slowHealth := func(c *agent.Config) { c.HealthInterval = time.Minute }
	simA, simC := ollamaSim(t, nil, "llama3.2:1b"), ollamaSim(t, nil, "llama3.2:1b")
	var logged syncBuffer
	a := ollamaNode(t, "node-a", simA, func(c *gateway.Config) {
		c.Log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}, slowHealth)
	c := ollamaNode(t, "node-c", simC, nil, slowHealth)
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	place(t, c, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	join(t, a, c)
	require.NoError(t, simA.Close()) // node-a's engine dies; its placement still shows ready

	for _, route := range []string{"/v1/chat/completions", "/api/chat"} {
		resp, body := call(t, "POST", a.url+route, adminToken, chatBody("llama", "still there?", false, ""))
		require.Equal(t, 200, resp.StatusCode, "%s: %s", route, body)
	}
	assert.Equal(t, 2, strings.Count(logged.String(), "replica failed before answering; trying the next"),
		"node-a's own replica was tried first each time, and failed:\n%s", logged.String())
	assert.Equal(t, 2, simC.Stats().Generations, "node-c answered both")
}

// syncBuffer is a buffer a logger may write from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestForwarderLeavesTheRequestToItsOwner: a gateway that forwards a chat reads its model
// alone, and the owner, which parses it whole, refuses a malformed one with the same 400 as to
// a client of its own. A malformed request for a model served nowhere is still 400, not 404,
// and one the forwarder cannot read a model from is refused by the forwarder.
func TestForwarderLeavesTheRequestToItsOwner(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	a := ollamaNode(t, "node-a", sim, nil)
	b := newNode(t, nodeOpts{name: "node-b"})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	join(t, a, b)
	refusedBy := func(n *node) float64 { return metricSum(t, n, "llmkube_gateway_errors_total", "BadRequest") }

	for i, body := range []string{
		`{"model":"llama","messages":[]}`,
		`{"model":"llama","messages":"hi"}`,
		`{"model":"llama","messages":[{"role":"robot","content":"hi"}]}`,
		`{"model":"llama","messages":[{"role":"user","content":"hi"}],"temperature":7}`,
	} {
		want, wantBody := call(t, "POST", a.url+"/v1/chat/completions", adminToken, body)
		require.Equal(t, http.StatusBadRequest, want.StatusCode, "%s", wantBody)
		got, gotBody := call(t, "POST", b.url+"/v1/chat/completions", adminToken, body)
		assert.Equal(t, http.StatusBadRequest, got.StatusCode, "%s", gotBody)
		assert.JSONEq(t, string(wantBody), string(gotBody), "%s", body)
		assert.Equal(t, float64(2*(i+1)), refusedBy(a), "node-a refused it, to its own client and through node-b")
		assert.Equal(t, float64(i+1), metricSum(t, b, "llmkube_gateway_errors_total", "Forwarded"))
	}
	assert.Zero(t, refusedBy(b))

	// Refused by the forwarder: nothing to route by, or no replica to forward to.
	for _, body := range []string{`{"model":`, `{"messages":[]}`, `{"model":"nobody","messages":[]}`, `{"model":5}`} {
		resp, b2 := call(t, "POST", b.url+"/v1/chat/completions", adminToken, body)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", body, b2)
	}
	assert.Equal(t, 4.0, refusedBy(b))

	// The model both read is encoding/json's: the last of duplicate members, a key of any case.
	resp, body := call(t, "POST", b.url+"/v1/chat/completions", adminToken,
		`{"model":"nobody","MODEL":"llama","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	// An Ollama load request (no messages) is answered by the owner's ready placement.
	resp, body = call(t, "POST", b.url+"/api/chat", adminToken, `{"model":"llama"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), `"done_reason":"load"`)
	assert.Equal(t, 1, sim.Stats().Requests["POST /api/chat"], "one chat reached the engine: the one with a message")
}

// TestBusyLocalReplicaTakesALaterRemoteOne: while node-a's replica is busy and no other agent
// serves the model, node-a serves its chats itself; once node-c's replica is ready, a chat
// that node-a's busy replica would take goes to node-c.
func TestBusyLocalReplicaTakesALaterRemoteOne(t *testing.T) {
	slow := func(c *ollamasim.Config) { c.TokensPerSec = 1 } // 8 tokens or more: seconds busy
	simA, simC := ollamaSim(t, slow, "llama3.2:1b"), ollamaSim(t, slow, "llama3.2:1b")
	a, c := ollamaNode(t, "node-a", simA, nil), ollamaNode(t, "node-c", simC, nil)
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	join(t, a, c)
	chats := func(s *ollamasim.Server) int { return s.Stats().Requests["POST /api/chat"] }

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	busy := startStream(t, ctx, a.url+"/v1/chat/completions", adminToken, chatBody("llama", "keep busy", true, ""))
	second := startStream(t, ctx, a.url+"/v1/chat/completions", adminToken, chatBody("llama", "a second one", true, ""))
	assert.Equal(t, 2, chats(simA), "no replica elsewhere: both on node-a")
	assert.Equal(t, 0, chats(simC))

	place(t, c, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	require.Eventually(t, func() bool { return len(a.view().Ready("", "llama")) == 2 }, 20*time.Second, 10*time.Millisecond,
		"node-a's view shows node-c's replica ready")
	require.Eventually(t, func() bool {
		try, stop := context.WithCancel(ctx)
		defer stop()
		done := startStream(t, try, a.url+"/v1/chat/completions", adminToken, chatBody("llama", "and another", true, ""))
		stop()
		<-done
		return chats(simC) > 0
	}, 20*time.Second, 20*time.Millisecond, "a chat went to node-c's replica while node-a's was busy")
	cancel()
	<-busy
	<-second
}

// TestFailoverFromARefusedOwner: an owner whose API refuses connections (its host just killed,
// the mesh not yet aware) fails before the first byte, so a chat through a third agent goes to
// the other replica, streaming or not, in every dialect's failover alike.
func TestFailoverFromARefusedOwner(t *testing.T) {
	simA, simC := ollamaSim(t, nil, "llama3.2:1b"), ollamaSim(t, nil, "llama3.2:1b")
	// node-a is reached through a cable in front of its API: closed, it refuses every dial, as
	// a killed host's port does until the mesh finds the host dead.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cab, err := cable.New(ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { cab.Close() })
	oa := ollamaOpts(t, "node-a", simA)
	oa.listener = ln
	oa.agent = func(c *agent.Config) { c.APIAddr = cab.Addr() }
	a := newNode(t, oa)
	a.advertise = cab.Addr()
	c := ollamaNode(t, "node-c", simC, nil)
	var logged syncBuffer
	b := newNode(t, nodeOpts{name: "node-b", gateway: func(c *gateway.Config) {
		c.Log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	place(t, c, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	join(t, a, b, c)
	require.NoError(t, cab.Close())
	require.Len(t, b.m.Ready("", "llama"), 2, "node-b routes to both replicas")

	for i, route := range []string{"/v1/chat/completions", "/api/chat"} {
		resp, body := call(t, "POST", b.url+route, adminToken, chatBody("llama", "still there?", true, ""))
		require.Equal(t, 200, resp.StatusCode, "%s: %s", route, body)
		assert.Equal(t, i+1, simC.Stats().Generations, "node-c answered")
	}
	assert.Zero(t, simA.Stats().Generations, "node-a was never reached")
	// Equal replicas are tried in the view's order: node-a first, refused each time.
	assert.Equal(t, 2, strings.Count(logged.String(), "connection refused"), "node-a was tried first each time, and refused:\n%s", logged.String())
}
