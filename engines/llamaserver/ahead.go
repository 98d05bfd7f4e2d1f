package llamaserver

import (
	"context"
	"net"
	"sync"
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
// it. Each connection taken starts the dial of the next, so a chat that follows another within
// spareLife finds its connection open. Nothing runs while the engine is idle: an unused spare
// is closed once, spareLife after it was dialed.
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
	a.mu.Lock()
	c, at := a.spare, a.at
	a.spare = nil
	if c != nil {
		a.expire.Stop()
	}
	refill := !a.dialing && !a.closed
	a.dialing = a.dialing || refill
	a.mu.Unlock()
	if refill {
		go a.refill(network)
	}
	if c != nil {
		// Checked, as the transport cannot send a request again on a connection it did not
		// reuse: a spare the engine closed (it stopped, or restarted on the same port) is
		// replaced by a new connection here instead of failing the chat.
		if time.Since(at) < a.life && netconn.Quiet(c) {
			return c, nil
		}
		c.Close()
	}
	return a.dialer.DialContext(ctx, network, addr)
}

// refill dials the next spare.
func (a *dialAhead) refill(network string) {
	c, err := a.dialer.Dial(network, a.addr)
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
