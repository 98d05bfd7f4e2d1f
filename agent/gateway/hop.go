package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/internal/netconn"
	"github.com/llmkube/mesh/internal/seal"
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
// itself, writing each request (writeRequest) and reading its answer (net/http's parser,
// http.ReadResponse) in the forwarding request's own goroutine.
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
	// seal, when set, carries every hop over the sealed channel (TLS to the owner, checked to be
	// the node meant with the key it gossips), and the hop asserts the caller's principal
	// instead of passing its token on.
	seal *seal.Identity

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

func newHopClient(id *seal.Identity) *hopClient {
	return &hopClient{
		seal: id,
		// A short dial timeout, so a dead owner fails over quickly.
		dialer:  net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second},
		idleFor: hopIdleFor,
		idle:    map[string][]*hopConn{},
	}
}

// hopRequest is a request as the hop client forwards it: the client's method, path and body,
// its end-to-end headers (those copyHeaders passes on, less its length, its Expect and its
// X-Forwarded-For), the hop mark, and X-Forwarded-For with the client's address added. It is
// written from the client's request as it is, not from a copy of it: building an http.Request
// for it (NewRequest, the headers copied, three set or deleted) and writing that cost a relayed
// chat 19 allocations more than this (BenchmarkWriteRequest).
type hopRequest struct {
	method, uri  string
	addr         string      // the owner's API address: where the request goes, and its Host
	header       http.Header // the client's request's, read and not changed
	forwardedFor string
	body         []byte
	// peer is the owner as the mesh knows it (name, gossiped key), checked on a sealed dial;
	// asserted, when set, replaces the caller's Authorization (agent.PrincipalHeader).
	peer     seal.Peer
	asserted string
}

// newHopRequest is r, forwarded with body to the agent at addr.
func newHopRequest(r *http.Request, addr string, body []byte) *hopRequest {
	return &hopRequest{method: r.Method, uri: r.URL.RequestURI(), addr: addr, header: r.Header,
		forwardedFor: forwardedFor(r), body: body}
}

// hopCut ends one forwarded request before its time, for the client's leaving or its owner's
// loss (owners); no head in time is the connection's deadline (roundTrip). Ending it closes
// the request's connection, which ends a wait for the head or a read of the body with an
// error, and keeps the gateway's reason for the caller. One value per request, in place of a context derived for it with a callback on it and
// a timer: with the request written from the client's (hopRequest), 17 allocations fewer a
// relayed chat, 357 -> 340 for the whole two-hop round trip (BenchmarkFirstToken -benchmem).
type hopCut struct {
	mu   sync.Mutex
	done bool
	why  *failure           // the gateway's reason; nil for the client's leaving
	c    net.Conn           // the connection while the request has it
	dial context.CancelFunc // ends a dial in progress
}

// end ends the request, for why when it is a *failure; a request ended already is left alone.
func (k *hopCut) end(why error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return
	}
	k.done = true
	if f, ok := why.(*failure); ok {
		k.why = f
	}
	if k.c != nil {
		k.c.Close()
	}
	if k.dial != nil {
		k.dial()
	}
}

// reason is the gateway's reason for ending the request, or nil.
func (k *hopCut) reason() *failure {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.why
}

// hold gives the request its connection, or reports that it has ended already.
func (k *hopCut) hold(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c = c
	return !k.done
}

// release takes the connection back from the request, so that ending it later leaves the
// connection alone; false when it ended first (the connection is closed then).
func (k *hopCut) release() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c = nil
	return !k.done
}

// do sends req to the agent at req.addr and returns its answer once the head has arrived,
// within headWithin of the start (an os.ErrDeadlineExceeded otherwise). The body is read from the
// connection as the caller reads it; closing it gives the connection back if the answer was
// read to its end and the owner keeps it, and closes it otherwise. ctx's end (the client's
// leaving) and k's close the connection, which ends a wait for the head or a read of the body
// with an error (the caller reads the reason from ctx and k).
func (h *hopClient) do(ctx context.Context, req *hopRequest, k *hopCut, headWithin time.Duration) (*http.Response, error) {
	hc, err := h.conn(ctx, req.addr, req.peer, k)
	if err != nil {
		return nil, err
	}
	if !k.hold(hc.c) {
		hc.c.Close()
		return nil, net.ErrClosed
	}
	stop := context.AfterFunc(ctx, func() { k.end(ctx.Err()) })
	resp, err := hc.roundTrip(req, time.Now().Add(headWithin))
	if err != nil {
		stop()
		k.end(nil)
		return nil, err
	}
	resp.Body = &hopBody{ReadCloser: resp.Body, h: h, addr: req.addr, hc: hc, k: k, stop: stop, keep: !resp.Close}
	return resp, nil
}

