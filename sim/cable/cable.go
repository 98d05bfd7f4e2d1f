// Package cable is a TCP proxy that stands for a network cable between two hosts: tests put it
// in front of an agent's API and pull it. Once pulled it passes no byte either way and closes
// nothing, so both ends sit on an open, silent socket — what a host dropping off the network
// looks like to its peers, unlike a closed port, which answers at once.
package cable

import (
	"net"
	"sync"
	"sync/atomic"
)

// Cable forwards connections made to Addr to a target address until pulled.
type Cable struct {
	ln     net.Listener
	target string
	pulled atomic.Bool
	done   chan struct{}

	mu    sync.Mutex
	conns []net.Conn
}

// New listens on a free loopback port and forwards to target.
func New(target string) (*Cable, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &Cable{ln: ln, target: target, done: make(chan struct{})}
	go c.accept()
	return c, nil
}

// Addr is the address to dial instead of the target.
func (c *Cable) Addr() string { return c.ln.Addr().String() }

// Pull stops every byte, on open connections and new ones alike; nothing is closed.
func (c *Cable) Pull() { c.pulled.Store(true) }

// Close stops listening and closes every connection.
func (c *Cable) Close() error {
	err := c.ln.Close()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	return err
}

func (c *Cable) accept() {
	defer close(c.done)
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.keep(in)
		if c.pulled.Load() {
			continue // accepted, never answered
		}
		out, err := net.Dial("tcp", c.target)
		if err != nil {
			in.Close()
			continue
		}
		c.keep(out)
		go c.pipe(out, in)
		go c.pipe(in, out)
	}
}

func (c *Cable) keep(conn net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conns = append(c.conns, conn)
}

// pipe copies src to dst until src ends; once the cable is pulled, bytes are dropped and an end
// is not passed on either.
func (c *Cable) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if c.pulled.Load() {
			if err != nil {
				return
			}
			continue
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}
