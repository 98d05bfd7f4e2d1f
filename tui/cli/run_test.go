package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/cli"
	"github.com/llmkube/mesh/version"
)

// result is one run of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command line with only env as the environment.
func runCLI(t *testing.T, ctx context.Context, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Run(ctx, args, strings.NewReader(stdin), &out, &errb, cli.Options{
		Getenv: func(k string) string { return env[k] },
	})
	return result{code, out.String(), errb.String()}
}

func newJoin(t *testing.T, id string, seeds ...string) (api.Join, string) {
	t.Helper()
	secret, err := api.NewSecret()
	require.NoError(t, err)
	j := api.Join{MeshID: id, Secret: secret, Seeds: seeds}
	return j, j.String()
}

// writeSecret writes a join string or token file the way a careful user does (0600).
func writeSecret(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, []byte(content+"\n"), 0o600))
	return p
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func decodeError(t *testing.T, stdout string) cli.JSONError {
	t.Helper()
	var doc cli.ErrorDoc
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), "stdout: %s", stdout)
	assert.Equal(t, cli.Schema, doc.Schema)
	require.NotNil(t, doc.Error)
	return *doc.Error
}

func TestUsageErrorsExit2(t *testing.T) {
	_, join := newJoin(t, "usage", "127.0.0.1:1")
	env := map[string]string{"LLMKUBE_JOIN": join}
	cases := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"unknown command", []string{"bogus"}, `unknown command "bogus"`},
		{"unknown mesh command", []string{"mesh", "bogus"}, `unknown command "bogus"`},
		{"bare mesh", []string{"mesh"}, "give a command"},
		{"unknown flag", []string{"mesh", "hosts", "--bogus"}, "unknown flag: --bogus"},
		{"bad duration", []string{"mesh", "hosts", "--timeout", "soon"}, `invalid argument "soon"`},
		{"missing source", []string{"mesh", "place"}, "usage: llmkube-tui mesh place SOURCE"},
		{"extra args", []string{"mesh", "hosts", "pi5"}, "unknown command"},
		{"host and auto", []string{"mesh", "place", "ollama://qwen2:0.5b", "--host", "pi5", "--auto"}, "--host or --auto, not both"},
		{"bad priority", []string{"mesh", "place", "ollama://qwen2:0.5b", "--auto", "--priority", "urgent"}, `--priority "urgent"`},
		{"bad runtime", []string{"mesh", "rank", "ollama://qwen2:0.5b", "--runtime", "vllm"}, `--runtime "vllm"`},
		{"bad namespace", []string{"mesh", "rank", "ollama://qwen2:0.5b", "--namespace", "Team_A"}, "--namespace"},
		{"negative context", []string{"mesh", "rank", "ollama://qwen2:0.5b", "--context", "-1"}, `context "-1" is not a number of tokens`},
		{"context past the limit", []string{"mesh", "rank", "ollama://qwen2:0.5b", "--context", "2048k"}, "past the limit of 1048576 tokens"},
		{"empty source", []string{"mesh", "rank", " "}, "the source is empty"},
		{"bad event type", []string{"mesh", "watch", "--type", "placement,gossip"}, `--type "gossip"`},
		{"token without namespace", []string{"mesh", "token"}, "--namespace is required"},
		{"token bad namespace", []string{"mesh", "token", "--namespace", "-x"}, "namespace"},
		{"bad profile", []string{"mesh", "hosts", "--mesh-profile", "fast"}, `--mesh-profile "fast"`},
		{"agent with seeds", []string{"mesh", "hosts", "--agent", "127.0.0.1:1", "--join", "127.0.0.1:2"}, "do not go with --agent"},
		{"empty prompt", []string{"mesh", "chat", "qwen", ""}, "the prompt is empty"},
		{"bad completion shell", []string{"completion", "tcsh"}, "tcsh"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, t.Context(), env, "", c.args...)
			assert.Equal(t, cli.ExitUsage, r.code, "stderr: %s", r.stderr)
			assert.Contains(t, r.stderr, c.want)
			assert.Empty(t, r.stdout)
		})
	}
}

