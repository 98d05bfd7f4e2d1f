package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hopServer is a real HTTP server on loopback that streams an answer in two flushed pieces,
// counting the connections it accepted and closed. Its handler waits on hold, when set.
type hopServer struct {
	srv            *http.Server
	url            string
	opened, closed atomic.Int64
	hold           chan struct{}
	closeAnswer    bool // answer with Connection: close
}

func newHopServer(t testing.TB) *hopServer {
	t.Helper()
	s := &hopServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if s.hold != nil {
				<-s.hold
			}
			if s.closeAnswer {
				w.Header().Set("Connection", "close")
			}
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: one\n\n")
			w.(http.Flusher).Flush()
			io.WriteString(w, "data: [DONE]\n\n")
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.opened.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.closed.Add(1)
			}
		},
	}
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func hopRequest(t testing.TB, ctx context.Context, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	return req
}

// hopCall sends one request and reads its answer to the end.
func hopCall(t testing.TB, h *hopClient, url string) string {
	t.Helper()
	resp, err := h.do(context.Background(), hopRequest(t, context.Background(), url))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func (h *hopClient) idleCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, cs := range h.idle {
		n += len(cs)
	}
	return n
}

// TestHopClientKeepsConnections: answers read to their end leave their connection for the next
// request; one left unread, or that the owner says it closes, is closed.
func TestHopClientKeepsConnections(t *testing.T) {
	s := newHopServer(t)
	h := newHopClient()
	for range 5 {
		assert.Equal(t, "data: one\n\ndata: [DONE]\n\n", hopCall(t, h, s.url))
	}
	assert.EqualValues(t, 1, s.opened.Load(), "one connection for five requests")
	assert.Equal(t, 1, h.idleCount())

	resp, err := h.do(context.Background(), hopRequest(t, context.Background(), s.url))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close()) // not read: the rest of the answer is on the connection
	assert.Zero(t, h.idleCount())
	require.Eventually(t, func() bool { return s.closed.Load() == 1 }, 5*time.Second, time.Millisecond)
	hopCall(t, h, s.url)
	assert.EqualValues(t, 2, s.opened.Load())

	s.closeAnswer = true
	hopCall(t, h, s.url)
	assert.Zero(t, h.idleCount(), "the owner said it closes the connection")
}

// TestHopClientDropsClosedConnections: a kept connection the owner closed meanwhile (here its
// server's idle connections, as at a restart) is not sent a request: a new one is dialed.
func TestHopClientDropsClosedConnections(t *testing.T) {
	s := newHopServer(t)
	h := newHopClient()
	hopCall(t, h, s.url)
	s.srv.SetKeepAlivesEnabled(false) // closes the idle connection
	require.Eventually(t, func() bool { return s.closed.Load() == 1 }, 5*time.Second, time.Millisecond)
	s.srv.SetKeepAlivesEnabled(true)
	assert.Equal(t, "data: one\n\ndata: [DONE]\n\n", hopCall(t, h, s.url))
	assert.EqualValues(t, 2, s.opened.Load())
}

// TestHopClientContextEndsTheWait: the request's context ending while the owner has not
// answered ends the wait at once, and the connection is not kept.
func TestHopClientContextEndsTheWait(t *testing.T) {
	s := newHopServer(t)
	s.hold = make(chan struct{})
	t.Cleanup(func() { close(s.hold) })
	h := newHopClient()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.do(ctx, hopRequest(t, ctx, s.url))
		errc <- err
	}()
	require.Eventually(t, func() bool { return s.opened.Load() == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.Error(t, <-errc)
	assert.Zero(t, h.idleCount())
}

// TestHopClientExpiresIdleConnections: a connection idle for idleFor is closed, and the sweep
// stops once none is left.
func TestHopClientExpiresIdleConnections(t *testing.T) {
	s := newHopServer(t)
	h := newHopClient()
	h.idleFor = 50 * time.Millisecond
	hopCall(t, h, s.url)
	require.Eventually(t, func() bool { return s.closed.Load() == 1 }, 5*time.Second, time.Millisecond)
	assert.Zero(t, h.idleCount())
	h.mu.Lock()
	assert.Nil(t, h.sweep)
	h.mu.Unlock()
}

// TestHopClientConcurrentRequests: concurrent requests each get a connection of their own and
// give it back; the race detector watches the pool.
func TestHopClientConcurrentRequests(t *testing.T) {
	s := newHopServer(t)
	h := newHopClient()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				assert.Equal(t, "data: one\n\ndata: [DONE]\n\n", hopCall(t, h, s.url))
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, s.opened.Load(), int64(16))
	assert.EqualValues(t, s.opened.Load(), h.idleCount())
}

