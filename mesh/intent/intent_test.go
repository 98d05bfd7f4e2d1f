package intent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	_, err = again.Merge(encode(wire{Intents: []api.Intent{other, none}}))
	require.NoError(t, err)
	big, _ := again.Get("default/big")
	assert.Equal(t, api.MaxReplicas, big.Replicas)
	n, _ := again.Get("default/none")
	assert.Equal(t, 1, n.Replicas)
}

func TestBadIntentsAreDroppedAndBadFilesRefused(t *testing.T) {
	s, _ := Open("", "a")
	bad := []api.Intent{{PlacementRequest: api.PlacementRequest{Namespace: "Bad NS!", Name: "x", Source: "ollama://x"}, Version: 1, Origin: "x"},
		{PlacementRequest: api.PlacementRequest{Namespace: "default", Source: "ollama://x"}, Version: 1, Origin: "x"},
		{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: "x", Source: "ollama://x", Labels: map[string]string{"k": "a b"}}, Version: 1, Origin: "x"}}
	news, err := s.Merge(encode(wire{Intents: bad}))
	require.NoError(t, err)
	assert.Empty(t, news)
	assert.Empty(t, s.All())
	_, err = s.Merge([]byte{9, '{', '}'})
	assert.ErrorContains(t, err, "unknown encoding")
	_, _, err = s.Put(api.Intent{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: "x"}})
	assert.ErrorContains(t, err, "no model name or source")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, File), []byte("{not json"), 0o600))
	_, err = Open(dir, "a")
	assert.ErrorContains(t, err, "reading intents")
}

// clock is a hand-moved clock for a store.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func openAt(t *testing.T, dir, node string, c *clock) *Store {
	t.Helper()
	s, err := openWith(dir, node, c.now)
	require.NoError(t, err)
	return s
}

func TestATombstoneIsDroppedAfterTheHorizonAndNotTakenBack(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := openAt(t, "", "a", c)
	b := openAt(t, "", "b", c)
	_, w, err := a.Put(want("qwen", 1))
	require.NoError(t, err)
	_, _ = b.Merge(w)
	del := want("qwen", 1)
	del.Deleted = true
	_, wd, err := a.Put(del)
	require.NoError(t, err)
	_, _ = b.Merge(wd)

	c.t = c.t.Add(Horizon - time.Minute)
	require.Len(t, a.All(), 1, "kept within the horizon")
	c.t = c.t.Add(2 * time.Minute)
	_ = a.Full()
	assert.Empty(t, a.All(), "dropped past the horizon")
	// b still holds it and pushes it: an aged tombstone is not taken back.
	news, err := a.Merge(encode(wire{Full: true, Intents: []api.Intent{mustGet(t, b, "default/qwen")}}))
	require.NoError(t, err)
	assert.Empty(t, news)
	assert.Empty(t, a.All())
}

func mustGet(t *testing.T, s *Store, key string) api.Intent {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.items[key]
	require.True(t, ok, key)
	return in
}

