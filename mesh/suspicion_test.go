package mesh

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// A suspicion the suspect refutes within the grace — a host slow to answer one probe, as under
// CPU load — is never shown: no suspect event, no change in the view, its models stay routable.
func TestRefutedSuspicionIsNeverShown(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	require.NoError(t, b.SetLocal(hostOf(1<<30), []api.Placement{placement("p1", "llama3", api.StateReady)}))
	waitFor(t, 10*time.Second, []*Mesh{a}, "b's model ready", func(v View) bool { return len(v.Ready("default", "llama3")) == 1 })
	seen := history(t, a, "b")
	events := eventsOf(t, a)

	// a's failure detector suspects b (what its memberlist does when one probe times out).
	a.mu.Lock()
	seq := a.members["b"].liveSeq
	a.mu.Unlock()
	a.suspected("b")
	assert.Len(t, a.View().Ready("default", "llama3"), 1, "routable during the grace")
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		mb := a.members["b"]
		return mb.state == api.Alive && mb.liveSeq > seq
	}, 5*time.Second, 5*time.Millisecond, "b refutes")
	assert.NotContains(t, seen(), api.Suspect)
	assert.False(t, hasEvent(events(), "b", "suspect"))
	assert.Len(t, a.View().Ready("default", "llama3"), 1)
}

// A member whose probes fail and that has had no ack for aloneAfter is cut off: it shows every
// other member unreachable and their models unavailable at once, and recovers with the next ack.
func TestAloneMemberShowsEveryOtherUnreachable(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	require.NoError(t, b.SetLocal(hostOf(1<<30), []api.Placement{placement("p1", "llama3", api.StateReady)}))
	waitFor(t, 10*time.Second, []*Mesh{a}, "b's model ready", func(v View) bool { return len(v.Ready("default", "llama3")) == 1 })
	assert.NotEqual(t, api.Unreachable, liveness(a.View(), "b"))

	// As if every probe since aloneAfter ago had failed (memberlist's acks keep coming on
	// memnet, so the clock is set back rather than the network cut: the LAN test cuts it).
	// A real ack may land between setting the clock and reading the view: then look again.
	var v View
	require.Eventually(t, func() bool {
		longAgo := time.Now().Add(-a.t.aloneAfter - time.Second).UnixNano()
		a.lastAck.Store(longAgo)
		a.lastFailed.Store(longAgo + 1)
		a.mu.Lock()
		defer a.mu.Unlock()
		v = a.viewLocked()
		return a.aloneLocked(v.At)
	}, 5*time.Second, time.Millisecond)
	mb, _ := v.Member("b")
	assert.Equal(t, api.Unreachable, mb.Liveness)
	assert.Contains(t, mb.Reason, "cut off")
	assert.Empty(t, v.Ready("default", "llama3"))
	self, _ := v.Member("a")
	assert.Equal(t, api.Alive, self.Liveness, "this member itself is not cut off from itself")

	// The next acked probe ends it.
	require.Eventually(t, func() bool { return len(a.View().Ready("default", "llama3")) == 1 }, 5*time.Second, 10*time.Millisecond)
}
