package llamaserver

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmkube/mesh/internal/netconn"
)

// spareLife is how long a connection dialed ahead waits for a chat before it is closed: well
// within llama-server's keep-alive (5 s, which cpp-httplib applies to a connection's first
// request too), so the server never closes one as a chat is sent on it, and short, since an
// unused one holds one of llama-server's HTTP threads.
const spareLife = 2 * time.Second

// dialAhead dials one engine's connections, keeping one dialed ahead of the chat that will need
// it. llama-server closes the connection after every streamed answer (see Chat), so every chat
// needs a new one; connecting in the chat's path was measured at about 180 µs of the time to
// the first token through one agent on loopback, more than the rest of the agent's work before
// it. A chat starts the dial of the next one's once its own first piece is on its way (see
// connBody.dialNext), and again when its answer ends if none is open then (the one dialed at
// its first piece expired in a long answer, or another chat took it), so a chat that overlaps
// another, or follows one within spareLife of its end, finds its connection open. Not sooner:
// dialed as the chat was sent, the engine accepted the new connection while it answered that
// chat's request, and the agent dialed while it relayed the first piece, which cost one hop
// its lead over a bare proxy's first token whenever the engine was busy (BenchmarkCompare,
// 2026-12-06). Nothing runs while the engine is idle: an unused spare is closed once,
// spareLife after it was dialed.
type dialAhead struct {
	addr   string
	dialer net.Dialer
	life   time.Duration // spareLife; shorter in tests

	mu      sync.Mutex
	spare   net.Conn
	at      time.Time   // when spare was dialed
	expire  *time.Timer // closes an unused spare
	dialing bool
	closed  bool
}

func newDialAhead(addr string) *dialAhead {
	return &dialAhead{addr: addr, dialer: net.Dialer{Timeout: 5 * time.Second}, life: spareLife}
}

// DialContext is an http.Transport's: the spare when one is open (and dials the next), a new
// connection otherwise.
func (a *dialAhead) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr != a.addr {
		return a.dialer.DialContext(ctx, network, addr)
	}
	c, _, err := a.take(ctx)
	a.dialNext()
	return c, err
}

// take is the spare when one is open (spare true), a new connection otherwise.
func (a *dialAhead) take(ctx context.Context) (c net.Conn, spare bool, err error) {
	a.mu.Lock()
	c, at := a.spare, a.at
	a.spare = nil
	if c != nil {
		a.expire.Stop()
	}
	a.mu.Unlock()
	if c != nil {
		// Checked, as the transport cannot send a request again on a connection it did not
		// reuse: a spare the engine closed (it stopped, or restarted on the same port) is
		// replaced by a new connection here instead of failing the chat.
		if time.Since(at) < a.life && netconn.Quiet(c) {
			return c, true, nil
		}
		c.Close()
	}
	c, err = a.dialer.DialContext(ctx, "tcp", a.addr)
	return c, false, err
}

// dialNext dials the next spare unless one is open or being dialed.
func (a *dialAhead) dialNext() {
	a.mu.Lock()
	dial := !a.dialing && !a.closed && a.spare == nil
	a.dialing = a.dialing || dial
	a.mu.Unlock()
	if dial {
		go a.refill()
	}
}

