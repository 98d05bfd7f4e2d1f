package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/cli"
)

func nsToken(t *testing.T, secret []byte, ns string) string {
	t.Helper()
	tok, err := api.NamespaceToken(api.AdminToken(secret), ns)
	require.NoError(t, err)
	return tok
}

// `mesh token` shows which admin token a run used, so it checks where secrets come from.
func TestSecretPrecedence(t *testing.T) {
	envJ, envJoin := newJoin(t, "env")
	fileJ, fileJoin := newJoin(t, "file")
	flagJ, flagJoin := newJoin(t, "flag")
	tokJ, _ := newJoin(t, "tok")
	env := map[string]string{"LLMKUBE_JOIN": envJoin}
	joinFile := writeSecret(t, fileJoin)

	cases := []struct {
		name string
		env  map[string]string
		args []string
		from []byte // the secret whose admin token minted
	}{
		{"env", env, nil, envJ.Secret},
		{"file over env", env, []string{"--join-file", joinFile}, fileJ.Secret},
		{"flag over env", env, []string{"--join-string", flagJoin}, flagJ.Secret},
		{"admin token over join", env, []string{"--token", api.AdminToken(tokJ.Secret)}, tokJ.Secret},
		{"token file over join", env, []string{"--token-file", writeSecret(t, api.AdminToken(tokJ.Secret))}, tokJ.Secret},
		{"token env over join", map[string]string{"LLMKUBE_JOIN": envJoin, "LLMKUBE_TOKEN": api.AdminToken(tokJ.Secret)}, nil, tokJ.Secret},
		{"token env alone", map[string]string{"LLMKUBE_TOKEN": api.AdminToken(tokJ.Secret)}, nil, tokJ.Secret},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, t.Context(), c.env, "", append([]string{"mesh", "token", "--namespace", "team-a"}, c.args...)...)
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			assert.Equal(t, nsToken(t, c.from, "team-a")+"\n", r.stdout, "only the token, on one line")
			assert.Empty(t, r.stderr)
		})
	}

	r := runCLI(t, t.Context(), env, "", "mesh", "token", "--namespace", "team-a", "--join-string", flagJoin, "--join-file", joinFile)
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "give --join-string or --join-file, not both")

	r = runCLI(t, t.Context(), nil, "", "mesh", "token", "--namespace", "team-a", "--token", "x", "--token-file", joinFile)
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "give --token or --token-file, not both")

	r = runCLI(t, t.Context(), nil, "", "mesh", "token", "--namespace", "team-a", "--join-file", filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "--join-file")

	r = runCLI(t, t.Context(), nil, "", "mesh", "token", "--namespace", "team-a", "--join-file", writeSecret(t, ""))
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "is empty")

	r = runCLI(t, t.Context(), nil, "", "mesh", "token", "--namespace", "team-a")
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "minting needs the admin token")
}

func TestTokenJSONAndRefusals(t *testing.T) {
	j, join := newJoin(t, "tokens")
	env := map[string]string{"LLMKUBE_JOIN": join}
	r := runCLI(t, t.Context(), env, "", "mesh", "token", "--namespace", "team-b", "--json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var doc cli.TokenDoc
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, cli.TokenDoc{Schema: cli.Schema, Namespace: "team-b", Token: nsToken(t, j.Secret, "team-b")}, doc)
	p, err := api.Verify(j.Secret, doc.Token)
	require.NoError(t, err)
	assert.Equal(t, api.Principal{Namespace: "team-b"}, p, "the mesh accepts the minted token for its namespace only")

	// A namespace token cannot mint another.
	r = runCLI(t, t.Context(), nil, "", "mesh", "token", "--namespace", "team-c", "--token", doc.Token, "--json")
	assert.Equal(t, cli.ExitFailed, r.code)
	e := decodeError(t, r.stdout)
	assert.Equal(t, api.CodeUnauthorized, e.Code)
	assert.Contains(t, r.stderr, "not an admin token")
	assert.NotContains(t, r.stderr+r.stdout, doc.Token, "the token given is not echoed")
}

func TestSecretFilePermissionsWarn(t *testing.T) {
	_, join := newJoin(t, "perms")
	p := filepath.Join(t.TempDir(), "join")
	require.NoError(t, os.WriteFile(p, []byte(join), 0o644))
	r := runCLI(t, t.Context(), nil, "", "mesh", "token", "--namespace", "a", "--join-file", p)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "readable by other users: chmod 600 "+p)
}

// No run prints the join string, the secret in it, or the admin token — whatever fails and
// however the secrets were given.
func TestSecretsNeverEchoed(t *testing.T) {
	dead := closedPort(t)
	j, join := newJoin(t, "quiet", dead)
	admin := api.AdminToken(j.Secret)
	secretText := strings.SplitN(strings.TrimPrefix(join, "llmk1:quiet:"), "@", 2)[0]
	forbidden := []string{join, secretText, admin}

	joinFile, tokenFile := writeSecret(t, join), writeSecret(t, admin)
	ways := map[string]struct {
		env  map[string]string
		args []string
	}{
		"flags": {nil, []string{"--join-string", join, "--token", admin}},
		"files": {nil, []string{"--join-file", joinFile, "--token-file", tokenFile}},
		"env":   {map[string]string{"LLMKUBE_JOIN": join, "LLMKUBE_TOKEN": admin}, nil},
	}
	commands := [][]string{
		{"mesh", "hosts"},
		{"mesh", "hosts", "--agent", "http://" + dead + "/" + admin}, // an error that quotes the URL
		{"mesh", "hosts", "--agent", "http://" + dead, "--verbose"},
		{"mesh", "place", "ollama://qwen2:0.5b", "--auto"},
		{"mesh", "chat", "qwen", "hi", "--timeout", "300ms"},
		{"mesh", "doctor", "--timeout", "1s"},
		{"mesh", "bogus"},
		{"mesh", "hosts", "--bogus"},
	}
	for name, w := range ways {
		for _, cmd := range commands {
			t.Run(name+" "+strings.Join(cmd[:2], " "), func(t *testing.T) {
				t.Parallel()
				args := append(append([]string{}, cmd...), w.args...)
				args = append(args, "--mesh-profile", "local", "--timeout", "300ms")
				for _, asJSON := range []bool{false, true} {
					a := args
					if asJSON {
						a = append(a, "--json")
					}
					r := runCLI(t, t.Context(), w.env, "", a...)
					assert.NotEqual(t, cli.ExitOK, r.code, "%v", a)
					if strings.Contains(cmd[len(cmd)-1], admin) {
						assert.Contains(t, r.stderr, "/[redacted]", "the URL's copy of the token is redacted, not the message dropped")
					}
					for _, s := range forbidden {
						assert.NotContains(t, r.stdout, s, "%v: stdout", a)
						assert.NotContains(t, r.stderr, s, "%v: stderr", a)
					}
				}
			})
		}
	}
}