func TestUsageErrorJSON(t *testing.T) {
	r := runCLI(t, t.Context(), nil, "", "mesh", "place", "ollama://x:1", "--host", "a", "--auto", "--json")
	require.Equal(t, cli.ExitUsage, r.code)
	e := decodeError(t, r.stdout)
	assert.Equal(t, cli.CodeUsage, e.Code)
	assert.Equal(t, cli.ExitUsage, e.Exit)
	assert.Contains(t, e.Message, "not both")
	assert.Contains(t, r.stderr, "not both", "the reason goes to stderr too")
}

func TestNothingToConnectTo(t *testing.T) {
	r := runCLI(t, t.Context(), nil, "", "mesh", "hosts")
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "nothing to connect to")

	_, join := newJoin(t, "noseeds")
	r = runCLI(t, t.Context(), map[string]string{"LLMKUBE_JOIN": join}, "", "mesh", "hosts")
	assert.Equal(t, cli.ExitUsage, r.code, "a join string without seeds and no --mdns finds nobody")
	assert.Contains(t, r.stderr, "nothing to join")

	r = runCLI(t, t.Context(), nil, "", "mesh", "hosts", "--agent", "127.0.0.1:1")
	assert.Equal(t, cli.ExitUsage, r.code)
	assert.Contains(t, r.stderr, "--agent needs a token")

	r = runCLI(t, t.Context(), map[string]string{"LLMKUBE_JOIN": "llmk1:x"}, "", "mesh", "hosts")
	assert.Equal(t, cli.ExitUsage, r.code, "a malformed join string is a configuration mistake")
	assert.Contains(t, r.stderr, "join string")
}

func TestDeadAgentExits5(t *testing.T) {
	addr := closedPort(t)
	for _, args := range [][]string{
		{"mesh", "hosts"}, {"mesh", "models"}, {"mesh", "rank", "ollama://qwen2:0.5b"},
		{"mesh", "place", "ollama://qwen2:0.5b", "--auto", "--wait"}, {"mesh", "delete", "abc"},
		{"mesh", "chat", "qwen", "hi"}, {"mesh", "watch"}, {"mesh", "doctor"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCLI(t, t.Context(), map[string]string{"LLMKUBE_TOKEN": "llmk_admin_00"}, "", append(args, "--agent", "http://"+addr, "--json")...)
			assert.Equal(t, cli.ExitUnreachable, r.code, "stderr: %s", r.stderr)
			e := decodeError(t, r.stdout)
			assert.Equal(t, api.CodeUnreachable, e.Code)
			assert.Contains(t, e.Fix, addr)
			assert.Contains(t, r.stderr, "unreachable")
		})
	}
}

// silentListener accepts connections and never answers: an agent that hangs.
func silentListener(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ch := make(chan struct{}, 16)
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				return
			}
			conns = append(conns, c)
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), ch
}

func TestTimeoutExits5(t *testing.T) {
	addr, _ := silentListener(t)
	r := runCLI(t, t.Context(), map[string]string{"LLMKUBE_TOKEN": "llmk_admin_00"}, "", "mesh", "hosts", "--agent", addr, "--timeout", "200ms", "--json")
	assert.Equal(t, cli.ExitUnreachable, r.code, "stderr: %s", r.stderr)
	e := decodeError(t, r.stdout)
	assert.Equal(t, cli.CodeTimeout, e.Code)
	assert.Contains(t, r.stderr, "timed out")
}

func TestInterruptExits130(t *testing.T) {
	addr, accepted := silentListener(t)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-accepted // the CLI is waiting on the agent: now press Ctrl-C
		cancel()
	}()
	r := runCLI(t, ctx, map[string]string{"LLMKUBE_TOKEN": "llmk_admin_00"}, "", "mesh", "hosts", "--agent", addr, "--json")
	assert.Equal(t, cli.ExitInterrupted, r.code, "stderr: %s", r.stderr)
	assert.Equal(t, cli.CodeInterrupted, decodeError(t, r.stdout).Code)
}

