package hop

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/internal/seal"
)

// identity is an agent's side of a test mesh's sealed channel.
func identity(t *testing.T, name string) *seal.Identity {
	t.Helper()
	ca, err := seal.NewCA("hop-test", []byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.Identity(name, seal.RoleAgent, k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// owner serves h as an agent does: over the sealed channel as the agent named name when name
// is not empty, else in plain HTTP. It returns the owner's address.
func owner(t *testing.T, name string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if name != "" {
		ln = tls.NewListener(ln, identity(t, name).ServerConfig())
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// hopTo sends in, as the gateway forwards it, to an owner that answers with what it received;
// sealed serves the owner on the sealed channel and forwards over it.
func hopTo(t *testing.T, in *http.Request, body string, sealed bool) http.Header {
	t.Helper()
	got := make(chan *http.Request, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) != body {
			t.Errorf("the owner read body %q, want %q", b, body)
		}
		got <- r
		io.WriteString(w, "ok")
	})
	var id *seal.Identity
	name := ""
	if sealed {
		id, name = identity(t, "me"), "owner"
	}
	addr := owner(t, name, h)
	c := NewClient(5*time.Second, id, nil)
	t.Cleanup(c.t.CloseIdleConnections)
	req, err := Request(context.Background(), in, c.Scheme(), addr, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req, seal.Peer{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
		t.Fatalf("answer %q", b)
	}
	r := <-got
	if r.Method != in.Method || r.URL.RequestURI() != in.URL.RequestURI() {
		t.Fatalf("the owner was asked %s %s, want %s %s", r.Method, r.URL.RequestURI(), in.Method, in.URL.RequestURI())
	}
	return r.Header
}

// TestSealedHopReachesOnlyTheNodeMeant: a sealed hop to an address where another agent of the
// mesh answers fails, whether its connection is dialed for it or kept from a hop to the node
// that does answer there.
func TestSealedHopReachesOnlyTheNodeMeant(t *testing.T) {
	addr := owner(t, "owner", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	hop := func(c *Client, peer string) error {
		req, _ := http.NewRequest("GET", c.Scheme()+"://"+addr+"/", nil)
		resp, err := c.Do(req, seal.Peer{Name: peer})
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	fresh := NewClient(5*time.Second, identity(t, "me"), nil)
	t.Cleanup(fresh.t.CloseIdleConnections)
	if err := hop(fresh, "someone-else"); err == nil || !strings.Contains(err.Error(), "not someone-else") {
		t.Fatalf("a dial to the wrong node: %v", err)
	}
	kept := NewClient(5*time.Second, identity(t, "me"), nil)
	t.Cleanup(kept.t.CloseIdleConnections)
	if err := hop(kept, "owner"); err != nil {
		t.Fatal(err)
	}
	if err := hop(kept, "someone-else"); err == nil || !strings.Contains(err.Error(), "not someone-else") {
		t.Fatalf("a kept connection to the wrong node: %v", err)
	}
}

// TestRequestHeaders: a forwarded request carries the client's end-to-end headers, the hop
// mark and X-Forwarded-For with the client added; not the connection's headers, the gateway's
// internal ones a client sent, its Expect, or a name no valid request carries; and no
// User-Agent where the client sent none.
func TestRequestHeaders(t *testing.T) {
	for _, tlsOwner := range []bool{false, true} {
		in := httptest.NewRequest("POST", "/v1/chat/completions?x=1", strings.NewReader(""))
		in.RemoteAddr = "192.0.2.7:5000"
		in.Header = http.Header{
			"Authorization":      {"Bearer tok"},
			"Content-Type":       {"application/json"},
			"Connection":         {"X-Private"},
			"X-Private":          {"conn"},
			"Keep-Alive":         {"timeout=5"},
			"Expect":             {"100-continue"},
			"X-Forwarded-For":    {"198.51.100.1"},
			"X-Llmkube-Whatever": {"spoof"},
			"Bad Name":           {"v"},
			"X-Many":             {"a", "b"},
		}
		h := hopTo(t, in, `{"model":"m"}`, tlsOwner)
		want := map[string]string{"Authorization": "Bearer tok", "Content-Type": "application/json",
			Header: "1", "X-Forwarded-For": "198.51.100.1, 192.0.2.7", "X-Many": "a"}
		for k, v := range want {
			if h.Get(k) != v {
				t.Errorf("tls %v: %s = %q, want %q", tlsOwner, k, h.Get(k), v)
			}
		}
		if len(h.Values("X-Many")) != 2 {
			t.Errorf("tls %v: X-Many %q, want both values", tlsOwner, h.Values("X-Many"))
		}
		for _, k := range []string{"X-Private", "Keep-Alive", "Expect", "X-Llmkube-Whatever", "Bad Name", "User-Agent"} {
			if _, ok := h[k]; ok {
				t.Errorf("tls %v: %s passed on: %q", tlsOwner, k, h[k])
			}
		}
	}
}

// TestTransportDial: a dial given to NewClient is the one owners are reached with.
func TestTransportDial(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(owner.Close)
	dialed := make(chan string, 1)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed <- addr
		var d net.Dialer
		return d.DialContext(ctx, network, owner.Listener.Addr().String())
	}
	c := NewClient(5*time.Second, nil, dial)
	t.Cleanup(c.t.CloseIdleConnections)
	req, _ := http.NewRequest("GET", "http://owner.invalid:1/", nil)
	resp, err := c.Do(req, seal.Peer{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if addr := <-dialed; addr != "owner.invalid:1" {
		t.Fatalf("dialed %q", addr)
	}
}
