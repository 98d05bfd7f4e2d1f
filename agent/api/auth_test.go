package api

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJoinRoundTrip(t *testing.T) {
	secret, err := NewSecret()
	require.NoError(t, err)
	j := Join{MeshID: "home-lab", Secret: secret, Seeds: []string{"10.0.0.2:7946", "pi.local:7946"}}
	got, err := ParseJoin(j.String())
	require.NoError(t, err)
	assert.Equal(t, j, got)

	noSeeds := Join{MeshID: "m", Secret: secret}
	got, err = ParseJoin("  " + noSeeds.String() + "\n")
	require.NoError(t, err)
	assert.Equal(t, noSeeds, got)
}

func TestParseJoinRefusesMalformed(t *testing.T) {
	secret := strings.Repeat("A", 43) // 32 bytes of base64url
	cases := map[string]string{
		"":                     "must start with llmk1:",
		"llmk2:m:" + secret:    "must start with llmk1:",
		"llmk1:m":              "missing ':'",
		"llmk1:Mesh:" + secret: "mesh id",
		"llmk1:m:!!!":          "not base64url",
		"llmk1:m:AAAA":         "has 3 bytes, want 32",
		"llmk1::" + secret:     "mesh id",
		"llmk1:" + strings.Repeat("a", 33) + ":" + secret: "mesh id",
	}
	for in, want := range cases {
		_, err := ParseJoin(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
}

func TestTokens(t *testing.T) {
	secret, err := NewSecret()
	require.NoError(t, err)
	admin := AdminToken(secret)
	p, err := Verify(secret, admin)
	require.NoError(t, err)
	assert.True(t, p.Admin)
	assert.True(t, p.Allows("anything"))

	nsTok, err := NamespaceToken(admin, "team-a")
	require.NoError(t, err)
	p, err = Verify(secret, nsTok)
	require.NoError(t, err)
	assert.False(t, p.Admin)
	assert.Equal(t, "team-a", p.Namespace)
	assert.True(t, p.Allows("team-a"))
	assert.False(t, p.Allows("team-b"))

	// A namespace token renamed to another namespace does not verify.
	forged := strings.Replace(nsTok, "team-a", "team-b", 1)
	_, err = Verify(secret, forged)
	assert.Error(t, err)

	// Another mesh's tokens do not verify.
	other, _ := NewSecret()
	_, err = Verify(other, admin)
	assert.Error(t, err)
	_, err = Verify(other, nsTok)
	assert.Error(t, err)

	// Only an admin token mints namespace tokens; namespaces must be DNS labels.
	_, err = NamespaceToken(nsTok, "x")
	assert.Error(t, err)
	_, err = NamespaceToken(admin, "Team_B")
	assert.Error(t, err)

	for _, bad := range []string{"", "Bearer x", "llmk_ns_", "llmk_ns__abc", "llmk_admin_00"} {
		_, err := Verify(secret, bad)
		assert.Error(t, err, bad)
	}
}

func TestDerivedValuesDiffer(t *testing.T) {
	secret, _ := NewSecret()
	assert.Len(t, GossipKey(secret), 32)
	assert.NotContains(t, AdminToken(secret), string(GossipKey(secret)))
	assert.Len(t, MeshIDHash("home"), 16)
	assert.NotEqual(t, MeshIDHash("home"), MeshIDHash("work"))
}

func FuzzParseJoin(f *testing.F) {
	secret := make([]byte, SecretSize)
	f.Add(Join{MeshID: "home", Secret: secret, Seeds: []string{"a:1"}}.String())
	f.Add("llmk1:x:@")
	f.Add("llmk1:a:b:c@,,,")
	f.Fuzz(func(t *testing.T, s string) {
		j, err := ParseJoin(s)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to something that parses to the same join.
		again, err := ParseJoin(j.String())
		if err != nil {
			t.Fatalf("re-parse of %q: %v", j.String(), err)
		}
		if again.MeshID != j.MeshID || string(again.Secret) != string(j.Secret) || len(again.Seeds) != len(j.Seeds) {
			t.Fatalf("round trip changed %q", s)
		}
	})
}
