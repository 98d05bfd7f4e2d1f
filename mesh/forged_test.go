package mesh

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// victims listens on n loopback ports that accept and hang up at once, counting connections.
func victims(t *testing.T, n int) ([]string, *atomic.Int64) {
	var hits atomic.Int64
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() })
		addrs[i] = ln.Addr().String()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				hits.Add(1)
				c.Close()
			}
		}()
	}
	return addrs, &hits
}

// TestForgedMDNSAnswersCannotAimTheAgent: a burst of forged mDNS answers carrying the mesh's
// hash, each naming another address of a victim, then one real answer. The agent keeps a
// bounded set of candidates, dials them at a bounded rate, drops those that never answer, and
// still joins the real peer.
func TestForgedMDNSAnswersCannotAimTheAgent(t *testing.T) {
	const forged = 300
	addrs, hits := victims(t, forged)
	real := startReal(t, "real", api.RoleAgent)
	var answers []discovery.Peer
	for i, a := range addrs {
		answers = append(answers, discovery.Peer{Node: fmt.Sprintf("forged-%d", i), MeshHash: api.MeshIDHash("test"), GossipAddr: a, Via: discovery.ViaMDNS, OnLink: true})
	}
	answers = append(answers, discovery.Peer{Node: "real", MeshHash: api.MeshIDHash("test"), GossipAddr: real.GossipAddr(), Via: discovery.ViaMDNS, OnLink: true})

	start := time.Now()
	m, err := Start(context.Background(), Config{
		MeshID: "test", Secret: testSecret, NodeName: "agent", Role: api.RoleAgent, Profile: ProfileLocal,
		BindAddr: "127.0.0.1", APIAddr: "127.0.0.1:1", Log: testLog(), Discovery: &fakeMDNS{peers: answers},
		DialBack: func(context.Context, string) error { return nil },
	})
	require.NoError(t, err)
	t.Cleanup(func() { m.Shutdown() })

	waitFor(t, 10*time.Second, []*Mesh{m}, "the real peer is joined despite the flood", allAlive("real"))
	// Dials stay within the rate, whatever the flood: the burst, then one per interval.
	limit := func() int64 { return int64(mdnsDialBurst) + int64(time.Since(start)/mdnsDialEvery) + 1 }
	t.Logf("%d dials to the victims when the real peer was in; %d forged answers", hits.Load(), forged)
	require.Never(t, func() bool {
		m.mu.Lock()
		n := len(m.candidates)
		m.mu.Unlock()
		return hits.Load() > limit() || n > maxMDNSCandidates
	}, 1500*time.Millisecond, 20*time.Millisecond, "dials to forged addresses exceed the rate, or candidates their bound")
	require.Less(t, hits.Load(), int64(forged), "not every forged address was dialled")

	// An address that never answered is dropped and, answered again, ignored for a while.
	m.mu.Lock()
	var cooled string
	for addr := range m.mdns.cooldown {
		cooled = addr
	}
	m.mu.Unlock()
	require.NotEmpty(t, cooled, "no forged candidate was dropped")
	m.found(discovery.Peer{Node: "again", MeshHash: api.MeshIDHash("test"), GossipAddr: cooled, Via: discovery.ViaMDNS, OnLink: true})
	m.mu.Lock()
	_, back := m.candidates[cooled]
	queuedAgain := slices.ContainsFunc(m.mdns.queue, func(q queued) bool { return q.p.GossipAddr == cooled })
	m.mu.Unlock()
	require.False(t, back || queuedAgain, "a dropped address came back at once")
}
