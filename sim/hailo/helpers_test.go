package hailo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a Clock tests control: sleeps are recorded and advance the clock at once, unless
// a gate is set, in which case a sleep of more than zero waits for the gate to close.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	slept   []time.Duration
	gate    chan struct{}
	entered chan time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2025, 11, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.slept = append(c.slept, d)
	gate, entered := c.gate, c.entered
	c.mu.Unlock()
	if d > 0 && gate != nil {
		if entered != nil {
			entered <- d
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.Advance(d)
	return ctx.Err()
}

func (c *fakeClock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

func (c *fakeClock) ResetSlept() {
	c.mu.Lock()
	c.slept = nil
	c.mu.Unlock()
}

// start runs a simulator with FastConfig in a temp dir, adjusted by mutate.
func start(t *testing.T, mutate func(*Config)) *Server {
	t.Helper()
	cfg := FastConfig(t.TempDir())
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, s.Close())
	})
	return s
}

func preload(models ...string) func(*Config) {
	return func(c *Config) { c.Preloaded = models }
}

var client = &http.Client{Timeout: 30 * time.Second}

// do sends a request and returns the response with its whole body.
func do(t *testing.T, method, url, contentType, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func postJSON(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodPost, url, "application/json", body)
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "body: %s", b)
	return m
}

// ndjsonLines splits a stream into its objects, checking hailo-ollama's "\r\n" terminators.
func ndjsonLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	require.True(t, bytes.HasSuffix(b, []byte("\r\n")), "stream must end with CRLF: %q", b)
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		out = append(out, decodeJSON(t, sc.Bytes()))
	}
	require.NoError(t, sc.Err())
	return out
}
