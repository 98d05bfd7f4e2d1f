package console

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
)

// consoleIdentity is the console's side of the sealed channel, made from the join string: a
// leaf in the console role, its key made for this process alone.
func consoleIdentity(j api.Join, name string) (*seal.Identity, error) {
	ca, err := seal.NewCA(j.MeshID, j.Secret)
	if err != nil {
		return nil, err
	}
	k, err := seal.NewKey()
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = "console"
	}
	return ca.Identity(name, seal.RoleConsole, k)
}

// sealTransport makes the console's transport speak to agents over the sealed channel: with
// the join string, a console leaf, and each agent checked to be the member whose API address
// was dialled with the key it gossips; with a CA file alone (a namespace token holder), TLS
// checked against that CA as any site (the agents' leaves name their addresses).
func (c *Conn) sealTransport(id *seal.Identity, caFile string) error {
	switch {
	case id != nil:
		dialer := c.transport.DialContext
		c.transport.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := dialer(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(raw, id.ClientConfig(c.peerAt(addr)))
			if err := tc.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, err
			}
			return tc, nil
		}
	case caFile != "":
		b, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("--ca-file %s holds no PEM certificate (llmkube-agent ca prints the mesh's)", caFile)
		}
		c.transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	}
	return nil
}

// peerAt is the member whose API is at addr in the view, with the key it gossips; the zero Peer
// (any agent of the mesh) when the view has none there yet (the agent --agent names).
func (c *Conn) peerAt(addr string) seal.Peer {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	if src == nil {
		return seal.Peer{}
	}
	for _, m := range src.view().Members {
		if m.Host == nil || m.Host.APIAddr != addr {
			continue
		}
		return seal.PeerNamed(m.Name, m.SealKey)
	}
	return seal.Peer{}
}

// agentURL is the URL the console calls an agent at: https:// when it can seal the channel,
// and plain http:// only to loopback, unless plainLAN insists. raw is an API address or a URL.
func agentURL(raw string, sealed, plainLAN bool) (string, error) {
	scheme := "https"
	if !sealed {
		scheme = "http"
	}
	if !strings.Contains(raw, "://") {
		raw = scheme + "://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("agent URL %q: %w", raw, err)
	}
	switch u.Scheme {
	case "https":
		if !sealed {
			return "", errors.New("https:// to an agent needs the mesh's CA: a join string, or --ca-file with the certificate llmkube-agent ca prints")
		}
	case "http":
		if !plainLAN && !isLoopbackHost(u.Hostname()) {
			return "", fmt.Errorf("%s would cross the network in plain HTTP, tokens and chats readable on the way: use https:// (agents serve it with the mesh's CA), or --insecure-http if the agent runs with --lan-http and you accept that", raw)
		}
	default:
		return "", fmt.Errorf("agent URL %q: want http:// or https://", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// setSource sets where the view comes from; peerAt reads it from dials in flight.
func (c *Conn) setSource(src feed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.src = src
}
