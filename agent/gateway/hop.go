package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Sizes of the hop transport.
const (
	// hopIdlePerAgent is how many idle connections are kept per agent: enough for hundreds of
	// concurrent streams to find one.
	hopIdlePerAgent = 512
	// hopIdleFor is how long an idle connection is kept: well within the agents' own server's
	// idle timeout (agent.Server's, 2 min), so an agent never closes one a request is sent on.
	hopIdleFor = 90 * time.Second
	// hopDialTimeout is short, so a dead owner fails over quickly.
	hopDialTimeout = 3 * time.Second
	// hopMaxHead bounds an owner's status line and headers: its answer has a handful, and one
	// that sends headers without end is cut.
	hopMaxHead = 1 << 20
)

// NewHopTransport is the one place the transport of the agent-to-agent hop is built: kept-alive
// connections to the owner agents, HTTP/1.1 (a streamed answer is relayed as it is read, a
// read at a time), no compression (the client's own Accept-Encoding is passed on as it is, and
// the owner's encoded answer with it), and a bound on the wait for an owner's answer to begin
// (headWithin). tlsConfig, when not nil, is used to reach the owners over TLS (then their
// URLs are https); dial, when not nil, replaces the plain TCP dial.
func NewHopTransport(headWithin time.Duration, tlsConfig *tls.Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	if dial == nil {
		d := &net.Dialer{Timeout: hopDialTimeout, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	return &http.Transport{
		Proxy:                  nil, // agents reach each other directly, never through a proxy from the environment
		DialContext:            dial,
		TLSClientConfig:        tlsConfig,
		TLSHandshakeTimeout:    hopDialTimeout,
		MaxIdleConnsPerHost:    hopIdlePerAgent,
		IdleConnTimeout:        hopIdleFor,
		ResponseHeaderTimeout:  headWithin,
		MaxResponseHeaderBytes: hopMaxHead,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
	}
}

// hopRequest is r, forwarded with body to the agent at addr: the client's method, path and
// body, its end-to-end headers (copyHeaders, less its Expect: the body is here already, not to
// be asked for), the hop mark, and X-Forwarded-For with the client's address added. ctx ends
// it: the client's leaving, or its owner's loss (see owners).
func (g *Gateway) hopRequest(ctx context.Context, r *http.Request, addr string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, r.Method, g.hopScheme+"://"+addr+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	copyHeaders(req.Header, r.Header)
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
	req.Header[HopHeader] = []string{"1"}
	req.Header["X-Forwarded-For"] = []string{forwardedFor(r)}
	return req, nil
}
