package mesh

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/doctor"
	"github.com/llmkube/mesh/mesh/statedoc"
)

func TestMembersJoinAndShareState(t *testing.T) {
	c := newCluster(t)
	var agents []*Mesh
	for i := range 4 {
		agents = append(agents, c.add(fmt.Sprintf("agent-%d", i), api.RoleAgent))
	}
	console := c.add("console", api.RoleConsole)
	all := append(append([]*Mesh{}, agents...), console)

	for i, a := range agents {
		require.NoError(t, a.SetLocal(hostOf(int64(i)<<30), []api.Placement{placement(fmt.Sprintf("p%d", i), "qwen2:1.5b", api.StateReady)}))
	}
	waitFor(t, 10*time.Second, all, "every member sees every agent's host and placement", func(v View) bool {
		if len(v.Members) != 5 || !allAlive("agent-0", "agent-1", "agent-2", "agent-3", "console")(v) {
			return false
		}
		return len(v.Ready("default", "qwen2:1.5b")) == 4
	})

	v := console.View()
	require.Equal(t, "test", v.Mesh)
	require.Equal(t, "console", v.Self)
	require.Len(t, v.Agents(), 4, "a console is never a placement target")
	cm, ok := v.Member("console")
	require.True(t, ok)
	require.Equal(t, api.RoleConsole, cm.Role)
	require.Nil(t, cm.Host)
	a2, ok := v.Member("agent-2")
	require.True(t, ok)
	require.Equal(t, api.RoleAgent, a2.Role)
	require.Equal(t, int64(2<<30), a2.Host.Memory.Committed)
	require.Equal(t, "agent-2.test:7777", a2.Host.APIAddr)
	require.Equal(t, "Hailo-10H", a2.Host.Accelerators[0].Name)
	require.Len(t, a2.Placements, 1)
	require.Equal(t, "agent-2", a2.Placements[0].Host)
	require.Len(t, v.Placements(), 4)
	require.Empty(t, v.Ready("team-b", "qwen2:1.5b"))
	require.Len(t, v.Ready("", "qwen2:1.5b"), 4)
	require.Equal(t, 5, console.Members())
	require.Error(t, console.SetLocal(hostOf(0), nil), "a console publishes nothing")
}

func TestCapacityChangeReachesEveryMember(t *testing.T) {
	c := newCluster(t)
	var all []*Mesh
	for i := range 5 {
		all = append(all, c.add(fmt.Sprintf("n%d", i), api.RoleAgent))
	}
	console := c.add("console", api.RoleConsole)
	all = append(all, console)
	waitFor(t, 10*time.Second, all, "formed", func(v View) bool { return len(v.Members) == 6 })

	require.NoError(t, all[0].SetLocal(hostOf(1<<30), nil))
	committed := func(want int64) func(View) bool {
		return func(v View) bool {
			mb, ok := v.Member("n0")
			return ok && mb.Host != nil && mb.Host.Memory.Committed == want
		}
	}
	waitFor(t, 5*time.Second, all, "first capacity", committed(1<<30))
	require.NoError(t, all[0].SetLocal(hostOf(3<<30), nil))
	waitFor(t, 5*time.Second, all, "changed capacity", committed(3<<30))
}

func TestSetLocalPublishesOnlyWhatMatters(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	gen := func() uint64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.local.gen
	}
	h := hostOf(1 << 30)
	p := placement("p1", "m", api.StatePulling)
	p.Progress = 0.10
	require.NoError(t, a.SetLocal(h, []api.Placement{p}))
	g0 := gen()

	same := h
	same.Memory.Available += 50 << 20 // page-cache wobble
	same.Generation++
	q := p
	q.Progress = 0.12
	q.UpdatedAt = time.Now()
	q.LastUsed = time.Now()
	require.NoError(t, a.SetLocal(same, []api.Placement{q}))
	require.Equal(t, g0, gen(), "wobble is not published")

	q.Progress = 0.16
	require.NoError(t, a.SetLocal(same, []api.Placement{q}))
	require.Greater(t, gen(), g0, "5 points of progress are published")
	g1 := gen()

	same.Memory.Available += 300 << 20
	require.NoError(t, a.SetLocal(same, []api.Placement{q}))
	require.Greater(t, gen(), g1, "a large change of available memory is published")
	g2 := gen()

	q.State = api.StateLoading
	require.NoError(t, a.SetLocal(same, []api.Placement{q}))
	require.Greater(t, gen(), g2, "a state change is published")
	g3 := gen()

	same.Memory.Committed++
	require.NoError(t, a.SetLocal(same, []api.Placement{q}))
	require.Greater(t, gen(), g3, "any change of committed memory is published")
	g4 := gen()

	require.NoError(t, a.SetLocal(same, nil))
	require.Greater(t, gen(), g4, "a removed placement is published")
}