// roundTrip writes req and reads the answer's head, both by the deadline (a timeout error
// otherwise); the body is read without one.
func (hc *hopConn) roundTrip(req *hopRequest, deadline time.Time) (*http.Response, error) {
	hc.c.SetDeadline(deadline)
	if err := writeRequest(hc.bw, req); err != nil {
		return nil, err
	}
	if err := hc.bw.Flush(); err != nil {
		return nil, err
	}
	hc.left = hopMaxHead
	var head *http.Request // ReadResponse needs the request only to know an answer to HEAD has no body
	if req.method == http.MethodHead {
		head = &http.Request{Method: http.MethodHead}
	}
	resp, err := http.ReadResponse(hc.br, head)
	hc.left = math.MaxInt64 // the body: a stream as long as the answer
	if err == nil {
		hc.c.SetDeadline(time.Time{})
	}
	return resp, err
}

// writeRequest writes req as Request.Write would write the http.Request the forwarder built
// before — the client's end-to-end headers copied, its length, Expect and X-Forwarded-For
// replaced — without building it, and without Request.Write's general machinery (its header
// writer sorts the keys, its body writer is built per request), on a path where the client
// waits for the first token: BenchmarkWriteRequest, a chat with an OpenAI SDK's headers,
// 6.2–7.8 µs and 24 allocations that way, 1.3 µs and 5 this way (three runs each). No
// User-Agent is added where the client sent none. A header whose name is not a token is not
// passed on; a value with a line break, which no parsed request carries, is refused as the
// Transport refuses it.
func writeRequest(bw *bufio.Writer, req *hopRequest) error {
	n := len(req.body)
	bw.WriteString(req.method)
	bw.WriteByte(' ')
	bw.WriteString(req.uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(req.addr)
	bw.WriteString("\r\n")
	// As Request.Write: a length for a body, and a zero one but for GET and HEAD.
	if n > 0 || (req.method != http.MethodGet && req.method != http.MethodHead) {
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.Itoa(n))
		bw.WriteString("\r\n")
	}
	named := connectionNamed(req.header)
	for k, vs := range req.header {
		switch k {
		case "Host", "Content-Length", "Expect", "X-Forwarded-For":
			continue // written here, or not passed on: the body is here already, not to be asked for
		case "Authorization":
			if req.asserted != "" {
				continue // the caller's token stays here: the hop asserts its principal
			}
		}
		// Go's server takes a name with a space in it (textproto is lenient there); the owner is
		// not sent one, which no valid request carries and other parsers read otherwise.
		if !endToEnd(k, named) || !httpguts.ValidHeaderFieldName(k) {
			continue
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
	if !httpguts.ValidHeaderFieldValue(req.forwardedFor) {
		return fmt.Errorf("invalid header field value for %q", "X-Forwarded-For")
	}
	if !httpguts.ValidHeaderFieldValue(req.asserted) {
		return fmt.Errorf("invalid header field value for %q", agent.PrincipalHeader)
	}
	if req.asserted != "" {
		bw.WriteString(agent.PrincipalHeader + ": ")
		bw.WriteString(req.asserted)
		bw.WriteString("\r\n")
	}
	bw.WriteString(HopHeader + ": 1\r\nX-Forwarded-For: ")
	bw.WriteString(req.forwardedFor)
	bw.WriteString("\r\n\r\n")
	_, err := bw.Write(req.body)
	return err
}

// conn is a kept connection to addr that the owner has not closed, or a new one, dialed until
// ctx or k ends.
func (h *hopClient) conn(ctx context.Context, addr string, peer seal.Peer, k *hopCut) (*hopConn, error) {
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
		raw := hc.c
		if tc, ok := raw.(*tls.Conn); ok {
			raw = tc.NetConn() // TLS records left unread would show on the socket all the same
		}
		if time.Since(hc.since) < h.idleFor && netconn.Quiet(raw) {
			return hc, nil
		}
		hc.c.Close()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k.mu.Lock()
	k.dial = cancel
	ended := k.done // ended before there was a dial to end: none is begun
	k.mu.Unlock()
	if ended {
		return nil, net.ErrClosed
	}
	c, err := h.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if h.seal != nil {
		tc := tls.Client(c, h.seal.ClientConfig(peer))
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
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
	k             *hopCut
	stop          func() bool // stops the ending of the request at ctx's end
	keep          bool        // the owner did not say it closes the connection
	ended         bool        // read to its end
	closed        bool
}

func (b *hopBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.ended = b.ended || err == io.EOF
	return n, err
}

// Close gives the connection back when the answer was read to its end (and the request was not
// ended meanwhile); otherwise it closes the connection, which the rest of the answer is left on.
// The parser's own Close is not called before the end: it would read the rest of the answer.
func (b *hopBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	// Bytes after the answer are not the answer to any request: such a connection is not kept.
	b.stop()
	if b.k.release() && b.ended && b.keep && b.hc.br.Buffered() == 0 {
		b.h.put(b.addr, b.hc)
		return nil
	}
	return b.hc.c.Close()
}
