package seal

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	secretA = bytes.Repeat([]byte{0xa5}, 32)
	secretB = bytes.Repeat([]byte{0x5a}, 32)
)

func newCA(t *testing.T, mesh string, secret []byte) *CA {
	t.Helper()
	ca, err := NewCA(mesh, secret)
	require.NoError(t, err)
	return ca
}

func newIdentity(t *testing.T, ca *CA, name, role string) *Identity {
	t.Helper()
	k, err := NewKey()
	require.NoError(t, err)
	id, err := ca.Identity(name, role, k, "192.0.2.7")
	require.NoError(t, err)
	return id
}

// server is an agent's listener with a handler that counts what reaches it.
type server struct {
	addr string
	hits atomic.Int64
	ln   *Listener
}

// serve starts an HTTP server on a sealed listener; lan makes every peer count as a LAN host
// (the test's loopback stands in for the LAN).
func serve(t *testing.T, id *Identity, lan, lanPlain bool) *server {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	local := onThisHost
	if lan {
		local = func(net.Conn) bool { return false }
	}
	s := &server{addr: inner.Addr().String()}
	s.ln = listen(inner, ListenConfig{TLS: id.ServerConfig(), LANPlain: lanPlain}, local)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		who, _ := PeerOf(r.TLS)
		io.WriteString(w, "hello "+who.Name+" "+who.Role)
	})}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(s.ln) }()
	t.Cleanup(func() { hs.Close(); <-done })
	return s
}

func client(cfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: false}}
}

func get(t *testing.T, c *http.Client, url string) (string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestCAIsDerivedIdenticallyByEveryKeyholder(t *testing.T) {
	a1, a2 := newCA(t, "home", secretA), newCA(t, "home", secretA)
	require.Equal(t, a1.PEM(), a2.PEM(), "two keyholders derive different CA certificates")
	require.NotEqual(t, a1.PEM(), newCA(t, "home", secretB).PEM())
	blk, _ := pem.Decode(a1.PEM())
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	require.True(t, c.IsCA)
	require.Contains(t, c.Subject.CommonName, "home")
	_, err = NewCA("home", []byte("short"))
	require.Error(t, err)
}

func TestKeyRoundTrip(t *testing.T) {
	k, err := NewKey()
	require.NoError(t, err)
	b, err := MarshalKey(k)
	require.NoError(t, err)
	back, err := ParseKey(b)
	require.NoError(t, err)
	require.Equal(t, k, back)
	_, err = ParseKey([]byte("not a key"))
	require.Error(t, err)
}

func TestMutualHandshakeNamesBothEnds(t *testing.T) {
	ca := newCA(t, "home", secretA)
	a, con := newIdentity(t, ca, "alpha", RoleAgent), newIdentity(t, ca, "laptop", RoleConsole)
	s := serve(t, a, true, false)
	body, err := get(t, client(con.ClientConfig(Peer{Name: "alpha", KeyID: a.KeyID()})), "https://"+s.addr+"/")
	require.NoError(t, err)
	require.Equal(t, "hello laptop console", body)

	// An ordinary HTTPS client with the CA certificate and no leaf of its own (curl --cacert):
	// the server is authenticated, the client is left to its token.
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca.PEM()))
	body, err = get(t, client(&tls.Config{RootCAs: pool}), "https://"+s.addr+"/")
	require.NoError(t, err, "curl --cacert checks the leaf's IP address like any site's")
	require.Equal(t, "hello  ", body)
}