func TestHardStopMarksSuspectThenDeadAndPlacementsUnavailable(t *testing.T) {
	c := newCluster(t)
	var all []*Mesh
	for i := range 4 {
		all = append(all, c.add(fmt.Sprintf("n%d", i), api.RoleAgent))
	}
	victim, watchers := all[3], all[:3]
	require.NoError(t, victim.SetLocal(hostOf(1<<30), []api.Placement{placement("p1", "llama3", api.StateReady)}))
	waitFor(t, 10*time.Second, watchers, "victim's model ready everywhere", func(v View) bool {
		return len(v.Ready("default", "llama3")) == 1
	})
	seen := history(t, watchers[0], "n3")
	events := eventsOf(t, watchers[0])

	require.NoError(t, victim.Shutdown()) // a crash: no leave
	waitFor(t, 10*time.Second, watchers, "victim dead everywhere", func(v View) bool { return liveness(v, "n3") == api.Dead })

	require.Contains(t, seen(), api.Suspect, "the failure detector's suspicion is shown before the death")
	v := watchers[1].View()
	require.Empty(t, v.Ready("default", "llama3"))
	mb, _ := v.Member("n3")
	require.Len(t, mb.Placements, 1)
	p := mb.Placements[0]
	require.Equal(t, api.StateUnavailable, p.State)
	was, ok := WasState(p)
	require.True(t, ok)
	require.Equal(t, api.StateReady, was)
	require.Eventually(t, func() bool {
		ev := events()
		return hasEvent(ev, "n3", "suspect") && hasEvent(ev, "n3", "dead")
	}, 2*time.Second, 10*time.Millisecond)
}

func TestGracefulLeaveIsShownAsLeft(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	pi := c.add("pi", api.RoleAgent)
	waitFor(t, 10*time.Second, []*Mesh{a, b, pi}, "formed", allAlive("a", "b", "pi"))
	events := eventsOf(t, a)
	seen := history(t, a, "pi")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, pi.Close(ctx))
	<-pi.Done()
	waitFor(t, 5*time.Second, []*Mesh{a, b}, "pi left", func(v View) bool { return liveness(v, "pi") == api.Left })
	require.NotContains(t, seen(), api.Dead, "a graceful leave never looks like a death")
	require.Eventually(t, func() bool { return hasEvent(events(), "pi", "left") }, time.Second, 10*time.Millisecond)
	require.False(t, hasEvent(events(), "pi", "dead"))
	require.NoError(t, pi.Close(ctx), "closing twice is fine")
}

// A console that comes and goes (each headless `mesh …` command is one) leaves no trace: no
// event of its arrival or leave, and it is gone from the view once it has left.
func TestConsoleLeavesWithoutATrace(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	events := eventsOf(t, a)
	console := c.add("console", api.RoleConsole)
	waitFor(t, 10*time.Second, []*Mesh{a, console}, "formed", allAlive("a", "console"))
	seen := history(t, a, "console")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, console.Close(ctx))
	<-console.Done()
	waitFor(t, 5*time.Second, []*Mesh{a}, "console gone", func(v View) bool { return liveness(v, "console") == "" })
	require.NotContains(t, seen(), api.Dead, "a graceful leave never looks like a death")
	require.NotContains(t, seen(), api.Left, "never listed as left")
	for _, e := range events() {
		assert.NotEqual(t, "console", e.Member, "an event about the console: %+v", e)
	}
}

func TestStartCtxEndLeavesGracefully(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	cfg, _ := c.config("console", api.RoleConsole)
	ctx, cancel := context.WithCancel(context.Background())
	console, err := Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { console.Shutdown() })
	waitFor(t, 10*time.Second, []*Mesh{a}, "console joined", allAlive("console"))
	cancel()
	select {
	case <-console.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the member did not shut down when its context ended")
	}
	waitFor(t, 5*time.Second, []*Mesh{a}, "console gone", func(v View) bool { return liveness(v, "console") == "" })
}

