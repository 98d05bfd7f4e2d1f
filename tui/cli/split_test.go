package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/tui/cli"
)

// `mesh rank --split` and `mesh place --split`, headless, against three agents running the
// real llama-server and ggml-rpc-server.
func TestE2ESplit(t *testing.T) {
	llama, rpc, model := enginetest.LlamaServer(t), enginetest.RPCServer(t), enginetest.TinyGGUF(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var hosts []localmesh.HostSpec
	for _, n := range []string{"h1", "h2", "h3"} {
		hosts = append(hosts, localmesh.HostSpec{Name: n, Demo: "gpu-server", OS: "linux", Arch: "amd64",
			Runtimes: []api.Runtime{api.RuntimeLlamaServer}, Budget: 2 << 30})
	}
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), LlamaServer: llama, RPCServer: rpc, Fast: true, Hosts: hosts})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	env := map[string]string{"LLMKUBE_JOIN": m.JoinString(), "LLMKUBE_MESH_PROFILE": "local"}
	src := localmesh.FileSource(model)

	r := runCLI(t, ctx, env, "", "mesh", "place", src, "--hosts", "h1,h2")
	assert.Equal(t, cli.ExitUsage, r.code, "--hosts without --split: %s", r.stderr)

	var doc cli.SplitDoc
	require.Eventually(t, func() bool {
		r = runCLI(t, ctx, env, "", "mesh", "rank", src, "--split", "--json")
		if r.code != cli.ExitOK {
			return false
		}
		doc = decode[cli.SplitDoc](t, r)
		return true
	}, 30*time.Second, 200*time.Millisecond, "rank --split: %s", r.stderr)
	require.True(t, doc.Plan.Fits, doc.Plan.Reason)
	assert.Len(t, doc.Plan.Members, 2, "the fewest hosts that hold it")
	assert.Positive(t, doc.Plan.Layers)
	assert.NotEmpty(t, doc.Plan.Protocol)
	assert.NotEmpty(t, doc.Plan.Basis, "the speed says what it rests on")

	// A round-trip bound of the user's, below every link's, leaves the other hosts out of the
	// main's plan and says why (the agents measure each link within a few probes; a console
	// that joins for one command has measured none, and its own plan cannot judge them).
	r = runCLI(t, ctx, env, "", "mesh", "rank", src, "--max-rtt", "1ms")
	assert.Equal(t, cli.ExitUsage, r.code, "--max-rtt without --split: %s", r.stderr)
	r = runCLI(t, ctx, env, "", "mesh", "rank", src, "--split", "--max-rtt", "2s")
	assert.Equal(t, cli.ExitUsage, r.code, "--max-rtt over 1s: %s", r.stderr)
	require.Eventually(t, func() bool {
		for _, h := range []string{"h1", "h2", "h3"} {
			v, err := m.Client(h).Mesh(ctx)
			if err != nil {
				return false
			}
			for _, mb := range v.Members {
				if mb.Name != h && strings.HasPrefix(mb.Name, "h") && mb.RTTMillis <= 0 {
					return false
				}
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "every agent measures its links")
	r = runCLI(t, ctx, env, "", "mesh", "place", src, "--name", "near", "--context", "256", "--split", "--max-rtt", "1us")
	assert.Equal(t, cli.ExitRefused, r.code, r.stderr)
	assert.Equal(t, 2, strings.Count(r.stderr, "over the bound of 1µs"), "both other hosts left out for it: %s", r.stderr)

	table := runCLI(t, ctx, env, "", "mesh", "rank", src, "--split")
	require.Equal(t, cli.ExitOK, table.code, table.stderr)
	assert.Regexp(t, `(?m)^HOST\s+ROLE\s+LAYERS`, table.stdout)
	assert.Contains(t, table.stdout, "expected speed:")

	r = runCLI(t, ctx, env, "", "mesh", "place", src, "--name", "tiny", "--context", "256", "--split", "--hosts", "h2,h3", "--wait", "--json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	p := decode[cli.PlacementDoc](t, r).Placement
	require.NotNil(t, p)
	assert.Equal(t, api.StateReady, p.State, p.Reason)
	require.NotNil(t, p.Split)
	assert.Contains(t, []string{"h2", "h3"}, p.Host, "the main is one of the hosts asked for")
	assert.Len(t, p.Split.Members, 2)

	r = runCLI(t, ctx, env, "", "mesh", "delete", p.ID)
	assert.Equal(t, cli.ExitOK, r.code, r.stderr)
}
