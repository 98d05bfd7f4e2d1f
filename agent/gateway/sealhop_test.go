package gateway

import (
	"bufio"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent"
)

// TestSealedHopAssertsThePrincipalInsteadOfTheToken: on the sealed channel the owner is told
// whom the request speaks for; the caller's token, and any principal the caller claims, stay
// behind.
func TestSealedHopAssertsThePrincipalInsteadOfTheToken(t *testing.T) {
	c := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{}`))
	c.Header.Set("Authorization", "Bearer the-callers-token")
	c.Header.Set(agent.PrincipalHeader, "admin")
	req := newHopRequest(c, "127.0.0.1:7777", []byte(`{}`))
	req.asserted = "namespace team-a"
	got, _ := readBack(t, func(bw *bufio.Writer) error { return writeRequest(bw, req) })
	require.Empty(t, got.Header.Get("Authorization"))
	require.Equal(t, []string{"namespace team-a"}, got.Header.Values(agent.PrincipalHeader))
	require.Equal(t, "1", got.Header.Get(HopHeader))
}