// BenchmarkHopRoundTrip is one forwarded request's round trip to a streaming server on
// loopback, to its first piece (µs-…-first-p50) and then to its end, through net/http's
// Transport (as the gateway forwarded before hopClient) and through hopClient, alternating
// request by request so that a noisy neighbour hits both alike; allocations per round trip of
// each (the server's included, the same for both) are counted after. It asserts no time.
//
//	go test -run '^$' -bench '^BenchmarkHopRoundTrip$' -count 4 ./agent/gateway/
func BenchmarkHopRoundTrip(b *testing.B) {
	s := newHopServer(b)
	tr := &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true, WriteBufferSize: hopBuffer, ReadBufferSize: hopBuffer}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	h := newHopClient()
	hop := func(r *http.Request) (*http.Response, error) { return h.do(r.Context(), r) }
	buf := make([]byte, hopBuffer)
	round := func(do func(*http.Request) (*http.Response, error)) time.Duration {
		start := time.Now()
		resp, err := do(hopRequest(b, context.Background(), s.url))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := resp.Body.Read(buf)
		first := time.Since(start)
		if !bytes.HasPrefix(buf[:n], []byte("data: one")) {
			b.Fatalf("first read %q (%v)", buf[:n], err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		return first
	}
	var viaTransport, viaHop []time.Duration
	for b.Loop() {
		viaTransport = append(viaTransport, round(hc.Do))
		viaHop = append(viaHop, round(hop))
	}
	b.ReportMetric(micros(median(viaTransport)), "µs-transport-first-p50")
	b.ReportMetric(micros(median(viaHop)), "µs-hop-first-p50")
	b.ReportMetric(testing.AllocsPerRun(100, func() { round(hc.Do) }), "transport-allocs/op")
	b.ReportMetric(testing.AllocsPerRun(100, func() { round(hop) }), "hop-allocs/op")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// TestHopClientBoundsTheHead: an owner that sends headers without end is cut at hopMaxHead,
// instead of growing the forwarder's memory with them.
func TestHopClientBoundsTheHead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	sent := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			sent <- 0
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		c.Read(buf) // the request
		line := []byte("X-Filler: " + strings.Repeat("a", 1000) + "\r\n")
		n, _ := c.Write([]byte("HTTP/1.1 200 OK\r\n"))
		total := int64(n)
		for {
			n, err := c.Write(line)
			total += int64(n)
			if err != nil {
				sent <- total
				return
			}
		}
	}()
	h := newHopClient()
	_, err = h.do(context.Background(), hopRequest(t, context.Background(), "http://"+ln.Addr().String()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the answer's head is larger than")
	assert.Zero(t, h.idleCount())
	assert.Less(t, <-sent, int64(hopMaxHead)+16<<20, "the owner's writes stopped once the forwarder closed the connection")
}

// TestWriteRequest checks the hop client's request writer against Request.Write: each request
// written both ways reads back (http.ReadRequest, as the owner's server reads it) the same, but
// for the User-Agent Request.Write adds where there is none; a header no parsed request can
// carry is refused.
func TestWriteRequest(t *testing.T) {
	withHeaders := func(method, body string, kv ...string) *http.Request {
		var r io.Reader
		if body != "" {
			r = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, "http://127.0.0.1:7777/v1/chat/completions?x=1&y=%20", r)
		require.NoError(t, err)
		for i := 0; i+1 < len(kv); i += 2 {
			req.Header.Add(kv[i], kv[i+1])
		}
		return req
	}
	reqs := map[string]func() *http.Request{
		"chat, an SDK's headers": func() *http.Request {
			return withHeaders("POST", `{"model":"m","messages":[]}`, "Authorization", "Bearer t", "Content-Type", "application/json",
				"User-Agent", "OpenAI/Python 1.50.0", "X-Stainless-Lang", "python", "Accept", "text/event-stream", "Accept", "application/json",
				"X-Forwarded-For", "10.0.0.9, 127.0.0.1", HopHeader, "1")
		},
		"no user agent":   func() *http.Request { return withHeaders("POST", `{}`, "Content-Type", "application/json") },
		"empty POST":      func() *http.Request { return withHeaders("POST", "") },
		"GET, no body":    func() *http.Request { return withHeaders("GET", "", "Accept", "*/*") },
		"a Host header":   func() *http.Request { return withHeaders("POST", `{}`, "Host", "elsewhere.example") },
		"unicode, quotes": func() *http.Request { return withHeaders("POST", "{\"a\":\"ü\"}", "X-Note", `say "hi" — ok`) },
	}
	read := func(t *testing.T, write func(*bufio.Writer) error) (*http.Request, string) {
		t.Helper()
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		require.NoError(t, write(bw))
		require.NoError(t, bw.Flush())
		got, err := http.ReadRequest(bufio.NewReader(&buf))
		require.NoError(t, err, "%q", buf.String())
		body, err := io.ReadAll(got.Body)
		require.NoError(t, err)
		return got, string(body)
	}
	for name, mk := range reqs {
		t.Run(name, func(t *testing.T) {
			want, wantBody := read(t, func(bw *bufio.Writer) error { return mk().Write(bw) })
			got, gotBody := read(t, func(bw *bufio.Writer) error { return writeRequest(bw, mk()) })
			assert.Equal(t, want.Method, got.Method)
			assert.Equal(t, want.RequestURI, got.RequestURI)
			assert.Equal(t, want.Host, got.Host)
			assert.Equal(t, want.ContentLength, got.ContentLength)
			assert.Equal(t, wantBody, gotBody)
			if mk().Header.Get("User-Agent") == "" {
				want.Header.Del("User-Agent") // Request.Write's own
			}
			assert.Equal(t, want.Header, got.Header)
		})
	}
	for _, kv := range [][2]string{{"X-Bad", "a\r\nX-Injected: 1"}, {"X-Bad", "a\nb"}, {"Bad Name", "v"}, {"X-Bad\r\nX-Injected", "v"}} {
		req := withHeaders("POST", `{}`)
		req.Header[kv[0]] = []string{kv[1]}
		err := writeRequest(bufio.NewWriter(io.Discard), req)
		assert.Error(t, err, "header %q: %q", kv[0], kv[1])
	}
}

// BenchmarkWriteRequest is the hop client's request writer beside Request.Write, on a relayed
// chat as an OpenAI SDK sends it (its headers, a 300-byte body), into a buffer. It asserts no
// time.
//
//	go test -run '^$' -bench '^BenchmarkWriteRequest$' -benchmem ./agent/gateway/
func BenchmarkWriteRequest(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 250) + `"}],"stream":true}`)
	req, err := http.NewRequest("POST", "http://127.0.0.1:7777/v1/chat/completions", nil)
	require.NoError(b, err)
	for _, kv := range [][2]string{{"Authorization", "Bearer 0123456789abcdef0123456789abcdef"}, {"Content-Type", "application/json"},
		{"Accept", "application/json"}, {"User-Agent", "OpenAI/Python 1.50.0"}, {"X-Stainless-Lang", "python"},
		{"X-Stainless-Package-Version", "1.50.0"}, {"X-Stainless-Os", "Linux"}, {"X-Stainless-Arch", "x64"},
		{"X-Stainless-Runtime", "CPython"}, {"X-Forwarded-For", "10.0.0.9"}, {HopHeader, "1"}} {
		req.Header.Set(kv[0], kv[1])
	}
	bw := bufio.NewWriterSize(io.Discard, hopBuffer)
	for _, w := range []struct {
		name  string
		write func(*http.Request) error
	}{
		{"Request.Write", func(r *http.Request) error { return r.Write(bw) }},
		{"writeRequest", func(r *http.Request) error { return writeRequest(bw, r) }},
	} {
		b.Run(w.name, func(b *testing.B) {
			for b.Loop() {
				req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
				if err := w.write(req); err != nil {
					b.Fatal(err)
				}
				bw.Flush()
			}
		})
	}
}