// A member that joins a mesh nobody else is in: no agent within the timeout is exit 5.
func TestMemberNoAgentExits5(t *testing.T) {
	_, join := newJoin(t, "lonely", closedPort(t))
	r := runCLI(t, t.Context(), map[string]string{"LLMKUBE_JOIN": join, "LLMKUBE_MESH_PROFILE": "local"}, "", "mesh", "hosts", "--timeout", "300ms", "--json")
	assert.Equal(t, cli.ExitUnreachable, r.code, "stderr: %s", r.stderr)
	e := decodeError(t, r.stdout)
	assert.Contains(t, e.Message, `no agent of mesh "lonely"`)
	assert.Contains(t, e.Fix, "mesh doctor")
}

func TestDoctorWithoutAgents(t *testing.T) {
	_, join := newJoin(t, "lonely", closedPort(t))
	r := runCLI(t, t.Context(), map[string]string{"LLMKUBE_JOIN": join, "LLMKUBE_MESH_PROFILE": "local"}, "", "mesh", "doctor", "--timeout", "2s", "--json")
	assert.Equal(t, cli.ExitFailed, r.code, "an error finding fails the doctor; stderr: %s", r.stderr)
	var doc cli.DoctorDoc
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), r.stdout)
	assert.Equal(t, cli.Schema, doc.Schema)
	assert.Equal(t, "member", doc.Doctor.Mode)
	require.NotEmpty(t, doc.Doctor.Findings)
	assert.Equal(t, "error", doc.Doctor.Findings[0].Severity)
	assert.Contains(t, doc.Doctor.Findings[0].Problem, "no agent")
	assert.Contains(t, r.stderr, "the doctor found")
}

func TestNotInThisBuild(t *testing.T) {
	r := runCLI(t, t.Context(), nil, "")
	assert.Equal(t, cli.ExitFailed, r.code)
	assert.Contains(t, r.stderr, "interactive console is not in this build")

	_, join := newJoin(t, "demo", "127.0.0.1:1")
	r = runCLI(t, t.Context(), map[string]string{"LLMKUBE_JOIN": join}, "", "mesh", "hosts", "--demo")
	assert.Equal(t, cli.ExitUsage, r.code, "--demo is no flag of llmkube-tui")
	assert.Contains(t, r.stderr, "unknown flag: --demo: the demo mesh is its own program, llmkube-demo")
	r = runCLI(t, t.Context(), nil, "", "--help")
	assert.Equal(t, cli.ExitOK, r.code)
	assert.NotContains(t, r.stdout, "--demo", "the help offers no flag this program refuses")
}

func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_llmkube-tui", "zsh": "#compdef llmkube-tui", "fish": "complete -c llmkube-tui"} {
		r := runCLI(t, t.Context(), nil, "", "completion", shell)
		assert.Equal(t, cli.ExitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, want, shell)
	}
	// Static completions work without a mesh.
	r := runCLI(t, t.Context(), nil, "", "__complete", "mesh", "place", "x", "--runtime", "")
	assert.Equal(t, cli.ExitOK, r.code)
	assert.Contains(t, r.stdout, "hailo-ollama")
	r = runCLI(t, t.Context(), nil, "", "__complete", "mesh", "")
	for _, c := range []string{"hosts", "models", "rank", "place", "delete", "chat", "watch", "doctor", "token"} {
		assert.Contains(t, r.stdout, c+"\t")
	}
}

func TestVersionFlagAndCommandAgree(t *testing.T) {
	ctx := context.Background()
	flag := runCLI(t, ctx, nil, "", "--version")
	cmd := runCLI(t, ctx, nil, "", "version")
	assert.Equal(t, 0, flag.code, flag.stderr)
	assert.Equal(t, 0, cmd.code, cmd.stderr)
	assert.Equal(t, "llmkube-tui "+version.Get().String()+"\n", cmd.stdout)
	assert.Equal(t, cmd.stdout, flag.stdout)
}
