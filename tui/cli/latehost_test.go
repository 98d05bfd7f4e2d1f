package cli_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/tui/cli"
)

// `mesh place --host H` run before H has joined (a script right after starting the agents, or
// a console that has not heard of H yet) waits for H, within the call timeout, and places
// there; a host that never joins is NotFound (exit 4) with a message that says so.
func TestPlaceWaitsForTheNamedHostToJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	gpu := func(name string) localmesh.HostSpec {
		return localmesh.HostSpec{Name: name, Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama}}
	}
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), Hosts: []localmesh.HostSpec{gpu("first")}, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	env := map[string]string{"LLMKUBE_JOIN": m.JoinString(), "LLMKUBE_MESH_PROFILE": "local"}

	done := make(chan result, 1)
	go func() {
		done <- runCLI(t, ctx, env, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--host", "late", "--json")
	}()
	// The command has joined (its console is in the mesh) before the host it names starts.
	require.Eventually(t, func() bool {
		v, err := m.Client("first").Mesh(ctx)
		if err != nil {
			return false
		}
		for _, mb := range v.Members {
			if mb.Role == api.RoleConsole && mb.Liveness == api.Alive {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "the command's console joined")
	select {
	case r := <-done:
		t.Fatalf("the command ended before the host it names started: exit %d, %s", r.code, r.stderr)
	default:
	}
	_, err = m.AddHost(ctx, gpu("late"))
	require.NoError(t, err)
	r := <-done
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	doc := decode[cli.PlacementDoc](t, r)
	require.NotNil(t, doc.Placement)
	assert.Equal(t, "late", doc.Placement.Host)

	r = runCLI(t, ctx, env, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--host", "never", "--timeout", "2s", "--json")
	assert.Equal(t, cli.ExitNotFound, r.code, r.stderr)
	assert.Equal(t, api.CodeNotFound, decodeError(t, r.stdout).Code)
	assert.Contains(t, r.stderr, `no agent "never" in mesh "local": none of that name joined within`)
}
