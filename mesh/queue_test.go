package mesh

import (
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

// namedBroadcast is a broadcast that replaces any queued one of its name, as memberlist's own
// alive messages (by node) and our documents ("doc:<node>") do.
type namedBroadcast struct{ name, msg string }

func (b namedBroadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b namedBroadcast) Name() string                          { return b.name }
func (b namedBroadcast) Message() []byte                       { return []byte(b.msg) }
func (b namedBroadcast) Finished()                             {}

// TestQueueKeepsEveryBroadcast: memberlist's TransmitLimitedQueue (used by memberlist for its
// alive messages and by us for documents and notices) lost a message when one replaced the only
// one queued: the queue, empty for a moment, restarted its ids, so a later message of the same
// length and tier got the same id and took its place in the tree. It is how a joining agent's
// latest metadata was lost (it publishes twice before its peer is known; its alive message
// about the peer then took the place of its own), so the peer kept its first, empty metadata
// and never asked for its document: 5–9 joins in 20 of two agents on loopback. third_party/memberlist keeps
// the ids going (hashicorp/memberlist#263).
func TestQueueKeepsEveryBroadcast(t *testing.T) {
	q := &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 2 }, RetransmitMult: 4}
	// A member's alive message at its start, then two updates while it is alone (its
	// publishes before its join went through), each replacing the only one queued; then its
	// alive message about the peer it joined, of the same length.
	q.QueueBroadcast(namedBroadcast{"b", "b's alive, first"})
	q.QueueBroadcast(namedBroadcast{"b", "b's alive, again"})
	q.QueueBroadcast(namedBroadcast{"b", "b's alive, next!"})
	q.QueueBroadcast(namedBroadcast{"a", "a's alive, same!"})
	require.Equal(t, 2, q.NumQueued())
	var got []string
	for _, m := range q.GetBroadcasts(0, 1400) {
		got = append(got, string(m))
	}
	require.ElementsMatch(t, []string{"b's alive, next!", "a's alive, same!"}, got)
}