func TestLargeDocumentsTravelOverTCP(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	console := c.add("console", api.RoleConsole)
	waitFor(t, 10*time.Second, []*Mesh{a, b, console}, "formed", allAlive("a", "b", "console"))

	ps := largePlacements()
	require.NoError(t, a.SetLocal(hostOf(1<<30), ps))
	a.mu.Lock()
	size := len(a.docs["a"].wire)
	gossiped := a.members["a"].meta.Flags&flagDocGossiped != 0
	a.mu.Unlock()
	require.Greater(t, size, maxGossipDoc, "the test needs a document too large to gossip")
	require.False(t, gossiped)

	waitFor(t, 5*time.Second, []*Mesh{b, console}, "the large document arrived", func(v View) bool {
		mb, ok := v.Member("a")
		return ok && len(mb.Placements) == 40
	})
	// Changing it again still arrives: the metadata's generation announces it.
	ps[7].State = api.StateFailed
	require.NoError(t, a.SetLocal(hostOf(1<<30), ps))
	waitFor(t, 5*time.Second, []*Mesh{b, console}, "the change arrived", func(v View) bool {
		return len(v.Ready("default", "model-07")) == 0 && len(v.Ready("default", "model-08")) == 1
	})
}

// largePlacements are 40 placements, model-00 to model-39: a document too large to gossip.
func largePlacements() []api.Placement {
	var ps []api.Placement
	for i := range 40 {
		p := placement(fmt.Sprintf("%x", sha256.Sum256([]byte{byte(i)})), fmt.Sprintf("model-%02d", i), api.StateReady)
		p.Source = fmt.Sprintf("hf://owner-%d/repo-%x/file.gguf", i, sha256.Sum256([]byte{byte(i), 1}))
		ps = append(ps, p)
	}
	return ps
}

// TestAForgedDocumentTakesNoNodesPlace: a member with the key gossips, pushes and relays a
// document about another node with the largest generation there is. No member shows it, the
// node's own generation is untouched, and its next change reaches everyone.
func TestAForgedDocumentTakesNoNodesPlace(t *testing.T) {
	a := startReal(t, "a", api.RoleAgent)
	b := startReal(t, "b", api.RoleAgent, a.GossipAddr())
	console := startReal(t, "console", api.RoleConsole, a.GossipAddr())
	evil := startReal(t, "evil", api.RoleAgent, a.GossipAddr())
	all := []*Mesh{a, b, console, evil}
	waitFor(t, 10*time.Second, all, "formed", allAlive("a", "b", "console", "evil"))
	require.NoError(t, a.SetLocal(hostOf(1<<30), []api.Placement{placement("p1", "real", api.StateReady)}))
	waitFor(t, 10*time.Second, all, "a's document everywhere", func(v View) bool { return len(v.Ready("default", "real")) == 1 })
	a.mu.Lock()
	genBefore := a.local.gen
	a.mu.Unlock()

	forged := sampleDoc("a", math.MaxUint64, 1)
	forged.Placements[0].Model = "forged"
	wire := mustEncode(t, forged)
	msg := append([]byte{msgDoc}, wire...)
	evil.mu.Lock()
	evil.docs["a"] = docEntry{doc: forged, wire: wire, hash: statedoc.Hash(wire), at: time.Now()} // for push/pull
	evil.mu.Unlock()
	for range 20 { // gossip, and straight to everyone over TCP
		evil.queue.QueueBroadcast(&broadcast{name: "doc:a", msg: msg})
		for _, m := range []*Mesh{a, b, console} {
			evil.sendTo(m.LocalNode(), m.GossipAddr(), msg)
		}
	}
	c := startReal(t, "c", api.RoleConsole, evil.GossipAddr()) // joins through the forger's push/pull
	require.Never(t, func() bool {
		for _, m := range []*Mesh{a, b, console, c} {
			if len(m.View().Ready("default", "forged")) > 0 {
				return true
			}
		}
		return false
	}, 1500*time.Millisecond, 20*time.Millisecond, "a forged document is shown")
	a.mu.Lock()
	require.Equal(t, genBefore, a.local.gen, "the forgery moved a's generation")
	a.mu.Unlock()

	require.NoError(t, a.SetLocal(hostOf(2<<30), []api.Placement{placement("p2", "next", api.StateReady)}))
	waitFor(t, 10*time.Second, []*Mesh{b, console, c}, "a's next document everywhere", func(v View) bool {
		return len(v.Ready("default", "next")) == 1
	})
}

