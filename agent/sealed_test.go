package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
)

// sealedServe serves s's handler on a sealed listener, as a node does, and returns its address.
func sealedServe(t testing.TB, s *Server, id *seal.Identity) string {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := seal.Listen(inner, seal.ListenConfig{TLS: id.ServerConfig()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return inner.Addr().String()
}

func sealIdentity(t testing.TB, ca *seal.CA, name, role string) *seal.Identity {
	t.Helper()
	k, err := seal.NewKey()
	require.NoError(t, err)
	id, err := ca.Identity(name, role, k)
	require.NoError(t, err)
	return id
}

// status sends GET path with the principal asserted (and no token) through c.
func assertStatus(t *testing.T, c *http.Client, url, asserted string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set(PrincipalHeader, asserted)
	resp, err := c.Do(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestOnlyASealedAgentMayAssertAPrincipal(t *testing.T) {
	a := newBareAgent(t, "x86-nvidia", nil)
	s := serve(t, a, nil)
	ca, err := seal.NewCA("test", s.secret)
	require.NoError(t, err)
	addr := sealedServe(t, s.srv, sealIdentity(t, ca, a.Name(), seal.RoleAgent))
	over := func(id *seal.Identity) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: id.ClientConfig(seal.Peer{Name: a.Name()})}}
	}
	peer := over(sealIdentity(t, ca, "beta", seal.RoleAgent))
	console := over(sealIdentity(t, ca, "laptop", seal.RoleConsole))

	require.Equal(t, http.StatusOK, assertStatus(t, peer, "https://"+addr+"/v1/host", "admin"))
	require.Equal(t, http.StatusOK, assertStatus(t, peer, "https://"+addr+"/v1/placements", "namespace team-a"))
	require.Equal(t, http.StatusForbidden, assertStatus(t, peer, "https://"+addr+"/metrics", "namespace team-a"),
		"an asserted namespace is held to its namespace")
	require.Equal(t, http.StatusUnauthorized, assertStatus(t, peer, "https://"+addr+"/v1/host", "root"))
	// A console's leaf, or no leaf at all: the header is dropped and a token is needed.
	require.Equal(t, http.StatusUnauthorized, assertStatus(t, console, "https://"+addr+"/v1/host", "admin"))
	require.Equal(t, http.StatusUnauthorized, assertStatus(t, http.DefaultClient, s.url+"/v1/host", "admin"))
	require.Equal(t, http.StatusUnauthorized, assertStatus(t, http.DefaultClient, "http://"+addr+"/v1/host", "admin"))
}

func TestPlainHTTPFromTheLANReachesOnlyTheGatewaysRoutes(t *testing.T) {
	a := newBareAgent(t, "x86-nvidia", func(c *Config) { c.LANHTTP = true })
	s := serve(t, a, nil)
	s.srv.Mount("GET /v1/models", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, principal(r).Namespace)
	}), Route{Anonymous: true})
	nsTok, err := api.NamespaceToken(api.AdminToken(s.secret), "team-a")
	require.NoError(t, err)
	call := func(path, tok string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "192.0.2.9:40000" // another host, in plain: what --lan-http admits
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		w := httptest.NewRecorder()
		s.srv.Handler().ServeHTTP(w, r)
		return w
	}
	w := call("/v1/models", nsTok)
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "team-a", w.Body.String())
	w = call("/v1/models", api.AdminToken(s.secret))
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Contains(t, w.Body.String(), "llmkube-agent ca")
	w = call("/v1/host", api.AdminToken(s.secret))
	require.Equal(t, http.StatusForbidden, w.Code)
	require.Contains(t, w.Body.String(), "TLS only")

	var found bool
	for _, f := range a.Findings(context.Background()) {
		found = found || (f.Severity == api.SeverityWarning && strings.Contains(f.Problem, "plain HTTP is served to the LAN"))
	}
	require.True(t, found, "--lan-http is not shown by the doctor")
}
