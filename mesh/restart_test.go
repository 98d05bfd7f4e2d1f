package mesh

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// TestRestartedMemberIsNotShownWithItsPreviousRun: a host back after a crash is, to the others,
// the same node with new metadata (a new start sequence) and, until its first document arrives,
// nothing else. The document of its previous run must not stand in for it: its placements and
// its start time are a process that is gone. Shown meanwhile, the other hosts' keepers took the
// old run's replica for one on a host running longest and removed their own, and the host that
// came back kept its superseded one (e2e TestLANIntents, 2 runs in 4).
func TestRestartedMemberIsNotShownWithItsPreviousRun(t *testing.T) {
	c := newCluster(t)
	blue := c.add("blue", api.RoleAgent)
	redCfg, redTr := c.config("red", api.RoleAgent)
	redCfg.StateDir = t.TempDir()
	red := c.start(redCfg)
	first := hostOf(0)
	first.StartedAt = time.Now().Add(-time.Hour)
	require.NoError(t, red.SetLocal(first, []api.Placement{placement("old", "m", api.StateReady)}))
	waitFor(t, 10*time.Second, []*Mesh{blue}, "blue sees red's first run", func(v View) bool {
		mb, ok := v.Member("red")
		return ok && len(mb.Placements) == 1 && mb.Host.StartedAt.Equal(first.StartedAt)
	})

	require.NoError(t, red.Shutdown()) // kill -9: no leave
	waitFor(t, 10*time.Second, []*Mesh{blue}, "blue sees red dead", func(v View) bool { return liveness(v, "red") == api.Dead })
	tr, err := c.net.Restart(redTr)
	require.NoError(t, err)
	redCfg.Transport = tr
	again := c.start(redCfg)
	waitFor(t, 10*time.Second, []*Mesh{blue}, "blue sees red back, and nothing of its first run", func(v View) bool {
		mb, ok := v.Member("red")
		return ok && mb.Liveness == api.Alive
	})
	mb, _ := blue.View().Member("red")
	require.Empty(t, mb.Placements, "the placements of red's first run")
	require.True(t, mb.Host.StartedAt.IsZero(), "red's first run's start time, %s", mb.Host.StartedAt)

	second := hostOf(0)
	second.StartedAt = time.Now()
	require.NoError(t, again.SetLocal(second, []api.Placement{placement("old", "m", api.StateReady)}))
	waitFor(t, 10*time.Second, []*Mesh{blue}, "blue sees red's second run", func(v View) bool {
		mb, ok := v.Member("red")
		return ok && len(mb.Placements) == 1 && mb.Placements[0].State == api.StateReady && mb.Host.StartedAt.Equal(second.StartedAt)
	})
}
