package gateway

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/llmkube/mesh/internal/netconn"
)

// Sizes of the hop client.
const (
	// hopIdlePerAgent is how many idle connections are kept per agent: enough for hundreds of
	// concurrent streams to find one.
	hopIdlePerAgent = 512
	// hopIdleFor is how long an idle connection is kept: well within the agents' own server's
	// idle timeout (agent.Server's, 2 min), so an agent never closes one a request is sent on.
	hopIdleFor = 90 * time.Second
	hopBuffer  = 32 << 10
	// hopMaxHead bounds an answer's status line and headers, as http.Transport's
	// MaxResponseHeaderBytes does (http.ReadResponse has no bound of its own): an owner's
	// answer has a handful of headers, and one that sends headers without end is cut.
	hopMaxHead = 1 << 20
)

// hopClient sends forwarded requests to other agents on HTTP/1.1 connections it keeps alive
// itself, writing each request and reading its answer in the forwarding request's own
// goroutine, with net/http's own writer and parser (Request.Write, http.ReadResponse).
// net/http's Transport hands each request to a connection's writing goroutine and each
// answer's head back from its reading goroutine, with its pool's bookkeeping around them: on a
// relayed chat, 10–14 µs from sending to the request written and 7–9 µs from the answer's first
// byte to its head in the forwarder's hands (httptrace, load ~4). BenchmarkHopRoundTrip, the two
// alternating: 6–8 µs less to the first piece, 21 allocations fewer per round trip.
//
// A kept connection is checked before use (netconn.Quiet) instead of being watched by a
// reading goroutine while idle; one the owner closed is dropped, and a new one dialed.
type hopClient struct {
	dialer  net.Dialer
	idleFor time.Duration

	mu    sync.Mutex
	idle  map[string][]*hopConn // by address, the most recently used last
	sweep *time.Timer           // armed while a connection is idle
}

type hopConn struct {
	c     net.Conn
	br    *bufio.Reader // reads through the hopConn, so that left bounds the head
	bw    *bufio.Writer
	left  int64     // bytes the reader may still take from c
	since time.Time // idle since
}

// Read reads from the connection, at most left bytes.
func (hc *hopConn) Read(p []byte) (int, error) {
	if hc.left <= 0 {
		return 0, fmt.Errorf("the answer's head is larger than %d bytes", hopMaxHead)
	}
	if int64(len(p)) > hc.left {
		p = p[:hc.left]
	}
	n, err := hc.c.Read(p)
	hc.left -= int64(n)
	return n, err
}

func newHopClient() *hopClient {
	return &hopClient{
		// A short dial timeout, so a dead owner fails over quickly.
		dialer:  net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second},
		idleFor: hopIdleFor,
		idle:    map[string][]*hopConn{},
	}
}

// do sends req to the agent at req.URL.Host and returns its answer once the head has arrived.
// The body is read from the connection as the caller reads it; closing it gives the connection
// back if the answer was read to its end and the owner keeps it, and closes it otherwise.
// ctx's end closes the connection, which ends a wait for the head or a read of the body with an
// error (the caller reads the reason from ctx).
func (h *hopClient) do(ctx context.Context, req *http.Request) (*http.Response, error) {
	addr := req.URL.Host
	hc, err := h.conn(ctx, addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { hc.c.Close() })
	resp, err := hc.roundTrip(req)
	if err != nil {
		stop()
		hc.c.Close()
		return nil, err
	}
	resp.Body = &hopBody{ReadCloser: resp.Body, h: h, addr: addr, hc: hc, stop: stop, keep: !resp.Close}
	return resp, nil
}

func (hc *hopConn) roundTrip(req *http.Request) (*http.Response, error) {
	if err := writeRequest(hc.bw, req); err != nil {
		return nil, err
	}
	if err := hc.bw.Flush(); err != nil {
		return nil, err
	}
	hc.left = hopMaxHead
	resp, err := http.ReadResponse(hc.br, req)
	hc.left = math.MaxInt64 // the body: a stream as long as the answer
	return resp, err
}