func TestSubscribersNeverBlockTheMesh(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	slow, cancelSlow := b.Subscribe() // never read until the end
	defer cancelSlow()
	_, cancelEvents := b.SubscribeEvents() // never read at all
	defer cancelEvents()
	for i := range 30 {
		require.NoError(t, a.SetLocal(hostOf(int64(i)<<30), nil))
	}
	waitFor(t, 10*time.Second, []*Mesh{b}, "b follows a despite its idle subscribers", func(v View) bool {
		mb, ok := v.Member("a")
		return ok && mb.Host != nil && mb.Host.Memory.Committed == 29<<30
	})
	require.Eventually(t, func() bool {
		v := <-slow // the latest view, not the first
		mb, ok := v.Member("a")
		return ok && mb.Host != nil && mb.Host.Memory.Committed == 29<<30
	}, 2*time.Second, time.Millisecond)
	cancelSlow()
	// A view sent before the unsubscribe may still be in the channel's one slot; then it is
	// closed (a change after the one awaited: b's view of a settles over several updates).
	_, open := <-slow
	if open {
		_, open = <-slow
	}
	require.False(t, open, "unsubscribing closes the channel")
}

func TestConfigIsValidated(t *testing.T) {
	ctx := context.Background()
	_, err := Start(ctx, Config{MeshID: "Bad ID", Secret: testSecret})
	require.ErrorContains(t, err, "mesh id")
	_, err = Start(ctx, Config{MeshID: "ok", Secret: []byte("short")})
	require.ErrorContains(t, err, "secret")
	_, err = Start(ctx, Config{MeshID: "ok", Secret: testSecret, Role: "boss"})
	require.ErrorContains(t, err, "role")
	_, err = Start(ctx, Config{MeshID: "ok", Secret: testSecret, Profile: "fast"})
	require.ErrorContains(t, err, "profile")
	_, err = Start(ctx, Config{MeshID: "ok", Secret: testSecret, NodeName: "-x-"})
	require.ErrorContains(t, err, "node name")
}

// TestAntiEntropyRepairsLostGossip: a member deaf to UDP (a firewall) misses every gossiped
// document and metadata update, yet push/pull over TCP tells it the newer generation and it
// fetches the document; the members probing it report the blocked UDP.
func TestAntiEntropyRepairsLostGossip(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	cfg, deafTr := c.config("deaf", api.RoleAgent)
	deaf := c.start(cfg)
	waitFor(t, 10*time.Second, []*Mesh{a, b, deaf}, "formed", allAlive("a", "b", "deaf"))

	deafTr.DropPackets(true)
	require.NoError(t, a.SetLocal(hostOf(7<<30), nil))
	waitFor(t, 10*time.Second, []*Mesh{deaf}, "the deaf member got the document over TCP", func(v View) bool {
		mb, ok := v.Member("a")
		return ok && mb.Host != nil && mb.Host.Memory.Committed == 7<<30
	})
	require.Eventually(t, func() bool {
		for _, m := range []*Mesh{a, b} {
			if _, ok := findingWith(m.Doctor(context.Background()), "deaf answers over TCP but not over UDP"); ok {
				return m.GossipStats().ProbesTCPOnly >= doctor.UDPMinSightings
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond)
}

// TestRejoinAfterLeaveThenCrashIsDead: a member that left and came back under the same name
// is alive again, and a later crash shows as a death — never as the old leave.
func TestRejoinAfterLeaveThenCrashIsDead(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	first := c.add("pi", api.RoleAgent)
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "formed", allAlive("a", "b", "pi"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, first.Close(ctx))
	waitFor(t, 5*time.Second, []*Mesh{a, b}, "left", func(v View) bool { return liveness(v, "pi") == api.Left })

	again := c.add("pi", api.RoleAgent)
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "back", allAlive("pi"))
	time.Sleep(300 * time.Millisecond) // a few push/pulls, which carry leave notices of gone members
	require.NoError(t, again.Shutdown())
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "dead, not left", func(v View) bool { return liveness(v, "pi") == api.Dead })
}

func TestStartErrorSaysWhatToDo(t *testing.T) {
	err := startError(errors.New("Failed to get final advertise address: no private IP address found, and explicit IP not provided"))
	require.ErrorContains(t, err, "no private IP address found")
	require.ErrorContains(t, err, "--bind ADDR")
	require.ErrorContains(t, err, "--advertise ADDR")
	require.NotContains(t, startError(errors.New("bind: address already in use")).Error(), "--bind")
}
