package gateway_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/gateway"
	"github.com/llmkube/mesh/internal/seal"
)

// sealedAs gives a node's gateway an agent's side of the test mesh's sealed channel.
func sealedAs(t testing.TB, name string) func(*gateway.Config) {
	ca, err := seal.NewCA("test", secret)
	require.NoError(t, err)
	k, err := seal.NewKey()
	require.NoError(t, err)
	id, err := ca.Identity(name, seal.RoleAgent, k)
	require.NoError(t, err)
	return func(c *gateway.Config) { c.Seal = id }
}

// TestForwardOverTheSealedChannel: a chat relayed by node-b reaches node-a over TLS, the owner
// checked against the key it gossips and the caller's namespace asserted by the hop (node-a
// never sees the token: TestSealedHopAssertsThePrincipalInsteadOfTheToken); another namespace
// is still refused.
func TestForwardOverTheSealedChannel(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	a := ollamaNode(t, "node-a", sim, sealedAs(t, "node-a"))
	b := newNode(t, nodeOpts{name: "node-b", gateway: sealedAs(t, "node-b")})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", Namespace: "team-a"})
	join(t, a, b)
	teamA, teamB := nsToken(t, "team-a"), nsToken(t, "team-b")

	mb, ok := b.m.View().Member("node-a")
	require.True(t, ok)
	require.Len(t, mb.SealKey, 2*seal.KeyIDSize, "node-a gossips no key")

	for _, stream := range []bool{false, true} {
		resp, body := call(t, "POST", b.url+"/v1/chat/completions", teamA, chatBody("llama", "Sealed across the mesh.", stream, ""))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		assert.Contains(t, string(body), "content")
	}
	resp, body := call(t, "POST", b.url+"/v1/chat/completions", teamB, chatBody("llama", "hi", false, ""))
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", body)
}