// writeRequest writes req as Request.Write does, for what the forwarder sends — a body of known
// length, no trailers, no transfer coding — without Request.Write's general machinery (its
// header writer sorts the keys, its body writer is built per request), on a path where the
// client waits for the first token: BenchmarkWriteRequest, a chat with an OpenAI SDK's headers,
// 4.5–5.1 µs and 10 allocations with Request.Write, 1.5–1.7 µs and 3 with this (three runs
// each). Anything else goes to Request.Write. No User-Agent is added
// where the client sent none. A header that could not have come from a parsed request (a name
// that is not a token, a value with a line break) is refused as the Transport refuses it.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	n := req.ContentLength
	if n < 0 || (n == 0 && req.Body != nil && req.Body != http.NoBody) || len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 {
		return req.Write(bw)
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(cmp.Or(req.Host, req.URL.Host))
	bw.WriteString("\r\n")
	// As Request.Write: a length for a body, and a zero one but for GET and HEAD.
	if n > 0 || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(n, 10))
		bw.WriteString("\r\n")
	}
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // written above, or not this request's
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("invalid header field value for %q", k)
			}
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
	if n == 0 {
		return nil
	}
	copied, err := io.Copy(bw, req.Body)
	req.Body.Close() // as Request.Write does
	if err == nil && copied != n {
		err = fmt.Errorf("the body is %d bytes, not the %d its length says", copied, n)
	}
	return err
}

// conn is a kept connection to addr that the owner has not closed, or a new one.
func (h *hopClient) conn(ctx context.Context, addr string) (*hopConn, error) {
	for {
		h.mu.Lock()
		cs := h.idle[addr]
		if len(cs) == 0 {
			h.mu.Unlock()
			break
		}
		hc := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		h.idle[addr] = cs[:len(cs)-1]
		h.mu.Unlock()
		if time.Since(hc.since) < h.idleFor && netconn.Quiet(hc.c) {
			return hc, nil
		}
		hc.c.Close()
	}
	c, err := h.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	hc := &hopConn{c: c, bw: bufio.NewWriterSize(c, hopBuffer)}
	hc.br = bufio.NewReaderSize(hc, hopBuffer)
	return hc, nil
}

// put keeps a connection whose answer was read to its end.
func (h *hopClient) put(addr string, hc *hopConn) {
	hc.since = time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.idle[addr]) >= hopIdlePerAgent {
		hc.c.Close()
		return
	}
	h.idle[addr] = append(h.idle[addr], hc)
	if h.sweep == nil {
		h.sweep = time.AfterFunc(h.idleFor, h.expire)
	}
}

// expire closes the connections idle for idleFor, and comes back while any is left.
func (h *hopClient) expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for addr, cs := range h.idle {
		kept := cs[:0]
		for _, hc := range cs {
			if now.Sub(hc.since) >= h.idleFor {
				hc.c.Close()
				continue
			}
			kept = append(kept, hc)
		}
		clear(cs[len(kept):])
		if len(kept) == 0 {
			delete(h.idle, addr)
		} else {
			h.idle[addr] = kept
		}
	}
	h.sweep = nil
	if len(h.idle) > 0 {
		h.sweep = time.AfterFunc(h.idleFor, h.expire)
	}
}

// hopBody is a forwarded answer's body on its connection.
type hopBody struct {
	io.ReadCloser // http.ReadResponse's
	h             *hopClient
	addr          string
	hc            *hopConn
	stop          func() bool // stops the closing of the connection at ctx's end
	keep          bool        // the owner did not say it closes the connection
	ended         bool        // read to its end
	closed        bool
}

func (b *hopBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.ended = b.ended || err == io.EOF
	return n, err
}

// Close gives the connection back when the answer was read to its end (and ctx has not closed
// it meanwhile); otherwise it closes the connection, which the rest of the answer is left on.
// The parser's own Close is not called before the end: it would read the rest of the answer.
func (b *hopBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	// Bytes after the answer are not the answer to any request: such a connection is not kept.
	if b.stop() && b.ended && b.keep && b.hc.br.Buffered() == 0 {
		b.h.put(b.addr, b.hc)
		return nil
	}
	return b.hc.c.Close()
}
