package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
)

// The RPC bytes of a split ride the sealed channel: llama-server on the main dials a loopback
// port of its agent (a tunnel); the agent turns each connection into an HTTP/1.1 Upgrade on
// the member's sealed API port (GET /v1/placements/{part}/rpc, as an agent of the mesh), and
// the member's agent pipes it to the part's loopback rpc-server. No rpc-server listens beyond
// loopback, and nothing of RPC crosses the LAN in the clear.

// tunnel is one loopback listener on the main relaying to one member's part.
type tunnel struct {
	ln    net.Listener
	sent  atomic.Int64 // bytes sent the member, for a start's progress (tunnelSet.sent)
	mu    sync.Mutex
	conns map[io.Closer]struct{}
	shut  bool
}

// open starts a tunnel to mb's part for placement id and returns its loopback end. A part on
// this host is reached at its rpc-server directly.
func (ts *tunnelSet) open(a *Agent, id string, mb api.SplitMember) (string, error) {
	if mb.Host == a.Name() {
		return a.partEndpoint(mb.Part)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	t := &tunnel{ln: ln, conns: map[io.Closer]struct{}{}}
	ts.add(id, t)
	sent, received := a.metrics.SplitChannel(mb.Host)
	go t.serve(func(ctx context.Context) (io.ReadWriteCloser, error) {
		rc, err := a.dialPart(ctx, mb.Host, mb.Part)
		if err != nil {
			return nil, err
		}
		return &counted{rc, sent, received, &t.sent}, nil
	}, func() { ts.broke(id, mb.Host) }, a)
	return ln.Addr().String(), nil
}

// serve relays each connection to a stream dial opens; broke is called when a member's end of
// one ended first while the tunnel was open: the member, or the link to it, went away.
func (t *tunnel) serve(dial func(context.Context) (io.ReadWriteCloser, error), broke func(), a *Agent) {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), partTimeout)
			rc, err := dial(ctx)
			cancel()
			if err != nil {
				a.log.Warn("split channel: the member refused", "err", err)
				c.Close()
				return
			}
			if !t.track(c, rc) {
				return
			}
			if farEnded := pipe(c, rc); farEnded && t.live() {
				broke()
			}
			t.untrack(c, rc)
		}()
	}
}

// track records a relayed pair, so close ends it; false (both closed) once the tunnel is shut.
func (t *tunnel) track(cs ...io.Closer) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shut {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		t.conns[c] = struct{}{}
	}
	return true
}

func (t *tunnel) untrack(cs ...io.Closer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		delete(t.conns, c)
	}
}

// live is false once the tunnel is shut (close ended its pairs).
func (t *tunnel) live() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.shut
}

func (t *tunnel) close() {
	t.ln.Close()
	t.mu.Lock()
	t.shut = true
	for c := range t.conns {
		c.Close()
	}
	t.conns = map[io.Closer]struct{}{}
	t.mu.Unlock()
}

// pipe copies both ways until either side ends, then closes both; farEnded is true when the
// copy from y ended first (y closed or broke).
func pipe(x, y io.ReadWriteCloser) (farEnded bool) {
	done := make(chan bool, 2)
	cp := func(dst io.Writer, src io.Reader, far bool) {
		io.Copy(dst, src)
		done <- far
	}
	go cp(x, y, true)
	go cp(y, x, false)
	farEnded = <-done
	x.Close()
	y.Close()
	<-done
	return farEnded
}

// dialPart opens a sealed stream to part on host.
func (a *Agent) dialPart(ctx context.Context, host, part string) (io.ReadWriteCloser, error) {
	mb, err := a.member(host)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.hop.Scheme()+"://"+mb.Host.APIAddr+"/v1/placements/"+url.PathEscape(part)+"/rpc", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.RPCUpgrade)
	req.Header.Set(PrincipalHeader, AssertPrincipal(api.Principal{Admin: true}))
	resp, err := a.hop.Do(req, seal.PeerNamed(mb.Name, mb.SealKey))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("host %s answered %s: %s", host, resp.Status, api.Printable(strings.TrimSpace(string(b))))
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("host %s's answer cannot carry a stream", host)
	}
	return rwc, nil
}

// partEndpoint is the loopback address of a running part's rpc-server.
func (a *Agent) partEndpoint(id string) (string, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	pl, ok := a.placements[id]
	switch {
	case !ok || pl.p.Part == nil:
		return "", api.Errorf(api.CodeNotFound, "no split part %q on host %s", id, a.identity.NodeName)
	case pl.p.State != api.StateReady || pl.p.Engine == "":
		return "", api.Errorf(api.CodeEngineUnavailable, "split part %s on host %s is %s", id, a.identity.NodeName, pl.p.State)
	}
	return pl.p.Engine, nil
}

// rpcTunnel is a member's end of a split's channel: an agent of the mesh (the main's, asserting
// the admin principal) upgrades its sealed connection to a stream to the part's rpc-server.
func (s *Server) rpcTunnel(w http.ResponseWriter, r *http.Request) {
	if !principal(r).Admin {
		WriteError(w, api.Errorf(api.CodeForbidden, "a split's RPC channel is for the mesh's agents only"))
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), api.RPCUpgrade) {
		WriteError(w, api.Errorf(api.CodeBadRequest, "send Connection: Upgrade and Upgrade: %s", api.RPCUpgrade))
		return
	}
	addr, err := s.a.partEndpoint(r.PathValue("id"))
	if err != nil {
		WriteError(w, err)
		return
	}
	up, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		WriteError(w, api.Errorf(api.CodeEngineUnavailable, "the part's rpc-server does not answer: %v", err))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		WriteError(w, api.Errorf(api.CodeInternal, "cannot take over the connection: %v", err))
		return
	}
	conn.SetDeadline(time.Time{}) // the server's read timeout does not bound a stream
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.RPCUpgrade + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		up.Close()
		return
	}
	var src io.ReadWriteCloser = conn // TLS reads its records whole: no second buffer per message
	if brw.Reader.Buffered() > 0 {
		src = bufferedConn{conn, brw.Reader}
	}
	pipe(src, up.(*net.TCPConn))
}

// counted is a member's stream that counts the bytes written to it and read from it.
type counted struct {
	io.ReadWriteCloser
	sent, received prometheus.Counter
	tally          *atomic.Int64 // the tunnel's own count of bytes sent
}

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Read(p)
	c.received.Add(float64(n))
	return n, err
}

func (c *counted) Write(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Write(p)
	c.sent.Add(float64(n))
	c.tally.Add(int64(n))
	return n, err
}

// bufferedConn reads what the server had buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }
