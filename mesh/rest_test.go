package mesh

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// The housekeeper of a mesh at rest plans its next round for when something falls due (on the
// LAN profile the next save, 30 s, or dial-back recheck, a minute), and every change that
// makes work due sooner wakes it. These tests catch a change that does not: each watches what
// the housekeeper has planned (keepDue) while work is pending, on the LAN profile, whose
// far-off rounds would otherwise leave it undone for seconds.

// waitAtRest waits until m's next round is planned more than 5 s ahead: nothing is due.
func waitAtRest(t *testing.T, m *Mesh) {
	t.Helper()
	require.Eventually(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return time.Until(m.keepDue) > 5*time.Second
	}, 2*m.t.saveEvery, 10*time.Millisecond, "%s at rest", m.name)
}

// lateness records work left pending with the next round planned too late: the first time,
// and how often it was seen.
type lateness struct {
	first string
	n     int
}

func (l *lateness) saw(what string, due time.Time) {
	if l.n == 0 {
		l.first = what + ": the next round is due in " + time.Until(due).String()
	}
	l.n++
}

// A crash at rest: the failed probe and the suspicion wake the housekeeper, which then times
// the grace round by round, and the death wakes it to announce it after deadGrace.
func TestMeshAtRestWakesForACrash(t *testing.T) {
	c := newCluster(t)
	c.profile = ProfileLAN
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	c.add("c", api.RoleAgent) // so that a, left with c, is not cut off
	waitFor(t, 10*time.Second, []*Mesh{a}, "b and c alive", allAlive("b", "c"))
	waitAtRest(t, a)

	require.NoError(t, b.Shutdown()) // a crash
	var late lateness
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		mb, now := a.members["b"], time.Now()
		switch {
		case mb.state == api.Suspect && mb.quiet && a.keepDue.After(now.Add(a.t.tick)):
			late.saw("a grace runs", a.keepDue)
		case mb.state == api.Dead && mb.emitted != api.Dead && a.keepDue.After(maxTime(mb.since.Add(a.t.deadGrace), now.Add(a.t.tick))):
			late.saw("a death to announce", a.keepDue)
		}
		return mb.emitted == api.Dead
	}, a.t.saveEvery/2, time.Millisecond, "b's death announced")
	assert.Empty(t, late.first, "seen %d times", late.n)
}

// A changed document at rest: the metadata naming it wakes the housekeeper to fetch it (too
// large to gossip, it is fetched at once).
func TestMeshAtRestFetchesAChangedDocument(t *testing.T) {
	c := newCluster(t)
	c.profile = ProfileLAN
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	waitFor(t, 10*time.Second, []*Mesh{a}, "b alive", allAlive("b"))
	waitAtRest(t, a)

	require.NoError(t, b.SetLocal(hostOf(1<<30), largePlacements()))
	var late lateness
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		mb := a.members["b"]
		wanted := mb.meta.DocHash != "" && a.docs["b"].hash != mb.meta.DocHash
		if wanted && a.keepDue.After(time.Now().Add(a.t.fetchRetry+a.t.tick)) {
			late.saw("a document wanted", a.keepDue)
		}
		return !wanted && a.docs["b"].hash != ""
	}, a.t.saveEvery/2, time.Millisecond, "b's document fetched")
	assert.Empty(t, late.first, "seen %d times", late.n)
}

// A death at rest wakes the rejoiner, which otherwise waits for nothing (no member dead, no
// candidate to ping): it pings the dead member until it answers, and it joins it back.
func TestMeshAtRestRejoinsAMemberThatDied(t *testing.T) {
	c := newCluster(t)
	c.profile = ProfileLAN
	a := c.add("a", api.RoleAgent)
	c.add("b", api.RoleAgent)
	cfg, link := c.config("x", api.RoleAgent)
	c.start(cfg)
	waitFor(t, 10*time.Second, []*Mesh{a}, "b and x alive", allAlive("b", "x"))

	link.Cut(true)
	waitFor(t, 30*time.Second, []*Mesh{a}, "x dead", func(v View) bool { return liveness(v, "x") == api.Dead })
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.rejoins["x"] != nil
	}, a.t.saveEvery/2, time.Millisecond, "a's rejoiner pings x")
	link.Cut(false)
	waitFor(t, 30*time.Second, []*Mesh{a}, "x back", allAlive("b", "x"))
}
