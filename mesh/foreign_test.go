package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// A finding that gossip from an address belongs to another mesh ends when its cause does: once
// that traffic stops and a healthy member at the address answers our probes, within seconds —
// not when the finding's ten minutes (one here, the local profile's) run out (issue 42).
func TestForeignFindingEndsWithItsCause(t *testing.T) {
	a := startReal(t, "a", api.RoleAgent)
	b := startReal(t, "b", api.RoleAgent, a.GossipAddr())
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "formed over real sockets", allAlive("a", "b"))
	// Another mesh's member at the same address as b (127.0.0.1), trying to join a.
	intruder := startForeign(t, "intruder", a.GossipAddr())
	require.Eventually(t, func() bool {
		_, ok := findingWith(a.Doctor(context.Background()), "gossip from 127.0.0.1")
		return ok
	}, 10*time.Second, 20*time.Millisecond, "the other mesh's traffic is a finding")
	require.NoError(t, intruder.Shutdown())
	stopped := time.Now()
	require.Eventually(t, func() bool {
		_, ok := findingWith(a.Doctor(context.Background()), "gossip from 127.0.0.1")
		return !ok
	}, 20*time.Second, 50*time.Millisecond, "the finding outlived its cause while b, at that address, answers")
	t.Logf("the finding ended %s after the other mesh's member stopped", time.Since(stopped).Round(100*time.Millisecond))
	r := a.Doctor(context.Background())
	require.Empty(t, r.Findings, "nothing else is wrong: %+v", r.Findings)
}
