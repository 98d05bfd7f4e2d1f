package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
)

// PrincipalHeader carries whom a gateway hop's request speaks for: the forwarding agent
// authenticated the caller, and the owner takes its word for it, but only from an agent of the
// mesh over the sealed channel (its leaf checked at the handshake). The caller's own token stays
// with the agent it was sent to. Anyone else's value is dropped, unread.
const PrincipalHeader = "X-Llmkube-Principal"

// AssertPrincipal is p as PrincipalHeader carries it.
func AssertPrincipal(p api.Principal) string {
	if p.Admin {
		return "admin"
	}
	return "namespace " + p.Namespace
}

// parseAsserted reads a PrincipalHeader value.
func parseAsserted(v string) (api.Principal, error) {
	if v == "admin" {
		return api.Principal{Admin: true}, nil
	}
	if ns, ok := strings.CutPrefix(v, "namespace "); ok && ns != "" {
		return api.Principal{Namespace: ns}, nil
	}
	return api.Principal{}, fmt.Errorf("%s %.64q names no principal", PrincipalHeader, v)
}

// assertedBy is the principal a sealed hop asserts on r, if it comes from an agent of the mesh;
// the header is removed from r either way, so no handler or forward sees it.
func assertedBy(r *http.Request) (p api.Principal, asserted bool, err error) {
	v := r.Header.Get(PrincipalHeader)
	if v == "" {
		return p, false, nil
	}
	r.Header.Del(PrincipalHeader)
	who, ok := seal.PeerOf(r.TLS)
	if !ok || who.Role != seal.RoleAgent {
		return p, false, nil
	}
	p, err = parseAsserted(v)
	return p, true, err
}

// lanPlain reports whether r came in plain HTTP from another host (an agent run with
// --lan-http): such a request reaches only the gateway's routes, never as the admin.
func lanPlain(r *http.Request) bool {
	if r.TLS != nil {
		return false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return true
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return !ip.IsLoopback() && !seal.SameHost(local, &net.TCPAddr{IP: ip})
}

// AssertOn fits h, a request another agent is sent over the sealed channel, to carry the
// principal of the caller in ctx in place of the caller's credentials, which stay here.
func AssertOn(ctx context.Context, h http.Header) {
	h.Del("Authorization")
	h.Del("X-Api-Key") // Anthropic's clients send their token so
	p, _ := PrincipalFrom(ctx)
	h.Set(PrincipalHeader, AssertPrincipal(p))
}
