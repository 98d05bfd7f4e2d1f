package seal

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// handshakeWithin bounds how long a new connection may take to send its first byte and finish
// its handshake: a connection that does neither is closed, and never holds a handler.
const handshakeWithin = 10 * time.Second

// tlsRecordHandshake is the first byte of every TLS connection (a handshake record).
const tlsRecordHandshake = 0x16

// plainRefusal answers an HTTP request sent in the clear from the LAN, without reading it and
// without any handler: it says what to do instead.
const plainRefusal = "HTTP/1.1 426 Upgrade Required\r\nUpgrade: TLS/1.3\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"this agent serves the LAN over TLS only: use https:// with the mesh's CA certificate " +
	"(`llmkube-agent ca` prints it), or start the agent with --lan-http for plain HTTP clients\n"

// ListenConfig says what one API port serves.
type ListenConfig struct {
	// TLS is the server side of the sealed channel (Identity.ServerConfig).
	TLS *tls.Config
	// LANPlain serves plain HTTP to other hosts too (--lan-http); the server limits what such a
	// connection reaches (IsLANPlain). Loopback is always served in plain.
	LANPlain bool
	Log      *slog.Logger
}

// Listener is one port that serves TLS to everyone and plain HTTP to loopback (and to the LAN
// when asked), told apart by the first byte. Accept returns only connections that finished a
// handshake with this mesh (*tls.Conn, so net/http fills Request.TLS) or plain ones it admits;
// plain TCP from the LAN and a stranger's TLS are closed before anything serves them.
type Listener struct {
	inner net.Listener
	cfg   ListenConfig
	conns chan net.Conn
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	once  sync.Once
	errMu sync.Mutex
	err   error // the inner listener's failure, set before ctx ends
	// local tells a peer on this host (onThisHost); tests on loopback stand in for the LAN
	// with it.
	local func(net.Conn) bool

	refusedTLS   atomic.Uint64
	refusedPlain atomic.Uint64
	lastRefused  atomic.Pointer[Refusal]
}

// Refusal is a handshake the listener refused: who tried, why, and when.
type Refusal struct {
	From string
	Err  string
	At   time.Time
}

// Listen serves cfg on inner.
func Listen(inner net.Listener, cfg ListenConfig) *Listener { return listen(inner, cfg, onThisHost) }

func listen(inner net.Listener, cfg ListenConfig, local func(net.Conn) bool) *Listener {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	l := &Listener{inner: inner, cfg: cfg, conns: make(chan net.Conn), ctx: ctx, stop: stop, local: local}
	l.wg.Add(1)
	go l.run()
	return l
}

func (l *Listener) run() {
	defer l.wg.Done()
	for {
		c, err := l.inner.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.errMu.Lock()
			l.err = err
			l.errMu.Unlock()
			l.stop()
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if sc := l.sort(c); sc != nil {
				select {
				case l.conns <- sc:
				case <-l.ctx.Done():
					sc.Close()
				}
			}
		}()
	}
}

// sort reads the first byte of c: a TLS handshake is completed here, plain HTTP is admitted
// from loopback (or the LAN with LANPlain). Anything else is closed, and nil returned.
func (l *Listener) sort(c net.Conn) net.Conn {
	c.SetDeadline(time.Now().Add(handshakeWithin))
	// Closing the listener ends a connection still being sorted, not only after its deadline.
	unhook := context.AfterFunc(l.ctx, func() { c.Close() })
	defer unhook()
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return nil
	}
	pc := &prefixConn{Conn: c, first: b[0], has: true}
	if b[0] == tlsRecordHandshake {
		tc := tls.Server(pc, l.cfg.TLS)
		ctx, cancel := context.WithTimeout(l.ctx, handshakeWithin)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			l.refusedTLS.Add(1)
			// A certificate refused, by either end, is a program of another mesh (or one that
			// does not trust this mesh's CA): the doctor names it. A peer that went away
			// mid-handshake is not.
			var remote *net.OpError // the client's alert (crypto/tls reports it so)
			var verify *tls.CertificateVerificationError
			if (errors.As(err, &remote) && remote.Op == "remote error") || errors.As(err, &verify) {
				l.lastRefused.Store(&Refusal{From: c.RemoteAddr().String(), Err: err.Error(), At: time.Now()})
			}
			l.cfg.Log.Debug("sealed handshake refused", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			return nil
		}
		c.SetDeadline(time.Time{})
		return tc
	}
	if !l.local(c) && !l.cfg.LANPlain {
		l.refusedPlain.Add(1)
		l.cfg.Log.Debug("plain connection from the LAN refused", "remote", c.RemoteAddr().String())
		io.WriteString(c, plainRefusal)
		// Closed with the request unread, the socket would reset and the client might lose the
		// answer: the write side is closed, and what the client sent read off (bounded, by the
		// deadline too) until it closes.
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
			io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		}
		c.Close()
		return nil
	}
	c.SetDeadline(time.Time{})
	return pc
}

// Refused counts the connections closed before any handler: failed handshakes, and plain
// ones from the LAN.
func (l *Listener) Refused() (handshakes, plain uint64) {
	return l.refusedTLS.Load(), l.refusedPlain.Load()
}

// LastRefused is the last handshake refused for a certificate, nil before any.
func (l *Listener) LastRefused() *Refusal { return l.lastRefused.Load() }

// Accept returns the next admitted connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ctx.Done():
		l.errMu.Lock()
		defer l.errMu.Unlock()
		if l.err != nil && !errors.Is(l.err, net.ErrClosed) {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting and waits for the connections being sorted.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		l.stop()
		err = l.inner.Close()
		l.wg.Wait()
	})
	return err
}

// Addr is the inner listener's.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// IsLoopback reports whether a is a loopback address.
func IsLoopback(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case nil:
		return false
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// onThisHost reports whether c's peer runs on this host: loopback, or one of its own addresses.
func onThisHost(c net.Conn) bool {
	return IsLoopback(c.RemoteAddr()) || SameHost(c.LocalAddr(), c.RemoteAddr())
}

// SameHost reports whether a connection between local and remote stays on this host: its peer
// has the address it reached (an agent listening on its LAN address, asked by `llmkube-agent
// join` on the same host). No packet from the LAN carries one of the host's own addresses as
// its source (the kernel drops it as a martian), and a TCP handshake could not complete if it did.
func SameHost(local, remote net.Addr) bool {
	l, lok := local.(*net.TCPAddr)
	r, rok := remote.(*net.TCPAddr)
	return lok && rok && l.IP.Equal(r.IP)
}

// prefixConn gives back the first byte the listener read before the rest.
type prefixConn struct {
	net.Conn
	first byte
	has   bool
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if p.has && len(b) > 0 {
		b[0] = p.first
		p.has = false
		return 1, nil
	}
	return p.Conn.Read(b)
}