// readers are the buffered readers of chats' connections, reused.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// roundTrip sends a chat's request — a POST of body to route — on a connection of its own (it
// closes after the answer, as llama-server closes it: see Chat) and returns the answer, whose
// body closes the connection. It writes and reads in the caller's goroutine: an http.Transport
// dialed in one goroutine of its own, wrote in another and read in a third, each connection's,
// handing the request and the answer between them, and set a pooled connection up (its
// buffers, its goroutines) for the one request it would carry. The request is written as
// bytes, head and body in one write: built and written as an http.Request it took 3.9–4.2 µs
// and 19 allocations (the URL parsed, a 4 KB buffer made, the headers sorted), this way 23–26
// ns and none (BenchmarkChatRequest). A spare the
// engine closed after the look that found it quiet (the one request an http.Transport would
// have sent again) is replaced by a new connection once, when nothing of an answer came on it.
// The end of ctx closes the connection, which ends a write or a read under way. The answer's
// body dials the next chat's connection (connBody.dialNext).
func (a *dialAhead) roundTrip(ctx context.Context, route string, body []byte) (*http.Response, error) {
	msg := requests.Get().(*[]byte)
	*msg = appendRequest((*msg)[:0], a.addr, route, body)
	defer func() {
		if cap(*msg) <= maxPooledRequest {
			requests.Put(msg)
		}
	}()
	for {
		c, spare, err := a.take(ctx)
		if err != nil {
			return nil, err
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		br := readers.Get().(*bufio.Reader)
		br.Reset(c)
		resp, nothing, err := sendOn(c, br, *msg)
		if err == nil {
			resp.Body = &connBody{ReadCloser: resp.Body, c: c, br: br, stop: stop, ahead: a}
			return resp, nil
		}
		stop()
		c.Close()
		br.Reset(nil)
		readers.Put(br)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !spare || !nothing {
			return nil, err
		}
	}
}

// requests are the buffers chats' requests are written from, reused unless a long prompt made
// one larger than maxPooledRequest.
var requests = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledRequest = 64 << 10

// appendRequest appends an HTTP/1.1 POST of a JSON body to route at host, accepting events and
// closing the connection after the answer.
func appendRequest(b []byte, host, route string, body []byte) []byte {
	b = append(b, "POST "...)
	b = append(b, route...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nConnection: close\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// sendOn writes msg on c and reads the answer's head from br; nothing says that it failed
// before any byte of an answer came (the write failed, or the connection ended or was reset
// first): only then may the request go again. ReadResponse alone would not tell: it reports an
// end before the first byte as it reports one within the head.
func sendOn(c net.Conn, br *bufio.Reader, msg []byte) (resp *http.Response, nothing bool, err error) {
	if _, err := c.Write(msg); err != nil {
		return nil, true, err
	}
	if _, err := br.Peek(1); err != nil {
		return nil, true, err
	}
	// No request: ReadResponse takes the answer as a GET's, which for reading a body is a POST's.
	resp, err = http.ReadResponse(br, nil)
	return resp, false, err
}

// connBody is an answer's body on a connection of its own: closing it closes the connection.
type connBody struct {
	io.ReadCloser
	c     net.Conn
	br    *bufio.Reader
	stop  func() bool
	once  sync.Once
	ahead *dialAhead  // dials the next chat's connection (see dialAhead)
	asked atomic.Bool // dialNext asked for it
}

// dialNext starts the dial of the next chat's connection, the first time it is called: when
// the answer's first piece has gone to the client.
func (b *connBody) dialNext() {
	if !b.asked.Swap(true) {
		b.ahead.dialNext()
	}
}

// Close closes the connection, and dials the next chat's unless one is open or being dialed.
func (b *connBody) Close() error {
	b.ahead.dialNext()
	b.once.Do(func() {
		b.stop()
		b.c.Close()
		// The reader is given back only now: nothing reads the connection after its close.
		b.br.Reset(nil)
		readers.Put(b.br)
	})
	return nil
}

// refill dials the next spare (see dialNext).
func (a *dialAhead) refill() {
	c, err := a.dialer.Dial("tcp", a.addr)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dialing = false
	if err != nil {
		return // the next chat dials its own, and tries again
	}
	if a.closed || a.spare != nil {
		c.Close()
		return
	}
	a.spare, a.at = c, time.Now()
	a.expire = time.AfterFunc(a.life, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.spare == c {
			a.spare = nil
			c.Close()
		}
	})
}

// close closes the spare and dials no more: the engine has exited.
func (a *dialAhead) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.spare != nil {
		a.expire.Stop()
		a.spare.Close()
		a.spare = nil
	}
}
