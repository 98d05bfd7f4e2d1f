package gateway_test

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/gateway"
	hailosim "github.com/llmkube/mesh/sim/hailo"
)

// rawRequest opens a connection and sends head (and part of a body), then leaves it as is.
func rawRequest(t *testing.T, addr, head string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = conn.Write([]byte(head))
	require.NoError(t, err)
	return conn
}

// TestStalledClientsDoNotStopOthers: on an engine that serves one request at a time, a client
// that stalls sending its body and one that never reads its answer do not keep others out;
// neither do malformed, unknown-model, oversized and upgrade requests in between.
func TestStalledClientsDoNotStopOthers(t *testing.T) {
	n, sim := hailoSetup(t, nil, func(c *gateway.Config) {
		c.MaxBody = 32 << 10
		c.StallTimeout = 300 * time.Millisecond
	})
	auth := "Authorization: Bearer " + adminToken + "\r\n"
	body := chatBody("qwen2:1.5b", "I will not read this.", true, "")

	// Stalls mid-body: says 1000 bytes, sends 10.
	rawRequest(t, n.addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"+auth+
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"+body[:10])
	// Sends a streaming chat and never reads the answer.
	for range 3 {
		rawRequest(t, n.addr, fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", auth, len(body), body))
	}

	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("qwen2:1.5b", fmt.Sprint("meanwhile ", i), false, ""))
			assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		}()
	}
	for _, c := range []struct {
		body   string
		hdr    []string
		status int
	}{
		{`{"model":`, nil, 400},
		{chatBody("nobody", "hi", true, ""), nil, 404},
		{chatBody("qwen2:1.5b", strings.Repeat("y", 40<<10), true, ""), nil, 413},
		{chatBody("qwen2:1.5b", "hi", true, ""), []string{"Connection", "Upgrade", "Upgrade", "websocket"}, 400},
	} {
		resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, c.body, c.hdr...)
		assert.Equal(t, c.status, resp.StatusCode, "%s", b)
	}
	wg.Wait()
	assert.GreaterOrEqual(t, sim.Stats().Requests["POST /api/chat"], 4)
}

// TestSlowAnswerOutlastsTheStallTimeout: the write deadline is pushed forward while a client
// reads, so an answer that takes several stall timeouts to come reaches a client that keeps
// reading, whole; only a client that stops reading is cut (above).
func TestSlowAnswerOutlastsTheStallTimeout(t *testing.T) {
	n, _ := hailoSetup(t, func(c *hailosim.Config) { c.TokensPerSecond = 4 }, func(c *gateway.Config) {
		c.StallTimeout = time.Second
	})
	// At least 8 tokens at 4 a second: two stall timeouts or more after the first write.
	resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken,
		chatBody("qwen2:1.5b", "Take your time.", true, `"max_tokens":10`))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	events := sseData(b)
	require.NotEmpty(t, events)
	assert.Equal(t, "[DONE]", events[len(events)-1], "the stream ends as it should: %s", b)
	assert.GreaterOrEqual(t, len(events), 8+2, "every piece, the last chunk and [DONE]: %s", b)
}
