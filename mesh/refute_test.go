package mesh

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// TestRefutationCarriesTheCurrentMetadata: a member that refutes a suspicion (or its death)
// re-advertises itself, and what it advertises must be the metadata it publishes now. memberlist
// refuted with the metadata its node table held, and a metadata update racing the refutation
// (the publisher's UpdateNode numbered before the refutation, applied after it) is then dropped
// as older: every peer kept the metadata, hence the document, from before the change, and showed
// the member alive with its old placements until its next change. Seen in the e2e LAN after a
// kill -9 and restart (TestLANIntents): a busy host, suspected while its new replica loaded,
// was shown without it by the restarted host for over 20 s. Here the race's outcome is made
// directly: the new state is published but memberlist not yet told, and the member is then
// made to refute.
func TestRefutationCarriesTheCurrentMetadata(t *testing.T) {
	c := newCluster(t)
	blueCfg, blueTr := c.config("blue", api.RoleAgent)
	blue := c.start(blueCfg)
	green := c.add("green", api.RoleAgent)
	require.NoError(t, blue.SetLocal(hostOf(0), []api.Placement{placement("old", "m", api.StateReady)}))
	has := func(id string) func(View) bool {
		return func(v View) bool {
			mb, ok := v.Member("blue")
			return ok && mb.Liveness == api.Alive && len(mb.Placements) == 1 && mb.Placements[0].ID == id && mb.Placements[0].State == api.StateReady
		}
	}
	waitFor(t, 10*time.Second, []*Mesh{green}, "green sees blue's first state", has("old"))

	// The new state, published as SetLocal does, but its UpdateNode lost to the race.
	blue.mu.Lock()
	ps := []api.Placement{placement("new", "m", api.StateReady)}
	for i := range ps {
		ps[i].Host = "blue"
	}
	h := hostOf(1 << 30)
	h.Name, h.APIAddr = "blue", blueCfg.APIAddr
	_, err := blue.publishLocked(&h, ps, newSignature(&h, ps))
	blue.mu.Unlock()
	require.NoError(t, err)

	// blue's link goes down until green suspects it; once back, blue refutes.
	blueTr.Cut(true)
	waitFor(t, 10*time.Second, []*Mesh{green}, "green suspects blue", func(v View) bool {
		green.mu.Lock()
		defer green.mu.Unlock()
		return green.members["blue"].state != api.Alive
	})
	blueTr.Cut(false)
	waitFor(t, 10*time.Second, []*Mesh{green}, "green sees blue's new state once blue refuted", has("new"))
}
