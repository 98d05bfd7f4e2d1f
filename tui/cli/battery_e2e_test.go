package cli_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/tui/cli"
)

// `mesh place --not-on-battery` records the constraint in the intent every agent keeps, as
// `mesh models --json` shows it; `mesh rank` takes the flag too (no demo host runs on battery,
// so the one Ollama host fits).
func TestE2EPlaceNotOnBattery(t *testing.T) {
	m := localMesh(t)
	env := connections(m)[0].env
	rk := decode[cli.RankingDoc](t, runCLI(t, t.Context(), env, "", "mesh", "rank", "ollama://qwen2.5:0.5b", "--not-on-battery", "--json"))
	require.NotEmpty(t, rk.Ranking.Hosts)
	assert.Equal(t, "gpu-server", rk.Ranking.Hosts[0].Host)

	r := runCLI(t, t.Context(), env, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--host", "gpu-server", "--not-on-battery", "--wait")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	var doc cli.PlacementsDoc
	require.Eventually(t, func() bool {
		doc = decode[cli.PlacementsDoc](t, runCLI(t, t.Context(), env, "", "mesh", "models", "--json"))
		return len(doc.Intents) == 1 && len(doc.Placements) == 1
	}, 20*time.Second, 100*time.Millisecond, "the intent recorded")
	assert.True(t, doc.Intents[0].NotOnBattery, "--not-on-battery reached the intent")

	// Deleting its one replica deletes the intent, leaving the shared mesh as it was.
	r = runCLI(t, t.Context(), env, "", "mesh", "delete", doc.Placements[0].ID)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Eventually(t, func() bool {
		d := decode[cli.PlacementsDoc](t, runCLI(t, t.Context(), env, "", "mesh", "models", "--json"))
		return len(d.Intents) == 0 && len(d.Placements) == 0
	}, 20*time.Second, 100*time.Millisecond, "the intent and its placement gone")
}
