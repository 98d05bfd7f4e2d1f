package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http/httpguts"
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

// testHop is a chat forwarded to the agent at url.
func testHop(url string) *hopRequest {
	return &hopRequest{method: "POST", uri: "/v1/chat/completions", addr: strings.TrimPrefix(url, "http://"),
		header: http.Header{"Content-Type": {"application/json"}}, forwardedFor: "127.0.0.1", body: []byte(`{"model":"m"}`)}
}

// send sends a chat to the agent at url, ended by ctx, given a minute for the head.
func (h *hopClient) send(ctx context.Context, url string) (*http.Response, error) {
	return h.do(ctx, testHop(url), &hopCut{}, time.Minute)
}

// hopCall sends one request and reads its answer to the end.
func hopCall(t testing.TB, h *hopClient, url string) string {
	t.Helper()
	resp, err := h.send(context.Background(), url)
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
	h := newHopClient(nil)
	for range 5 {
		assert.Equal(t, "data: one\n\ndata: [DONE]\n\n", hopCall(t, h, s.url))
	}
	assert.EqualValues(t, 1, s.opened.Load(), "one connection for five requests")
	assert.Equal(t, 1, h.idleCount())

	resp, err := h.send(context.Background(), s.url)
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
	h := newHopClient(nil)
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
	h := newHopClient(nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.send(ctx, s.url)
		errc <- err
	}()
	require.Eventually(t, func() bool { return s.opened.Load() == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.Error(t, <-errc)
	assert.Zero(t, h.idleCount())
}

// TestHopCutAfterTheAnswer: a request ended after its answer was read and its connection given
// back (an owner found lost a moment late, as the watch's stop follows the body's close) leaves
// the connection, now another request's, alone; one ended before the body's close gives it up.
func TestHopCutAfterTheAnswer(t *testing.T) {
	s := newHopServer(t)
	h := newHopClient(nil)
	k := &hopCut{}
	resp, err := h.do(context.Background(), testHop(s.url), k, time.Minute)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	k.end(&failure{msg: "owner lost"})
	assert.Equal(t, 1, h.idleCount())
	assert.Equal(t, "data: one\n\ndata: [DONE]\n\n", hopCall(t, h, s.url))
	assert.EqualValues(t, 1, s.opened.Load(), "the kept connection served the next request")

	k = &hopCut{}
	resp, err = h.do(context.Background(), testHop(s.url), k, time.Minute)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	k.end(&failure{msg: "owner lost"})
	resp.Body.Close() // closed already, by the end
	assert.Zero(t, h.idleCount(), "a connection the request's end closed is not kept")
	assert.Equal(t, "owner lost", k.reason().msg)
}

// TestHopCutEndsADial: a request ended while its connection is being dialed (its owner lost)
// gives up the dial at once, with the reason kept.
func TestHopCutEndsADial(t *testing.T) {
	h := newHopClient(nil)
	dialing := make(chan struct{})
	h.dialer.ControlContext = func(ctx context.Context, _, _ string, _ syscall.RawConn) error {
		close(dialing)
		<-ctx.Done() // a dial that would not end of itself
		return ctx.Err()
	}
	k := &hopCut{}
	errc := make(chan error, 1)
	go func() {
		_, err := h.do(context.Background(), testHop("http://127.0.0.1:9"), k, time.Minute)
		errc <- err
	}()
	<-dialing
	k.end(&failure{msg: "owner lost"})
	require.ErrorIs(t, <-errc, context.Canceled)
	assert.Equal(t, "owner lost", k.reason().msg)
}

// TestHopClientHeadDeadline: an owner that takes the request and does not answer is given up
// on at the deadline with a timeout error, and its connection not kept.
func TestHopClientHeadDeadline(t *testing.T) {
	s := newHopServer(t)
	s.hold = make(chan struct{})
	t.Cleanup(func() { close(s.hold) })
	h := newHopClient(nil)
	_, err := h.do(context.Background(), testHop(s.url), &hopCut{}, 50*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.Zero(t, h.idleCount())
}

// TestHopClientExpiresIdleConnections: a connection idle for idleFor is closed, and the sweep
// stops once none is left.
func TestHopClientExpiresIdleConnections(t *testing.T) {
	s := newHopServer(t)
	h := newHopClient(nil)
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
	h := newHopClient(nil)
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
	h := newHopClient(nil)
	viaT := func() (*http.Response, error) {
		req, err := http.NewRequest("POST", s.url+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return hc.Do(req)
	}
	hop := func() (*http.Response, error) { return h.send(context.Background(), s.url) }
	buf := make([]byte, hopBuffer)
	round := func(do func() (*http.Response, error)) time.Duration {
		start := time.Now()
		resp, err := do()
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
		viaTransport = append(viaTransport, round(viaT))
		viaHop = append(viaHop, round(hop))
	}
	b.ReportMetric(micros(median(viaTransport)), "µs-transport-first-p50")
	b.ReportMetric(micros(median(viaHop)), "µs-hop-first-p50")
	b.ReportMetric(testing.AllocsPerRun(100, func() { round(viaT) }), "transport-allocs/op")
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
	h := newHopClient(nil)
	_, err = h.send(context.Background(), "http://"+ln.Addr().String())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the answer's head is larger than")
	assert.Zero(t, h.idleCount())
	assert.Less(t, <-sent, int64(hopMaxHead)+16<<20, "the owner's writes stopped once the forwarder closed the connection")
}

// forwardedRequest is how the forwarder built a forwarded request before hopRequest: an
// http.Request with the client's end-to-end headers copied, its length and Expect deleted, the
// hop mark and X-Forwarded-For set. Request.Write of it is what writeRequest must match.
func forwardedRequest(t testing.TB, client *http.Request, addr string, body []byte) *http.Request {
	req, err := http.NewRequest(client.Method, "http://"+addr+client.URL.RequestURI(), bytes.NewReader(body))
	require.NoError(t, err)
	copyHeaders(req.Header, client.Header)
	for k := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			delete(req.Header, k) // as writeRequest does: the Transport refused the request for it
		}
	}
	req.Header.Del("Content-Length")
	req.Header.Del("Expect")
	req.Header.Set(HopHeader, "1")
	req.Header.Set("X-Forwarded-For", forwardedFor(client))
	return req
}

// readBack is what write writes, read as the owner's server reads a request: the request and
// its body.
func readBack(t testing.TB, write func(*bufio.Writer) error) (*http.Request, string) {
	t.Helper()
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	require.NoError(t, write(bw))
	require.NoError(t, bw.Flush())
	r, err := http.ReadRequest(bufio.NewReader(&buf))
	require.NoError(t, err, "%q", buf.String())
	body, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	return r, string(body)
}

// TestWriteRequest checks the hop client's request writer against Request.Write of the request
// the forwarder built before (forwardedRequest): each client request forwarded both ways reads
// back (http.ReadRequest, as the owner's server reads it) the same, but for the User-Agent
// Request.Write adds where there is none; a header no parsed request can carry is refused.
func TestWriteRequest(t *testing.T) {
	const addr = "127.0.0.1:7777"
	client := func(method, body string, kv ...string) *http.Request {
		var r io.Reader
		if body != "" {
			r = strings.NewReader(body)
		}
		req := httptest.NewRequest(method, "/v1/chat/completions?x=1&y=%20", r)
		req.RemoteAddr = "10.0.0.7:41234"
		for i := 0; i+1 < len(kv); i += 2 {
			req.Header.Add(kv[i], kv[i+1])
		}
		return req
	}
	reqs := map[string]*http.Request{
		"chat, an SDK's headers": client("POST", `{"model":"m","messages":[]}`, "Authorization", "Bearer t", "Content-Type", "application/json",
			"User-Agent", "OpenAI/Python 1.50.0", "X-Stainless-Lang", "python", "Accept", "text/event-stream", "Accept", "application/json",
			"Content-Length", "27", "Connection", "keep-alive"),
		"forwarded before, a hop mark": client("POST", `{}`, "X-Forwarded-For", "10.0.0.9, 127.0.0.1", "X-Forwarded-For", "10.0.0.8",
			HopHeader, "1", "X-Llmkube-Other", "x"),
		"hop-by-hop headers": client("POST", `{}`, "Connection", "X-Drop, close", "X-Drop", "d", "Keep-Alive", "timeout=5",
			"Te", "trailers", "Proxy-Authorization", "Basic x", "Upgrade", "h2c", "Expect", "100-continue", "X-Keep", "k"),
		"no user agent":   client("POST", `{}`, "Content-Type", "application/json"),
		"empty POST":      client("POST", ""),
		"GET, no body":    client("GET", "", "Accept", "*/*"),
		"a Host header":   client("POST", `{}`, "Host", "elsewhere.example"),
		"unicode, quotes": client("POST", "{\"a\":\"ü\"}", "X-Note", `say "hi" — ok`),
	}
	for name, c := range reqs {
		t.Run(name, func(t *testing.T) {
			body, err := io.ReadAll(c.Body)
			require.NoError(t, err)
			want, wantBody := readBack(t, func(bw *bufio.Writer) error { return forwardedRequest(t, c, addr, body).Write(bw) })
			got, gotBody := readBack(t, func(bw *bufio.Writer) error { return writeRequest(bw, newHopRequest(c, addr, body)) })
			assert.Equal(t, want.Method, got.Method)
			assert.Equal(t, want.RequestURI, got.RequestURI)
			assert.Equal(t, addr, got.Host)
			assert.Equal(t, want.Host, got.Host)
			assert.Equal(t, want.ContentLength, got.ContentLength)
			assert.Equal(t, wantBody, gotBody)
			if c.Header.Get("User-Agent") == "" {
				want.Header.Del("User-Agent") // Request.Write's own
			}
			assert.Equal(t, want.Header, got.Header)
			assert.Equal(t, "1", got.Header.Get(HopHeader))
			assert.Equal(t, forwardedFor(c), got.Header.Get("X-Forwarded-For"))
		})
	}
	for _, kv := range [][2]string{{"X-Bad", "a\r\nX-Injected: 1"}, {"X-Bad", "a\nb"}} {
		c := client("POST", `{}`)
		c.Header[kv[0]] = []string{kv[1]}
		err := writeRequest(bufio.NewWriter(io.Discard), newHopRequest(c, addr, []byte(`{}`)))
		assert.Error(t, err, "header %q: %q", kv[0], kv[1])
	}
	for _, name := range []string{"Bad Name", "X-Bad\r\nX-Injected", "X-Bad:"} {
		c := client("POST", `{}`, "X-Good", "g")
		c.Header[name] = []string{"v"}
		got, _ := readBack(t, func(bw *bufio.Writer) error { return writeRequest(bw, newHopRequest(c, addr, []byte(`{}`))) })
		assert.Equal(t, []string{"Content-Length", "X-Forwarded-For", "X-Good", HopHeader}, slices.Sorted(maps.Keys(got.Header)),
			"%q is not passed on", name)
	}
}

// BenchmarkWriteRequest is the hop client's request writer beside the way the forwarder wrote
// a relayed request before (forwardedRequest, then Request.Write), on a chat as an OpenAI SDK
// sends it (its headers, a 300-byte body), into a buffer. It asserts no time.
//
//	go test -run '^$' -bench '^BenchmarkWriteRequest$' -benchmem ./agent/gateway/
func BenchmarkWriteRequest(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 250) + `"}],"stream":true}`)
	c := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	for _, kv := range [][2]string{{"Authorization", "Bearer 0123456789abcdef0123456789abcdef"}, {"Content-Type", "application/json"},
		{"Accept", "application/json"}, {"User-Agent", "OpenAI/Python 1.50.0"}, {"X-Stainless-Lang", "python"},
		{"X-Stainless-Package-Version", "1.50.0"}, {"X-Stainless-Os", "Linux"}, {"X-Stainless-Arch", "x64"},
		{"X-Stainless-Runtime", "CPython"}, {"Content-Length", "300"}, {"Connection", "keep-alive"}} {
		c.Header.Set(kv[0], kv[1])
	}
	bw := bufio.NewWriterSize(io.Discard, hopBuffer)
	for _, w := range []struct {
		name  string
		write func() error
	}{
		{"Request.Write", func() error { return forwardedRequest(b, c, "127.0.0.1:7777", body).Write(bw) }},
		{"writeRequest", func() error { return writeRequest(bw, newHopRequest(c, "127.0.0.1:7777", body)) }},
	} {
		b.Run(w.name, func(b *testing.B) {
			for b.Loop() {
				if err := w.write(); err != nil {
					b.Fatal(err)
				}
				bw.Flush()
			}
		})
	}
}

