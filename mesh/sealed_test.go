package mesh

import (
	"encoding/hex"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
)

// sealedAPI serves an agent's /healthz on a sealed listener presenting id, as node does.
func sealedAPI(t *testing.T, id *seal.Identity, name string) string {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(api.NodeHeader, name)
	})}
	go srv.Serve(seal.Listen(inner, seal.ListenConfig{TLS: id.ServerConfig()}))
	t.Cleanup(func() { srv.Close() })
	return inner.Addr().String()
}

func sealIdentity(t *testing.T, name, role string) *seal.Identity {
	ca, err := seal.NewCA("test", testSecret)
	require.NoError(t, err)
	k, err := seal.NewKey()
	require.NoError(t, err)
	id, err := ca.Identity(name, role, k)
	require.NoError(t, err)
	return id
}

// TestTheDialBackChecksTheKeyANodeGossips: members gossip their sealed-channel key, and the
// dial-back reaches each agent over TLS, checked against that key: an address where another
// keyholder answers in the agent's name is unreachable, saying so.
func TestTheDialBackChecksTheKeyANodeGossips(t *testing.T) {
	c := newCluster(t)
	member := func(name, apiAddr string, id *seal.Identity, role api.Role) *Mesh {
		cfg, _ := c.config(name, role)
		cfg.DialBack = nil // the real check: GET /healthz, sealed
		cfg.Seal = id
		if role == api.RoleAgent {
			cfg.APIAddr = apiAddr
		}
		return c.start(cfg)
	}
	goodID, victimID := sealIdentity(t, "good", seal.RoleAgent), sealIdentity(t, "victim", seal.RoleAgent)
	impostor := sealIdentity(t, "victim", seal.RoleAgent) // the same name, another key
	good := member("good", sealedAPI(t, goodID, "good"), goodID, api.RoleAgent)
	member("victim", sealedAPI(t, impostor, "victim"), victimID, api.RoleAgent)
	console := member("console", "", sealIdentity(t, "console", seal.RoleConsole), api.RoleConsole)

	waitFor(t, 10*time.Second, []*Mesh{console, good}, "good verified, victim's address refused", func(v View) bool {
		g, _ := v.Member("good")
		vi, _ := v.Member("victim")
		return g.Liveness == api.Alive && vi.Liveness == api.Unreachable
	})
	v := console.View()
	g, _ := v.Member("good")
	require.Equal(t, hex.EncodeToString(goodID.KeyID()), g.SealKey)
	vi, _ := v.Member("victim")
	require.Equal(t, hex.EncodeToString(victimID.KeyID()), vi.SealKey)
	require.Contains(t, vi.Reason, "not the "+hex.EncodeToString(victimID.KeyID())+" that victim gossips")
}