func TestStrangersAreRefusedBeforeAnyHandler(t *testing.T) {
	ca := newCA(t, "home", secretA)
	s := serve(t, newIdentity(t, ca, "alpha", RoleAgent), true, false)

	// An agent of another mesh, or of this mesh's id keyed with an old secret.
	for _, other := range []*CA{newCA(t, "home", secretB), newCA(t, "elsewhere", secretB)} {
		stranger := newIdentity(t, other, "alpha", RoleAgent)
		_, err := get(t, client(stranger.ClientConfig(Peer{})), "https://"+s.addr+"/")
		require.Error(t, err, "a stranger's agent completed a handshake")
		require.Contains(t, err.Error(), "not of mesh", "the stranger is told it met another mesh")
		// One that does not check the server at all is refused by the server, at the handshake.
		blind := stranger.ClientConfig(Peer{})
		blind.VerifyConnection = nil
		_, err = get(t, client(blind), "https://"+s.addr+"/")
		require.Error(t, err, "the server let a stranger's certificate through")
	}
	// A stranger's server is refused by a member, with a clear reason.
	ss := serve(t, newIdentity(t, newCA(t, "home", secretB), "alpha", RoleAgent), true, false)
	_, err := get(t, client(newIdentity(t, ca, "beta", RoleAgent).ClientConfig(Peer{})), "https://"+ss.addr+"/")
	require.ErrorContains(t, err, "not of mesh home")

	// Plain TCP: the listener answers with its own refusal, never a handler.
	c, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	got, _ := io.ReadAll(c)
	c.Close()
	require.Contains(t, string(got), "426 Upgrade Required")
	require.Contains(t, string(got), "llmkube-agent ca")

	// Bytes that are neither.
	c, err = net.Dial("tcp", s.addr)
	require.NoError(t, err)
	c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5})
	got, _ = io.ReadAll(c)
	c.Close()
	require.NotContains(t, string(got), "HTTP/1.1")

	require.Zero(t, s.hits.Load(), "a stranger reached a handler")
	hs, plain := s.ln.Refused()
	require.Equal(t, uint64(5), hs)
	require.Equal(t, uint64(1), plain)
	last := s.ln.LastRefused()
	require.NotNil(t, last)
	require.Contains(t, last.From, "127.0.0.1:")
	require.NotEmpty(t, last.Err)
}

func TestPlainIsServedOnLoopbackAndOnTheLANOnlyWhenAsked(t *testing.T) {
	ca := newCA(t, "home", secretA)
	id := newIdentity(t, ca, "alpha", RoleAgent)
	for _, tc := range []struct {
		name          string
		lan, lanPlain bool
		served        bool
	}{
		{"loopback", false, false, true},
		{"lan", true, false, false},
		{"lan-http", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, id, tc.lan, tc.lanPlain)
			body, err := get(t, http.DefaultClient, "http://"+s.addr+"/")
			require.NoError(t, err)
			if tc.served {
				require.Equal(t, "hello  ", body)
				require.Equal(t, int64(1), s.hits.Load())
			} else {
				require.Contains(t, body, "--lan-http")
				require.Zero(t, s.hits.Load())
			}
		})
	}
}

func TestAKeyholderCannotClaimAnotherNodesName(t *testing.T) {
	ca := newCA(t, "home", secretA)
	beta := newIdentity(t, ca, "beta", RoleAgent)
	// The keyholder signs a leaf named beta with its own key and answers at some address.
	impostor := newIdentity(t, ca, "beta", RoleAgent)
	s := serve(t, impostor, true, false)
	me := newIdentity(t, ca, "alpha", RoleAgent)

	_, err := get(t, client(me.ClientConfig(Peer{Name: "beta", KeyID: beta.KeyID()})), "https://"+s.addr+"/")
	require.ErrorContains(t, err, "not the")
	_, err = get(t, client(me.ClientConfig(Peer{Name: "gamma"})), "https://"+s.addr+"/")
	require.ErrorContains(t, err, "not gamma")
	// A console's leaf is not an agent's: it cannot serve as one.
	cs := serve(t, newIdentity(t, ca, "beta", RoleConsole), true, false)
	_, err = get(t, client(me.ClientConfig(Peer{Name: "beta"})), "https://"+cs.addr+"/")
	require.ErrorContains(t, err, "not an agent's")
	require.Zero(t, s.hits.Load()+cs.hits.Load())
}

func TestExpiredLeavesAreRefused(t *testing.T) {
	ca := newCA(t, "home", secretA)
	k, err := NewKey()
	require.NoError(t, err)
	old := time.Now().Add(-3 * leafLife)
	expired, err := ca.issue("beta", RoleAgent, k, nil, old, old.Add(leafLife))
	require.NoError(t, err)

	// A server presenting it.
	require.ErrorContains(t, ca.Verify([]*x509.Certificate{expired.Leaf}, Peer{Name: "beta"}, time.Now()), "expired")
	// A client presenting it to a server.
	s := serve(t, newIdentity(t, ca, "alpha", RoleAgent), true, false)
	cfg := newIdentity(t, ca, "gamma", RoleAgent).ClientConfig(Peer{})
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return expired, nil }
	_, err = get(t, client(cfg), "https://"+s.addr+"/")
	require.Error(t, err)
	require.Zero(t, s.hits.Load())
}

func TestLeafIsRenewedBeforeItsEnd(t *testing.T) {
	id := newIdentity(t, newCA(t, "home", secretA), "alpha", RoleAgent)
	first, err := id.current(time.Now())
	require.NoError(t, err)
	same, err := id.current(time.Now().Add(leafLife - 2*leafRenew))
	require.NoError(t, err)
	require.Same(t, first, same)
	renewed, err := id.current(first.Leaf.NotAfter.Add(-leafRenew / 2))
	require.NoError(t, err)
	require.NotSame(t, first, renewed)
}

