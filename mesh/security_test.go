package mesh

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/streamguard"
)

func findingWith(r api.DoctorReport, problem string) (api.Finding, bool) {
	for _, f := range r.Findings {
		if strings.Contains(f.Problem, problem) {
			return f, true
		}
	}
	return api.Finding{}, false
}

// wrongKey checks that a member holding another secret neither joins nor reads anything, and
// that the good side's doctor says why.
func wrongKey(t *testing.T, good []*Mesh, bad *Mesh) {
	require.NoError(t, good[0].SetLocal(hostOf(1<<30), []api.Placement{placement("p1", "secret-model", api.StateReady)}))
	// Long enough for many join attempts, gossip rounds and push/pulls of the local profile.
	require.Never(t, func() bool {
		if bad.Members() > 1 || len(bad.View().Members) > 1 {
			return true
		}
		bad.mu.Lock()
		docs := len(bad.docs)
		bad.mu.Unlock()
		if docs > 0 {
			return true
		}
		for _, g := range good {
			if _, ok := g.View().Member(bad.LocalNode()); ok {
				return true
			}
		}
		return false
	}, 1500*time.Millisecond, 20*time.Millisecond, "a member with another secret got in or read something")

	var f api.Finding
	require.Eventually(t, func() bool {
		var ok bool
		f, ok = findingWith(good[0].Doctor(context.Background()), "belongs to another mesh")
		return ok
	}, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, api.SeverityError, f.Severity)
	require.Contains(t, f.Fix, "check the join string")

	r := bad.Doctor(context.Background())
	bf, ok := findingWith(r, "rejected us")
	if !ok {
		bf, ok = findingWith(r, "hung up on us")
	}
	require.True(t, ok, "the outsider's doctor explains too: %+v", r.Findings)
	require.Contains(t, bf.Fix, "check the join string")
}

func TestAnotherSecretCanNeitherJoinNorRead(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "formed", allAlive("a", "b"))

	cfg, _ := c.config("intruder", api.RoleAgent)
	cfg.Secret = make([]byte, api.SecretSize) // all zeros: another mesh's secret
	intruder := c.start(cfg)
	wrongKey(t, []*Mesh{a, b}, intruder)
}

func TestAnotherMeshIDIsReported(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	cfg, _ := c.config("stranger", api.RoleAgent)
	cfg.MeshID = "other"
	stranger := c.start(cfg)
	var f api.Finding
	require.Eventually(t, func() bool {
		var ok bool
		f, ok = findingWith(a.Doctor(context.Background()), "belongs to another mesh")
		return ok
	}, 5*time.Second, 20*time.Millisecond)
	require.Contains(t, f.Fix, "check the join string")
	require.Equal(t, 1, a.Members())
	require.Equal(t, 1, stranger.Members())
}

func TestAnotherSecretOnRealSockets(t *testing.T) {
	a := startReal(t, "a", api.RoleAgent)
	b := startReal(t, "b", api.RoleAgent, a.GossipAddr())
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "formed over real sockets", allAlive("a", "b"))
	intruder := startForeign(t, "intruder", a.GossipAddr())
	wrongKey(t, []*Mesh{a, b}, intruder)
}

func TestDuplicateNamesAreReportedNotMerged(t *testing.T) {
	c := newCluster(t)
	seed := c.add("seed", api.RoleAgent)
	first := c.add("pi", api.RoleAgent)
	waitFor(t, 10*time.Second, []*Mesh{seed}, "first pi joined", allAlive("pi"))
	events := eventsOf(t, seed)

	cfg, _ := c.config("pi", api.RoleAgent) // a cloned disk image: same name, another address
	second := c.start(cfg)
	require.Eventually(t, func() bool {
		_, ok := findingWith(seed.Doctor(context.Background()), `two nodes claim the name "pi"`)
		return ok
	}, 5*time.Second, 20*time.Millisecond)
	f, _ := findingWith(seed.Doctor(context.Background()), `two nodes claim the name "pi"`)
	require.Contains(t, f.Problem, first.GossipAddr())
	require.Contains(t, f.Problem, second.GossipAddr())
	require.Contains(t, f.Fix, "node-name")
	require.Eventually(t, func() bool { return hasEvent(events(), "pi", "name conflict") }, time.Second, 10*time.Millisecond)

	v := seed.View()
	mb, ok := v.Member("pi")
	require.True(t, ok)
	require.Equal(t, first.GossipAddr(), mb.Addr, "the first keeps the name; the second is not merged into it")
	require.Contains(t, mb.Reason, "name also claimed")
	require.Len(t, v.Members, 2)
}

// TestGossipDoesNotNameTheMesh: what a member sends on the wire carries a label derived from
// the secret, never the mesh id, so a neighbour learns nothing to aim forged mDNS answers or
// streams with.
func TestGossipDoesNotNameTheMesh(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 512)
		n, _ := io.ReadAtLeast(c, b, 64)
		got <- b[:n]
	}()
	const id = "kitchen-mesh-7f3a"
	m, err := Start(context.Background(), Config{
		MeshID: id, Secret: testSecret, NodeName: "a", Role: api.RoleConsole, Profile: ProfileLocal,
		BindAddr: "127.0.0.1", Seeds: []string{ln.Addr().String()}, Log: testLog(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { m.Shutdown() })
	var b []byte
	select {
	case b = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the member never dialled its seed")
	}
	require.NotContains(t, string(b), id, "the mesh id goes out in clear")
	label := api.GossipLabel(id, testSecret)
	require.Equal(t, append([]byte{streamguard.HasLabelMsg, byte(len(label))}, label...), b[:2+len(label)])
	require.NotEqual(t, label, api.GossipLabel(id, make([]byte, api.SecretSize)), "another secret, another label")
	require.NotEqual(t, label, api.GossipLabel("other", testSecret), "another mesh id, another label")
}