// A member off for longer than the horizon comes back holding an intent deleted meanwhile,
// whose tombstone is gone: it does not bring it back, and drops it itself.
func TestAMemberBackAfterTheHorizonCannotResurrectADeletedIntent(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	da, db := t.TempDir(), t.TempDir()
	a := openAt(t, da, "a", c)
	b := openAt(t, db, "b", c)
	_, w, err := a.Put(want("qwen", 1))
	require.NoError(t, err)
	_, w2, err := a.Put(want("llama", 1))
	require.NoError(t, err)
	_, _ = b.Merge(w)
	_, _ = b.Merge(w2)
	_, _ = b.Merge(a.Full())
	_, _ = a.Merge(b.Full())

	// b goes off; a, running alone, deletes qwen; a day and more later its tombstone is gone.
	del := want("qwen", 1)
	del.Deleted = true
	_, _, err = a.Put(del)
	require.NoError(t, err)
	for range 30 { // a runs: its keeper looks, and it notes so hourly
		c.t = c.t.Add(time.Hour)
		_ = a.All()
	}
	require.Len(t, a.All(), 1, "only llama is left")

	b = openAt(t, db, "b", c) // back after 30 h: not settled
	gone := mustGet(t, b, "default/qwen")
	a = openAt(t, da, "a", c) // a restarted too, but it was running: settled
	news, err := a.Merge(b.Full())
	require.NoError(t, err)
	assert.Empty(t, news)
	_, ok := a.Get("default/qwen")
	assert.False(t, ok, "a does not take back what it deleted")
	_, err = b.Merge(a.Full())
	require.NoError(t, err)
	_, ok = b.Get("default/qwen")
	assert.False(t, ok, "b drops what the mesh forgot")
	_, ok = b.Get("default/llama")
	assert.True(t, ok, "and keeps what the mesh has")

	// A new member takes the settled set whole, old intents too, and is settled then: b's
	// copy of the deleted qwen, pushed later, is refused.
	n := openAt(t, "", "n", c)
	_, err = n.Merge(a.Full())
	require.NoError(t, err)
	_, ok = n.Get("default/llama")
	assert.True(t, ok, "a new member takes what a settled one has, however old")
	_, err = n.Merge(encode(wire{Intents: []api.Intent{gone}}))
	require.NoError(t, err)
	_, ok = n.Get("default/qwen")
	assert.False(t, ok)

	// An intent made within the horizon by b merges as always.
	_, wn, err := b.Put(want("phi", 1))
	require.NoError(t, err)
	_, err = a.Merge(wn)
	require.NoError(t, err)
	_, ok = a.Get("default/phi")
	assert.True(t, ok)
}

// When the whole mesh was off past the horizon, no member knows better: nothing is dropped.
func TestTheWholeMeshBackAfterTheHorizonKeepsItsIntents(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	da, db := t.TempDir(), t.TempDir()
	a := openAt(t, da, "a", c)
	_, w, err := a.Put(want("qwen", 1))
	require.NoError(t, err)
	b := openAt(t, db, "b", c)
	_, _ = b.Merge(w)
	c.t = c.t.Add(3 * Horizon)
	a = openAt(t, da, "a", c)
	fresh := openAt(t, "", "c", c) // a new member: not settled either
	_, err = fresh.Merge(a.Full())
	require.NoError(t, err)
	_, err = a.Merge(fresh.Full())
	require.NoError(t, err)
	b = openAt(t, db, "b", c)
	_, err = b.Merge(a.Full())
	require.NoError(t, err)
	for _, s := range []*Store{a, b, fresh} {
		_, ok := s.Get("default/qwen")
		assert.True(t, ok)
	}
}

func TestTheSetIsBoundedInCountAndBytes(t *testing.T) {
	s, _ := Open("", "a")
	huge := want("huge", 1)
	huge.Args = []string{strings.Repeat("x", MaxIntentBytes)}
	_, _, err := s.Put(huge)
	assert.ErrorContains(t, err, "bytes, at most")
	for i := range MaxIntents {
		_, _, err := s.Put(want(fmt.Sprintf("m%d", i), 1))
		require.NoError(t, err)
	}
	_, _, err = s.Put(want("onemore", 1))
	var ae *api.Error
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, api.CodeTooBusy, ae.Code)
	assert.Contains(t, ae.Message, "delete some first")
	_, _, err = s.Put(want("m1", 2)) // an edit of one held still fits
	require.NoError(t, err)
	// Another member's news past the bound is not taken.
	other := want("other", 1)
	other.Version, other.Origin, other.UpdatedAt = 1, "x", time.Now()
	news, err := s.Merge(encode(wire{Intents: []api.Intent{other}}))
	require.NoError(t, err)
	assert.Empty(t, news)

	// Bytes bound the set before the count does when intents are big.
	b, _ := Open("", "b")
	big := func(i int) api.Intent {
		in := want(fmt.Sprintf("b%d", i), 1)
		in.Args = []string{strings.Repeat("y", MaxIntentBytes-400)}
		return in
	}
	var i int
	for ; ; i++ {
		if _, _, err = b.Put(big(i)); err != nil {
			break
		}
	}
	assert.ErrorContains(t, err, "over the")
	assert.Less(t, i, MaxIntents)
	assert.LessOrEqual(t, len(b.Full()), maxWire)
}