// recorder is a TCP relay that keeps every byte the client sent.
type recorder struct {
	mu   sync.Mutex
	sent bytes.Buffer
}

func (r *recorder) relay(t *testing.T, to string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				return
			}
			go func() { io.Copy(c, up); c.Close() }()
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					r.mu.Lock()
					r.sent.Write(buf[:n])
					r.mu.Unlock()
					up.Write(buf[:n])
					if err != nil {
						up.Close()
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestReplayedHandshakeGetsNothing(t *testing.T) {
	ca := newCA(t, "home", secretA)
	a := newIdentity(t, ca, "alpha", RoleAgent)
	s := serve(t, a, true, false)
	rec := &recorder{}
	via := rec.relay(t, s.addr)
	cfg := newIdentity(t, ca, "beta", RoleAgent).ClientConfig(Peer{Name: "alpha"})
	cfg.ClientSessionCache = nil
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	body, err := get(t, c, "https://"+via+"/secret-prompt")
	require.NoError(t, err)
	require.Equal(t, "hello beta agent", body)
	require.Equal(t, int64(1), s.hits.Load())
	c.CloseIdleConnections()

	rec.mu.Lock()
	captured := bytes.Clone(rec.sent.Bytes())
	rec.mu.Unlock()
	require.NotContains(t, string(captured), "secret-prompt", "the request crossed in the clear")

	// The captured bytes, replayed to the server as they were.
	conn, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write(captured)
	require.NoError(t, err)
	conn.SetReadDeadline(time.Now().Add(handshakeWithin + 5*time.Second))
	answer, _ := io.ReadAll(conn) // the server's flight, then an alert and the close
	require.NotContains(t, string(answer), "hello")
	require.Equal(t, int64(1), s.hits.Load(), "a replayed handshake reached a handler")
}

func TestCloseEndsConnectionsBeingSorted(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := Listen(inner, ListenConfig{TLS: newIdentity(t, newCA(t, "home", secretA), "alpha", RoleAgent).ServerConfig()})
	c, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	accepted := make(chan error, 1)
	go func() { _, err := ln.Accept(); accepted <- err }()
	require.NoError(t, ln.Close()) // waits for the silent connection's sorting to end
	require.ErrorIs(t, <-accepted, net.ErrClosed)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err)
	require.False(t, strings.Contains(err.Error(), "timeout"), "the connection was left open: %v", err)
}

func TestIsLoopback(t *testing.T) {
	require.True(t, IsLoopback(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}))
	require.True(t, IsLoopback(&net.TCPAddr{IP: net.IPv6loopback}))
	require.False(t, IsLoopback(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}))
	require.False(t, IsLoopback(nil))
}

func TestASecondConnectionResumesTheSession(t *testing.T) {
	ca := newCA(t, "home", secretA)
	a := newIdentity(t, ca, "alpha", RoleAgent)
	s := serve(t, a, true, false)
	me := newIdentity(t, ca, "beta", RoleAgent)
	var resumed []bool
	for range 2 {
		c, err := tls.Dial("tcp", s.addr, me.ClientConfig(Peer{Name: "alpha", KeyID: a.KeyID()}))
		require.NoError(t, err)
		// The session ticket comes after the handshake: a request and its answer read it.
		_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		require.NoError(t, err)
		b, _ := io.ReadAll(c)
		require.Contains(t, string(b), "hello beta agent")
		resumed = append(resumed, c.ConnectionState().DidResume)
		c.Close()
	}
	require.Equal(t, []bool{false, true}, resumed, "a reconnection paid a full handshake")
}

func TestSameHost(t *testing.T) {
	a := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 7777}
	require.True(t, SameHost(a, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 40000}))
	require.False(t, SameHost(a, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 6), Port: 40000}))
	require.False(t, SameHost(nil, a))
}

// PeerNamed checks the key a node gossips when it gossips a well-formed one, and the name alone
// while it gossips none (or junk), as a node that has not yet gossiped its key.
func TestPeerNamed(t *testing.T) {
	require.Equal(t, Peer{Name: "pi5", KeyID: []byte{0xab, 0xcd}}, PeerNamed("pi5", "abcd"))
	require.Equal(t, Peer{Name: "pi5"}, PeerNamed("pi5", ""))
	require.Equal(t, Peer{Name: "pi5"}, PeerNamed("pi5", "not hex"))
}
