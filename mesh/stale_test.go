package mesh

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/statedoc"
)

// TestNeverReadyFromAnOlderDocument: a node whose placements went down names a new document in
// its metadata and counts none of them ready; until that document arrives, the older one must
// not show them ready (a node that restarted loses its older document at once:
// TestRestartedMemberIsNotShownWithItsPreviousRun). Metadata that counts as many ready (an
// ordinary change, the document a moment behind) leaves them ready: no flicker.
func TestNeverReadyFromAnOlderDocument(t *testing.T) {
	x := newCluster(t).add("x", api.RoleConsole)
	old := mustEncode(t, sampleDoc("a", 1, 2)) // two placements, both ready
	setMeta := func(hash string, ready int) {
		b, err := encodeMeta(nodeMeta{Role: api.RoleAgent, APIAddr: "a.test:1", DocHash: hash, Placements: 2, Ready: ready})
		require.NoError(t, err)
		x.mu.Lock()
		defer x.mu.Unlock()
		mb := x.members["a"]
		if mb == nil {
			mb = &member{name: "a", state: api.Alive}
			x.members["a"] = mb
		}
		x.updateMetaLocked(mb, b)
	}
	placements := func() []api.Placement {
		m, ok := x.View().Member("a")
		require.True(t, ok)
		require.Len(t, m.Placements, 2)
		return m.Placements
	}
	setMeta(statedoc.Hash(old), 2)
	d, err := statedoc.Decode(old)
	require.NoError(t, err)
	x.acceptDoc(d, old)
	for _, p := range placements() {
		require.Equal(t, api.StateReady, p.State)
	}

	// A change that keeps both ready: the older document still shows them ready.
	setMeta("", 2)
	for _, p := range placements() {
		require.Equal(t, api.StateReady, p.State)
	}

	// The restart: nothing ready yet, its new document not here.
	setMeta("", 0)
	for _, p := range placements() {
		require.Equal(t, api.StateUnavailable, p.State)
		was, ok := WasState(p)
		require.True(t, ok)
		require.Equal(t, api.StateReady, was)
		require.Contains(t, p.Reason, "newer state is on its way")
	}
}
