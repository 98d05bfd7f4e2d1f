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
)

// hopTo sends in, as the gateway forwards it, to an owner that answers with what it received;
// tlsOwner serves the owner over TLS and forwards with its client configuration.
func hopTo(t *testing.T, in *http.Request, body string, tlsOwner bool) http.Header {
	t.Helper()
	got := make(chan *http.Request, 1)
	owner := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) != body {
			t.Errorf("the owner read body %q, want %q", b, body)
		}
		got <- r
		io.WriteString(w, "ok")
	}))
	var tc *tls.Config
	scheme := "http"
	if tlsOwner {
		owner.StartTLS()
		tc = owner.Client().Transport.(*http.Transport).TLSClientConfig
		scheme = "https"
	} else {
		owner.Start()
	}
	t.Cleanup(owner.Close)
	tr := NewTransport(5*time.Second, tc, nil)
	t.Cleanup(tr.CloseIdleConnections)
	req, err := Request(context.Background(), in, scheme, owner.Listener.Addr().String(), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
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

// TestTransportDial: a dial given to NewTransport is the one owners are reached with.
func TestTransportDial(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(owner.Close)
	dialed := make(chan string, 1)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed <- addr
		var d net.Dialer
		return d.DialContext(ctx, network, owner.Listener.Addr().String())
	}
	tr := NewTransport(5*time.Second, nil, dial)
	t.Cleanup(tr.CloseIdleConnections)
	req, _ := http.NewRequest("GET", "http://owner.invalid:1/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if addr := <-dialed; addr != "owner.invalid:1" {
		t.Fatalf("dialed %q", addr)
	}
}
