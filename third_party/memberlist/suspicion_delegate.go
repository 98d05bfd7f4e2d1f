// Copyright IBM Corp. 2013, 2026
// SPDX-License-Identifier: MPL-2.0

package memberlist

// SuspicionDelegate is used to follow the failure detector's suspicions as
// this member handles them: a probe that found no sign of life, a suspicion
// that a suspect member refuted, and this member refuting a suspicion of
// itself. memberlist reports nothing of these otherwise but log lines.
//
// The methods are invoked synchronously. NotifyCleared, NotifyRefuting and
// NotifySuspect for another member's suspicion run with the node lock held,
// as the EventDelegate's methods do: they must not block, and must not call
// back into the Memberlist.
type SuspicionDelegate interface {
	// NotifySuspect is invoked when node is suspected of having failed. from
	// is this member's own name when its probe of node got no ack, directly,
	// indirectly or over TCP: then it is invoked for every such probe, even
	// of a node that is suspect already. Otherwise from is the member whose
	// suspect message turned node, alive here, suspect.
	NotifySuspect(node *Node, from string)

	// NotifyCleared is invoked when node, suspect here, is alive again: it
	// refuted the suspicion with a newer incarnation.
	NotifyCleared(node *Node)

	// NotifyRefuting is invoked when this member refutes a suspect message
	// about itself, raised by from.
	NotifyRefuting(from string)
}
