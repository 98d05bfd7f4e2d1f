package cli_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/tui/cli"
	"github.com/llmkube/mesh/tui/console"
)

// The root without a command hands a live connection to the interactive console, and nothing
// is logged to the terminal it draws on: logs go to --log-file only.
func TestE2EInteractiveEntry(t *testing.T) {
	m := localMesh(t)
	for _, c := range connections(m) {
		t.Run(c.name, func(t *testing.T) {
			logFile := filepath.Join(t.TempDir(), "console.log")
			var mode console.Mode
			var agents int
			run := func(ctx context.Context, conn *console.Conn, log *slog.Logger) error {
				mode = conn.Mode()
				require.Eventually(t, func() bool { return len(console.Agents(conn.View())) == 3 }, 10*time.Second, 10*time.Millisecond)
				agents = len(console.Agents(conn.View()))
				log.Info("console ran")
				return nil
			}
			var out, errb strings.Builder
			code := cli.Run(t.Context(), []string{"--log-file", logFile, "--verbose"}, strings.NewReader(""), &out, &errb,
				cli.Options{Getenv: func(k string) string { return c.env[k] }, RunConsole: run})
			require.Equal(t, cli.ExitOK, code, errb.String())
			assert.Equal(t, console.Mode(c.name), mode)
			assert.Equal(t, 3, agents)
			assert.Empty(t, out.String())
			assert.Empty(t, errb.String(), "the terminal belongs to the console")
			b, err := os.ReadFile(logFile)
			require.NoError(t, err)
			assert.Contains(t, string(b), "console ran")
			st, err := os.Stat(logFile)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		})
	}
}

// Completion asks the agent given with --agent for hosts, models and placement ids.
func TestE2EDynamicCompletion(t *testing.T) {
	m := localMesh(t)
	r := runCLI(t, t.Context(), connections(m)[1].env, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--host", "gpu-server", "--wait", "--json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	p := decode[cli.PlacementDoc](t, r).Placement
	env := map[string]string{"LLMKUBE_TOKEN": m.AdminToken()}
	agent := m.Host("gpu-server").URL

	r = runCLI(t, t.Context(), env, "", "__complete", "--agent", agent, "mesh", "delete", "")
	assert.Contains(t, r.stdout, p.ID+"\t"+p.Model+" on gpu-server")
	r = runCLI(t, t.Context(), env, "", "__complete", "--agent", agent, "mesh", "chat", "qw")
	assert.Contains(t, r.stdout, "qwen2.5:0.5b\t")
	r = runCLI(t, t.Context(), env, "", "__complete", "--agent", agent, "mesh", "place", "x", "--host", "m")
	assert.Contains(t, r.stdout, "mac-mini\t")
	assert.NotContains(t, r.stdout, "pi5-hailo")
	// Without --agent there is nothing cheap to ask: no suggestions, no files.
	r = runCLI(t, t.Context(), map[string]string{"LLMKUBE_JOIN": m.JoinString()}, "", "__complete", "mesh", "delete", "")
	assert.NotContains(t, r.stdout, p.ID)
	assert.Contains(t, r.stdout, ":4") // ShellCompDirectiveNoFileComp
}

// With several hosts that fit, place needs --host or --auto (exit 2); --auto takes the best,
// --spread the one with the most room.
func TestE2EChoosingAHost(t *testing.T) {
	localMesh(t) // builds the llama-server simulator and starts the shared mesh first
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), MeshID: "twins", Fast: true, Hosts: []localmesh.HostSpec{
		{Name: "big", Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama}, Budget: 40 << 30},
		{Name: "small", Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama}, Budget: 4 << 30},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	require.NoError(t, enginesKnown(ctx, m))
	env := map[string]string{"LLMKUBE_AGENT": m.Host("big").URL, "LLMKUBE_TOKEN": m.AdminToken()}

	r := runCLI(t, ctx, env, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--json")
	assert.Equal(t, cli.ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "2 hosts fit (small, big)")
	assert.Equal(t, cli.CodeUsage, decodeError(t, r.stdout).Code)

	r = runCLI(t, ctx, env, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--auto", "--json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Equal(t, "small", decode[cli.PlacementDoc](t, r).Placement.Host, "the tightest fit")
	assert.Contains(t, r.stderr, "best host: small")

	r = runCLI(t, ctx, env, "", "mesh", "place", "ollama://llama3.2:1b", "--auto", "--spread", "--json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Equal(t, "big", decode[cli.PlacementDoc](t, r).Placement.Host, "the most room left")
}

// Placing what already runs is placing once: a script that runs `place --auto --wait` again
// succeeds and says so; the same source with other settings is still refused.
func TestE2EPlaceTwiceIsPlacingOnce(t *testing.T) {
	m := localMesh(t)
	const source = "ollama://qwen2.5:0.5b"
	for _, c := range connections(m) {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { clearPlacements(t, m) })
			ctx := t.Context()
			r := runCLI(t, ctx, c.env, "", "mesh", "place", source, "--auto", "--wait", "--json")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			first := decode[cli.PlacementDoc](t, r).Placement
			require.NotNil(t, first)

			r = runCLI(t, ctx, c.env, "", "mesh", "place", source, "--auto", "--wait", "--json")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			assert.Contains(t, r.stderr, "already placed: qwen2.5:0.5b on gpu-server as "+first.ID)
			again := decode[cli.PlacementDoc](t, r).Placement
			require.NotNil(t, again)
			assert.Equal(t, first.ID, again.ID)
			assert.Equal(t, api.StateReady, again.State)

			ps, err := m.Client("gpu-server").Placements(ctx)
			require.NoError(t, err)
			assert.Len(t, ps, 1, "nothing new placed")

			r = runCLI(t, ctx, c.env, "", "mesh", "place", source, "--host", "gpu-server", "--context", "4096", "--json")
			assert.NotEqual(t, cli.ExitOK, r.code, r.stderr)
			assert.Contains(t, r.stderr, "Conflict")
			assert.Contains(t, r.stderr, "fix: delete "+first.ID+" first (mesh delete "+first.ID+"), or place it under another name (--name)")
		})
	}
}
