// Copyright IBM Corp. 2013, 2026
// SPDX-License-Identifier: MPL-2.0

package memberlist

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// suspicionRecorder records what a SuspicionDelegate is told, as "event node from".
type suspicionRecorder struct{ events []string }

func (r *suspicionRecorder) NotifySuspect(node *Node, from string) {
	r.events = append(r.events, "suspect "+node.Name+" "+from)
}

func (r *suspicionRecorder) NotifyCleared(node *Node) {
	r.events = append(r.events, "cleared "+node.Name)
}

func (r *suspicionRecorder) NotifyRefuting(from string) {
	r.events = append(r.events, "refuting "+from)
}

func TestSuspicionDelegate_SuspectAndCleared(t *testing.T) {
	r := &suspicionRecorder{}
	m := GetMemberlist(t, func(c *Config) {
		c.Suspicion = r
		c.ProbeInterval = time.Hour // the test drives every transition
	})
	defer m.Shutdown()

	a := alive{Node: "test", Addr: []byte{127, 0, 0, 1}, Incarnation: 1, Vsn: m.config.BuildVsnArray()}
	m.aliveNode(&a, nil, false)
	require.Empty(t, r.events, "a node arriving alive is no suspicion")

	m.suspectNode(&suspect{Node: "test", Incarnation: 1, From: "peer"})
	require.Equal(t, StateSuspect, m.getNodeState("test"))
	m.suspectNode(&suspect{Node: "test", Incarnation: 1, From: "other"}) // a confirmation
	require.Equal(t, []string{"suspect test peer"}, r.events, "told once, when the node turns suspect")

	a.Incarnation = 2 // the node refutes
	m.aliveNode(&a, nil, false)
	require.Equal(t, StateAlive, m.getNodeState("test"))
	m.aliveNode(&alive{Node: "test", Addr: []byte{127, 0, 0, 1}, Incarnation: 3, Vsn: m.config.BuildVsnArray()}, nil, false)
	require.Equal(t, []string{"suspect test peer", "cleared test"}, r.events, "a newer alive message about an alive node clears nothing")
}

func TestSuspicionDelegate_Refuting(t *testing.T) {
	r := &suspicionRecorder{}
	m := GetMemberlist(t, func(c *Config) { c.Suspicion = r })
	defer m.Shutdown()

	a := alive{Node: m.config.Name, Addr: []byte{127, 0, 0, 1}, Incarnation: 1, Vsn: m.config.BuildVsnArray()}
	m.aliveNode(&a, nil, true)
	m.suspectNode(&suspect{Node: m.config.Name, Incarnation: 1, From: "peer"})
	require.Equal(t, StateAlive, m.getNodeState(m.config.Name))
	require.Equal(t, []string{"refuting peer"}, r.events)
}

// Every probe of this member's own that gets no ack is told, with this member as the accuser,
// even of a node already suspect; its own suspicion is not told twice.
func TestSuspicionDelegate_OwnProbeFails(t *testing.T) {
	addr1 := getBindAddr()
	r := &suspicionRecorder{}
	m1 := HostMemberlist(addr1.String(), t, func(c *Config) {
		c.Suspicion = r
		c.ProbeTimeout = time.Millisecond
		c.ProbeInterval = 10 * time.Millisecond
		c.DisableTcpPings = true
	})
	defer m1.Shutdown()

	bindPort := m1.config.BindPort
	a1 := alive{Node: addr1.String(), Addr: []byte(addr1), Port: uint16(bindPort), Incarnation: 1, Vsn: m1.config.BuildVsnArray()}
	m1.aliveNode(&a1, nil, true)
	addr2 := getBindAddr() // nothing listens there
	a2 := alive{Node: addr2.String(), Addr: []byte(addr2), Port: uint16(bindPort), Incarnation: 1, Vsn: m1.config.BuildVsnArray()}
	m1.aliveNode(&a2, nil, false)

	m1.probeNode(m1.nodeMap[addr2.String()])
	require.Equal(t, StateSuspect, m1.getNodeState(addr2.String()))
	m1.probeNode(m1.nodeMap[addr2.String()])
	own := "suspect " + addr2.String() + " " + m1.config.Name
	require.Equal(t, []string{own, own}, r.events)
}
