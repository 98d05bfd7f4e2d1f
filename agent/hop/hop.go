// Package hop is how one agent's gateway passes a request to another agent, the owner of the
// model asked for, and passes its answer back: the transport between agents, the request as
// forwarded (the client's end-to-end headers, the hop mark, X-Forwarded-For), and the headers
// an answer carries back. Which agent a request goes to, and what to do when it fails, is the
// gateway's.
package hop

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/llmkube/mesh/internal/seal"
)

// Header marks a request one agent forwarded to another. The owner serves such a request only
// from its own engines: a forwarded request is never forwarded again, so a stale view on two
// agents cannot bounce a request between them. A client that sets it only loses forwarding.
const Header = "X-Llmkube-Hop"

// internalPrefix starts every header the agents use between them; they are stripped from what
// a client sends and from what an owner answers.
const internalPrefix = "X-Llmkube-"

// Sizes of the transport.
const (
	// idlePerAgent is how many idle connections are kept per agent: enough for hundreds of
	// concurrent streams to find one.
	idlePerAgent = 512
	// idleFor is how long an idle connection is kept: well within the agents' own server's
	// idle timeout (agent.Server's, 2 min), so an agent never closes one a request is sent on.
	idleFor = 90 * time.Second
	// dialTimeout is short, so a dead owner fails over quickly.
	dialTimeout = 3 * time.Second
	// maxHead bounds an owner's status line and headers: its answer has a handful, and one that
	// sends headers without end is cut.
	maxHead = 1 << 20
)

// Client is the transport between agents: kept-alive connections to the owner agents,
// HTTP/1.1 (a streamed answer is relayed as it is read, a read at a time), no compression (the
// client's own Accept-Encoding is passed on as it is, and the owner's encoded answer with it),
// and a bound on the wait for an owner's answer to begin. Sealed (with the agent's identity on
// the mesh's sealed channel, internal/seal), every hop is TLS 1.3 to an owner checked to be the
// node the mesh view names, holding the key it gossips.
type Client struct {
	t    *http.Transport
	seal *seal.Identity
}

// NewClient is the one place the transport between agents is built. headWithin bounds the wait
// for an owner's answer to begin (0 waits as long as the request lasts); id, when not nil,
// seals every hop (the owners' URLs are then https: see Scheme); dial, when not nil, replaces
// the plain TCP dial.
func NewClient(headWithin time.Duration, id *seal.Identity, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Client {
	if dial == nil {
		d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	t := &http.Transport{
		Proxy:                  nil, // agents reach each other directly, never through a proxy from the environment
		DialContext:            dial,
		TLSHandshakeTimeout:    dialTimeout,
		MaxIdleConnsPerHost:    idlePerAgent,
		IdleConnTimeout:        idleFor,
		ResponseHeaderTimeout:  headWithin,
		MaxResponseHeaderBytes: maxHead,
		DisableCompression:     true,
	}
	if id != nil {
		// The peer a dial must reach rides the request's context (Do): the handshake checks it.
		t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			peer, _ := ctx.Value(peerKey{}).(seal.Peer)
			tc := tls.Client(raw, id.ClientConfig(peer))
			hctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			if err := tc.HandshakeContext(hctx); err != nil {
				raw.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	return &Client{t: t, seal: id}
}

// peerKey keys the seal.Peer a sealed request is for in its context.
type peerKey struct{}

// Sealed reports whether hops go over the sealed channel.
func (c *Client) Sealed() bool { return c.seal != nil }

// Scheme is the owners' URL scheme for Request: https when sealed.
func (c *Client) Scheme() string {
	if c.seal != nil {
		return "https"
	}
	return "http"
}

// Do sends req to its owner, peer. Sealed, the connection it went on (new or kept) is checked
// to be peer's: a kept connection was checked when it was dialed, but possibly for another
// request to the same address.
func (c *Client) Do(req *http.Request, peer seal.Peer) (*http.Response, error) {
	if c.seal == nil {
		return c.t.RoundTrip(req)
	}
	req = req.WithContext(context.WithValue(req.Context(), peerKey{}, peer))
	resp, err := c.t.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.TLS == nil {
		resp.Body.Close()
		return nil, fmt.Errorf("the hop to %s was not sealed", req.URL.Host)
	}
	if err := c.seal.CA().Verify(resp.TLS.PeerCertificates, peer, time.Now()); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// Request is r, forwarded with body to the agent at addr (host:port) over scheme (http, or
// https with a TLS transport): the client's method, path and body, its end-to-end headers
// (CopyHeaders, less its Expect: the body is here already, not to be asked for), the hop mark,
// and X-Forwarded-For with the client's address added. ctx ends it.
func Request(ctx context.Context, r *http.Request, scheme, addr string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, r.Method, scheme+"://"+addr+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	CopyHeaders(req.Header, r.Header)
	for k := range req.Header {
		// Go's server takes a name with a space in it (textproto is lenient there); the owner is
		// not sent one, which no valid request carries and other parsers read otherwise.
		if !httpguts.ValidHeaderFieldName(k) {
			delete(req.Header, k)
		}
	}
	delete(req.Header, "Expect")
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // none added where the client sent none
	}
	req.Header[Header] = []string{"1"}
	req.Header["X-Forwarded-For"] = []string{forwardedFor(r)}
	return req, nil
}

// ClientAddr is the address a request came from, for logs and X-Forwarded-For.
func ClientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// forwardedFor is r's X-Forwarded-For with the client's address appended.
func forwardedFor(r *http.Request) string {
	prior := r.Header.Values("X-Forwarded-For")
	addr := ClientAddr(r)
	if len(prior) > 0 {
		addr = strings.Join(prior, ", ") + ", " + addr
	}
	return addr
}

// hopByHop are the headers that describe one connection, never passed through a proxy.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// CopyHeaders copies end-to-end headers: not a hop-by-hop one, not one the Connection header
// names, not one the agents use between them. The values are shared, not copied (src is a
// request or answer that is passed on whole), each capped at its length so that an Add on
// either side copies instead of writing into the other's.
func CopyHeaders(dst, src http.Header) {
	named := connectionNamed(src)
	for k, vs := range src {
		if !slices.Contains(hopByHop, k) && !slices.Contains(named, k) && !strings.HasPrefix(k, internalPrefix) {
			dst[k] = vs[:len(vs):len(vs)]
		}
	}
}

// connectionNamed are the headers h's Connection header names, canonical; nil when it has none.
func connectionNamed(h http.Header) []string {
	var named []string
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				named = append(named, http.CanonicalHeaderKey(f))
			}
		}
	}
	return named
}
