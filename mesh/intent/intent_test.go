package intent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

func want(name string, replicas int) api.Intent {
	return api.Intent{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: name, Source: "ollama://" + name, Replicas: replicas}}
}

func TestConcurrentEditsResolveAlikeInAnyOrder(t *testing.T) {
	a, _ := Open("", "a")
	b, _ := Open("", "b")
	_, wa, err := a.Put(want("qwen", 2))
	require.NoError(t, err)
	_, wb, err := b.Put(want("qwen", 3)) // the same version, concurrently: origin "b" wins
	require.NoError(t, err)
	_, err = a.Merge(wb)
	require.NoError(t, err)
	_, err = b.Merge(wa)
	require.NoError(t, err)
	ga, _ := a.Get("default/qwen")
	gb, _ := b.Get("default/qwen")
	assert.Equal(t, 3, ga.Replicas)
	assert.Equal(t, ga, gb)

	// An edit made after seeing the other wins, whoever made it: the Lamport clock moved on.
	in, wa2, err := a.Put(want("qwen", 1))
	require.NoError(t, err)
	assert.Greater(t, in.Version, gb.Version)
	news, err := b.Merge(wa2)
	require.NoError(t, err)
	assert.Contains(t, news, "default/qwen", "news to gossip on")
	gb, _ = b.Get("default/qwen")
	assert.Equal(t, 1, gb.Replicas)
	// The same merge again is no news: gossip stops.
	news, err = b.Merge(wa2)
	require.NoError(t, err)
	assert.Empty(t, news)
}

func TestATombstoneOutlivesAMemberThatMissedIt(t *testing.T) {
	a, _ := Open("", "a")
	b, _ := Open("", "b")
	_, w, _ := a.Put(want("qwen", 1))
	_, _ = b.Merge(w)
	del := want("qwen", 1)
	del.Deleted = true
	_, _, err := a.Put(del)
	require.NoError(t, err)
	// b never heard of the deletion and pushes its whole set: the tombstone stays.
	_, err = a.Merge(b.Full())
	require.NoError(t, err)
	assert.Empty(t, a.Live())
	_, err = b.Merge(a.Full())
	require.NoError(t, err)
	assert.Empty(t, b.Live())
	require.Len(t, b.All(), 1)
	assert.True(t, b.All()[0].Deleted)
}

func TestIntentsSurviveARestartAndAbsurdCountsAreClamped(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, "a")
	require.NoError(t, err)
	in, _, err := s.Put(want("qwen", 2))
	require.NoError(t, err)
	again, err := Open(dir, "a")
	require.NoError(t, err)
	got, ok := again.Get("default/qwen")
	require.True(t, ok)
	assert.Equal(t, in.Version, got.Version)
	// The clock goes on from what was kept: the next edit is newer.
	next, _, err := again.Put(want("qwen", 1))
	require.NoError(t, err)
	assert.True(t, next.Newer(in))

	// Another member says a thousand replicas, or none: every member reads the same bound.
	other := want("big", 1000)
	other.Version, other.Origin = 1, "x"
	none := want("none", -5)
	none.Version, none.Origin = 1, "x"
	_, err = again.Merge(Encode([]api.Intent{other, none}))
	require.NoError(t, err)
	big, _ := again.Get("default/big")
	assert.Equal(t, api.MaxReplicas, big.Replicas)
	n, _ := again.Get("default/none")
	assert.Equal(t, 1, n.Replicas)
}

func TestBadIntentsAreDroppedAndBadFilesRefused(t *testing.T) {
	s, _ := Open("", "a")
	bad := []api.Intent{{PlacementRequest: api.PlacementRequest{Namespace: "Bad NS!", Name: "x", Source: "ollama://x"}, Version: 1, Origin: "x"},
		{PlacementRequest: api.PlacementRequest{Namespace: "default", Source: "ollama://x"}, Version: 1, Origin: "x"}}
	news, err := s.Merge(Encode(bad))
	require.NoError(t, err)
	assert.Empty(t, news)
	assert.Empty(t, s.All())
	_, err = s.Merge([]byte{9, '[', ']'})
	assert.ErrorContains(t, err, "unknown encoding")
	_, _, err = s.Put(api.Intent{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: "x"}})
	assert.ErrorContains(t, err, "no model name or source")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, File), []byte("{not json"), 0o600))
	_, err = Open(dir, "a")
	assert.ErrorContains(t, err, "reading intents")
}
