package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// A member that joins after a host crashed and another left sees them as the others do —
// dead and left, the dead one's placements unavailable — not missing: a headless command is
// such a member every time it runs.
func TestNewcomerSeesMembersAlreadyGone(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	victim := c.add("victim", api.RoleAgent)
	leaver := c.add("leaver", api.RoleAgent)
	require.NoError(t, victim.SetLocal(hostOf(1<<30), []api.Placement{placement("p1", "llama3", api.StateReady)}))
	waitFor(t, 10*time.Second, []*Mesh{a}, "victim's model ready", func(v View) bool { return len(v.Ready("default", "llama3")) == 1 })

	require.NoError(t, victim.Shutdown()) // a crash
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, leaver.Close(ctx))
	waitFor(t, 10*time.Second, []*Mesh{a}, "victim dead, leaver left", func(v View) bool {
		return liveness(v, "victim") == api.Dead && liveness(v, "leaver") == api.Left
	})

	// Joined only once its events are watched, so none is missed.
	cfg, _ := c.config("fresh", api.RoleConsole)
	cfg.Seeds = nil
	fresh := c.start(cfg)
	events := eventsOf(t, fresh)
	fresh.found(discovery.Peer{GossipAddr: c.seed, Via: discovery.ViaSeed})
	waitFor(t, 10*time.Second, []*Mesh{fresh}, "the newcomer sees the victim dead and the leaver left", func(v View) bool {
		return liveness(v, "a") == api.Alive && liveness(v, "victim") == api.Dead && liveness(v, "leaver") == api.Left
	})
	v := fresh.View()
	mb, _ := v.Member("victim")
	require.Len(t, mb.Placements, 1)
	assert.Equal(t, api.StateUnavailable, mb.Placements[0].State)
	assert.Equal(t, "victim.test:7777", mb.Host.APIAddr, "what the victim advertised, for the doctor and the user")
	assert.Empty(t, v.Ready("default", "llama3"))
	if !assert.Eventually(t, func() bool { return hasEvent(events(), "victim", "dead") }, 2*time.Second, 10*time.Millisecond,
		"the newcomer announces the death it was told of") {
		t.Fatalf("its events: %+v", events())
	}

	// The victim comes back under its name: the newcomer's own memberlist hears it, and that
	// overrides what it was told.
	c.add("victim", api.RoleAgent)
	waitFor(t, 10*time.Second, []*Mesh{fresh, a}, "the victim is back", func(v View) bool { return liveness(v, "victim") == api.Alive })
}

// A member that leaves while its join is in flight leaves once the join is through, so the
// peer that heard of it sees it leave, not die: Leave waits for the join. Without that wait,
// a member closed right after it started (a headless command, a test) left before its join's
// answer came, told no one, and its peer, which had heard of it, saw it die.
func TestLeaveWaitsForAJoinInFlight(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	cfg, tr := c.config("leaver", api.RoleAgent)
	dialing, release := make(chan struct{}, 1), make(chan struct{})
	tr.GateDials(func() {
		select {
		case dialing <- struct{}{}:
		default:
		}
		<-release
	})
	leaver := c.start(cfg)
	select {
	case <-dialing: // the join's push/pull is on its way
	case <-time.After(10 * time.Second):
		t.Fatal("the leaver never began its join")
	}
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- leaver.Close(ctx)
	}()
	require.Eventually(t, leaver.leaving.Load, 5*time.Second, time.Millisecond, "Close began its leave")
	close(release) // the join goes through while the leave waits
	require.NoError(t, <-closed)
	waitFor(t, 10*time.Second, []*Mesh{a}, "a sees the leaver left", func(v View) bool { return liveness(v, "leaver") == api.Left })
}

// acceptGone takes one record, as a push/pull does.
func (m *Mesh) acceptGone(g goneRecord) {
	m.mu.Lock()
	changed := m.acceptGoneLocked(g, time.Now())
	m.mu.Unlock()
	if changed {
		signal(m.changed)
	}
}

// A suspicion heard from a peer, with no refutation our memberlist hears, ends in a death; it
// never quietly turns back into "alive".
func TestHearsaySuspicionTimesOutDead(t *testing.T) {
	c := newCluster(t)
	m := c.add("m", api.RoleAgent)
	m.acceptGone(goneRecord{State: api.Suspect, Node: "ghost", Addr: "10.0.0.9:7946", Age: 0, Seq: 1})
	require.Equal(t, api.Suspect, liveness(m.View(), "ghost"))
	waitFor(t, 10*time.Second, []*Mesh{m}, "ghost dead", func(v View) bool { return liveness(v, "ghost") == api.Dead })
	// A record too old to keep is dropped, and one about ourselves ignored.
	m.acceptGone(goneRecord{State: api.Dead, Node: "old", Addr: "10.0.0.8:7946", Age: 24 * time.Hour})
	m.acceptGone(goneRecord{State: api.Dead, Node: "m", Addr: "10.0.0.7:7946"})
	v := m.View()
	_, ok := v.Member("old")
	assert.False(t, ok)
	assert.Equal(t, api.Alive, liveness(v, "m"))
}

func TestGoneRecordsRoundTripAndRefuseJunk(t *testing.T) {
	s := pushState{
		docs: [][]byte{[]byte("doc")},
		gone: []goneRecord{{State: api.Dead, Node: "x", Addr: "10.0.0.1:7946", Meta: []byte{1, 2}, Age: 1500 * time.Millisecond, Seq: 7}},
	}
	got, err := decodeState(encodeState(s))
	require.NoError(t, err)
	assert.Equal(t, s, got)
	for name, g := range map[string]goneRecord{
		"no name":     {State: api.Dead, Addr: "10.0.0.1:7946"},
		"long name":   {State: api.Dead, Node: string(make([]byte, maxNodeName+1)), Addr: "10.0.0.1:7946"},
		"bad address": {State: api.Dead, Node: "x", Addr: "nowhere"},
		"huge meta":   {State: api.Dead, Node: "x", Addr: "10.0.0.1:7946", Meta: make([]byte, 600)},
		"bad state":   {State: api.Alive, Node: "x", Addr: "10.0.0.1:7946"},
	} {
		_, err := decodeState(encodeState(pushState{gone: []goneRecord{g}}))
		assert.Error(t, err, name)
	}
}