// FuzzWriteRequest: any request the agent's server could have read (http.ReadRequest), forwarded
// by writeRequest, reads back as Request.Write of the request the forwarder built before
// (forwardedRequest) does: the same method, target, length, body and headers.
func FuzzWriteRequest(f *testing.F) {
	for _, s := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"POST /api/chat?x=%20 HTTP/1.1\r\nHost: a\r\nConnection: X-A, keep-alive\r\nX-A: 1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
		"GET /v1/models HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\nX-Llmkube-Hop: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTe: trailers\r\nUser-Agent: x\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil || (c.Method != "POST" && c.Method != "GET") {
			return
		}
		body, err := io.ReadAll(io.LimitReader(c.Body, 1<<16))
		if err != nil {
			return
		}
		c.RemoteAddr = "10.0.0.7:41234"
		const addr = "127.0.0.1:7777"
		if _, err := url.Parse("http://" + addr + c.URL.RequestURI()); err != nil {
			return // no chat route has such a path ("*"), and the old forwarder could not build it
		}
		want, wantBody := readBack(t, func(bw *bufio.Writer) error { return forwardedRequest(t, c, addr, body).Write(bw) })
		got, gotBody := readBack(t, func(bw *bufio.Writer) error { return writeRequest(bw, newHopRequest(c, addr, body)) })
		require.Equal(t, want.Method, got.Method)
		require.Equal(t, want.RequestURI, got.RequestURI)
		require.Equal(t, want.Host, got.Host)
		require.Equal(t, want.ContentLength, got.ContentLength)
		require.Equal(t, wantBody, gotBody)
		// Request.Write writes a User-Agent of its own where there is none, none for an empty
		// one, and only the first of several; writeRequest passes on what the client sent.
		require.Equal(t, c.Header["User-Agent"], got.Header["User-Agent"])
		want.Header.Del("User-Agent")
		got.Header.Del("User-Agent")
		require.Equal(t, want.Header, got.Header)
	})
}
