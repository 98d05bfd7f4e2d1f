package auth

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// TestVerifierAnswersAsAPIVerify: the Verifier, which keeps the tokens it derives, answers every
// token as api.Verify does, the first time and every time after, and keeps no more namespaces
// than its bound.
func TestVerifierAnswersAsAPIVerify(t *testing.T) {
	secret, err := api.NewSecret()
	require.NoError(t, err)
	other, err := api.NewSecret()
	require.NoError(t, err)
	admin := api.AdminToken(secret)
	teamA, err := api.NamespaceToken(admin, "team-a")
	require.NoError(t, err)
	otherA, err := api.NamespaceToken(api.AdminToken(other), "team-a")
	require.NoError(t, err)
	tokens := []string{admin, teamA, otherA, api.AdminToken(other),
		strings.Replace(teamA, "team-a", "team-b", 1), // renamed to another namespace
		teamA[:len(teamA)-1] + "0",                    // the namespace known, the MAC wrong
		teamA + "0", "", "Bearer x", "llmk_ns_", "llmk_ns__abc", "llmk_admin_00", "llmk_ns_Team_B_00"}
	v := NewVerifier(secret)
	for round := range 3 { // the second and third rounds meet what the first kept
		for _, tok := range tokens {
			want, wantErr := api.Verify(secret, tok)
			got, gotErr := v.Verify(tok)
			assert.Equal(t, want, got, "round %d, token %q", round, tok)
			assert.Equal(t, wantErr, gotErr, "round %d, token %q", round, tok)
		}
	}
	assert.Equal(t, map[string]string{"team-a": teamA}, v.ns, "only a namespace whose token passed is kept")
	p, err := v.Verify(teamA)
	require.NoError(t, err)
	assert.Equal(t, api.Principal{Namespace: "team-a"}, p)

	for i := range maxKnownNamespaces + 10 {
		ns := fmt.Sprintf("ns-%d", i)
		tok, err := v.NamespaceToken(ns)
		require.NoError(t, err)
		want, err := api.NamespaceToken(admin, ns)
		require.NoError(t, err)
		require.Equal(t, want, tok)
		p, err := v.Verify(tok)
		require.NoError(t, err)
		require.Equal(t, api.Principal{Namespace: ns}, p)
	}
	assert.Len(t, v.ns, maxKnownNamespaces)
	_, err = v.NamespaceToken("Not_A_Label")
	assert.Error(t, err)

	// Concurrent callers (the race detector's part): one verifier serves every request.
	fresh := NewVerifier(secret)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				tok, err := api.NamespaceToken(admin, fmt.Sprintf("ns-%d", (g+i)%8))
				assert.NoError(t, err)
				_, err = fresh.Verify(tok)
				assert.NoError(t, err)
				_, err = fresh.Verify(tok + "0")
				assert.Error(t, err)
			}
		}()
	}
	wg.Wait()
}
