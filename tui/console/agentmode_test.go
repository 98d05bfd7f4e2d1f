package console

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh"
)

// TestMarkStaleKeepsThePreviousState: through an agent that stops answering, a ready model is
// shown unavailable and still known to have been ready, in the typed field the mesh's own view
// sets (the Reason "was ready" it also carries had no ":" and was not read back).
func TestMarkStaleKeepsThePreviousState(t *testing.T) {
	v := api.MeshView{Members: []api.Member{{Name: "pi5", Role: api.RoleAgent, Liveness: api.Alive,
		Placements: []api.Placement{{ID: "p-1", State: api.StateReady}, {ID: "p-2", State: api.StatePulling}}}}}
	assert.True(t, markStale(&v, errors.New("connection refused")))
	ps := v.Members[0].Placements
	for i, want := range []api.PlacementState{api.StateReady, api.StatePulling} {
		assert.Equal(t, api.StateUnavailable, ps[i].State)
		was, ok := mesh.WasState(ps[i])
		assert.True(t, ok)
		assert.Equal(t, want, was)
	}
	assert.False(t, markStale(&v, errors.New("connection refused")), "marking twice changes nothing")
	was, _ := mesh.WasState(v.Members[0].Placements[0])
	assert.Equal(t, api.StateReady, was, "a second mark keeps the state before the first")
}
