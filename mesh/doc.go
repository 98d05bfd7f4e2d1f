package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/llmkube/mesh/mesh/statedoc"
)

// Per-node state documents carry what does not fit in node metadata: the placement list with
// states and memory, engine health, measured tokens/s — the agent's whole api.Host. Their
// codec is package statedoc; this file is how they travel and which one a member keeps.
//
// Transport. A document travels in three ways:
//
//  1. Gossip. When an agent's state changes enough to matter (see SetLocal), it bumps the
//     document's generation and, if the encoded document is at most maxGossipDoc bytes, queues
//     it as a named broadcast ("doc:<node>"), so only the latest document of a node is ever in a
//     queue. Every member that learns a newer small document queues it again: the epidemic that
//     gives SWIM its O(log N) rounds (memberlist itself only retransmits what its owner queued).
//  2. TCP. A larger document is never gossiped (it would not fit a UDP packet). The node's
//     metadata carries the document's generation, and metadata travels in memberlist's own
//     alive messages, so the metadata *is* the "generation N available" notice. A member that
//     sees a generation newer than the document it holds asks the owner for it over TCP
//     (memberlist SendReliable); the owner answers the same way. The same rule repairs a
//     missed small document (after a short grace, flagDocGossiped, to let gossip win). Agents
//     also push every new document straight to the consoles over TCP, so a console sees a
//     change within one round trip.
//  3. Anti-entropy. memberlist's push/pull on join carries every document the member holds
//     (LocalState / MergeRemoteState), so a newcomer sees the whole mesh at once. The periodic
//     push/pull carries only the member's own document: memberlist's half of it already
//     carries every member's metadata, hence every document's generation — a digest — and a
//     member that finds a generation newer than its document fetches that document from its
//     owner over TCP (rule 2). Carrying every document every time cost ~0.8 kB/s per member at
//     50 members, most of the 1 kB/s budget; the digest costs a few bytes per member.
//
// Ownership. A node's document comes from that node only, whoever relays it: the node's
// metadata carries the hash of its current document (tagDocHash), and a member keeps a
// document only when the metadata it holds for that node names it. memberlist itself keeps
// each node's metadata as the node last published it (an alive message about a node that
// differs from what the node says is refuted by the node), so a member with the key cannot
// put words in another node's mouth by gossiping a document with a huge generation: the
// document is not the one named, and is never shown. A document that arrives before the
// metadata naming it waits aside (one per node) until it is named; one named but missing is
// fetched from its owner (rule 2). A node ignores documents about itself. Generations still
// order a node's own documents — the wall clock in microseconds, at least one more per
// change — but no member other than the owner moves them, so they are never exhausted.
const (
	maxGossipDoc = 1000 // encoded size up to which a document is gossiped
	maxStateDocs = 4096 // documents in one push/pull state
)

// docEntry is a stored document with the exact bytes it arrived as, so relays forward what
// the owner wrote and every member hashes the same bytes.
type docEntry struct {
	doc  *statedoc.Doc
	wire []byte
	hash string    // statedoc.Hash(wire)
	at   time.Time // when it arrived
	run  uint64    // the start sequence (nodeMeta.Seq) of the metadata that named it
}

// Messages between members (memberlist user messages) start with a type byte.
const (
	msgDoc        = 1 // a state document (wire form)
	msgDocRequest = 2 // "send me the document of node N": node, requester
	msgLive       = 3 // a liveness notice, see liveNotice
	msgShared     = 4 // part of the Shared set (shared.go)
)

// Liveness notices complete what memberlist tells its delegates, which is only join, leave and
// metadata updates: memberlist's Node.State is never filled in v0.7.0 and no delegate hears of
// suspicion. So a member whose memberlist suspects a node (its failure detector logs it) gossips
// a suspect notice; the suspected node, if alive, refutes with an alive notice; a node leaving
// gracefully first gossips a leave notice, which tells a graceful leave from a death. Notices
// are ordered per node by Seq like memberlist's incarnations: a node's own notices (alive,
// leave) carry a new, higher Seq; a suspect notice carries the Seq it suspects, so a refutation
// outranks it and a stale suspicion is ignored.
const (
	liveAlive   = 1
	liveSuspect = 2
	liveLeave   = 3
)

type liveNotice struct {
	Kind byte
	Seq  uint64
	Node string
	From string
}

func encodeLive(n liveNotice) []byte {
	b := []byte{msgLive, n.Kind}
	b = binary.AppendUvarint(b, n.Seq)
	b = appendLenString(b, n.Node)
	return appendLenString(b, n.From)
}

func decodeLive(p []byte) (liveNotice, error) {
	r := reader{b: p}
	n := liveNotice{Kind: r.byte(), Seq: r.uint(), Node: r.str(), From: r.str()}
	if r.err != nil {
		return liveNotice{}, fmt.Errorf("liveness notice: %w", r.err)
	}
	if n.Kind < liveAlive || n.Kind > liveLeave || n.Node == "" {
		return liveNotice{}, errors.New("liveness notice: bad kind or node")
	}
	return n, nil
}

func encodeDocRequest(node, from string) []byte {
	return appendLenString(appendLenString([]byte{msgDocRequest}, node), from)
}

func decodeDocRequest(p []byte) (node, from string, err error) {
	r := reader{b: p}
	node, from = r.str(), r.str()
	if r.err != nil || node == "" || from == "" {
		return "", "", errors.New("document request: malformed")
	}
	return node, from, nil
}

// Push/pull state: one version byte; a count, then each document's wire form with its length;
// then (optional, so an empty state stays two bytes) a count and each leave notice with its
// length. Leave notices ride along because a graceful leave must not be lost with one UDP
// packet: the member that misses the notice would show the host dead, not left. Then (optional,
// and the leave count is written, perhaps 0, when it follows) a count and each gone record with
// its length (gone.go): members that joined late learn of hosts already dead. Then (optional,
// and the gone count is written when it follows) the Shared set with its length. Older members
// ignore what follows the parts they know.
const stateWire = 1

// pushState is one side of a push/pull.
type pushState struct {
	docs   [][]byte     // wire forms, not yet decoded
	leaves []liveNotice // members known to be leaving or gone by leaving
	gone   []goneRecord // members suspect, dead or left (gone.go); after the leaves
	shared []byte       // the whole Shared set (shared.go); after the gone records
}

func encodeState(s pushState) []byte {
	b := []byte{stateWire}
	b = binary.AppendUvarint(b, uint64(len(s.docs)))
	for _, w := range s.docs {
		b = appendLenString(b, string(w))
	}
	if len(s.leaves) > 0 || len(s.gone) > 0 || len(s.shared) > 0 {
		b = binary.AppendUvarint(b, uint64(len(s.leaves)))
		for _, n := range s.leaves {
			b = appendLenString(b, string(encodeLive(n)[1:]))
		}
	}
	if len(s.gone) > 0 || len(s.shared) > 0 {
		b = binary.AppendUvarint(b, uint64(len(s.gone)))
		for _, g := range s.gone {
			b = appendLenString(b, string(encodeGone(g)))
		}
	}
	if len(s.shared) > 0 {
		b = appendLenString(b, string(s.shared))
	}
	return b
}

// decodeState splits a push/pull state into its parts.
func decodeState(b []byte) (pushState, error) {
	var s pushState
	if len(b) == 0 {
		return s, nil // a member with nothing to say
	}
	if b[0] != stateWire {
		return s, fmt.Errorf("push/pull state: unknown version %d", b[0])
	}
	r := reader{b: b[1:]}
	n := r.uint()
	if r.err == nil && n > maxStateDocs {
		return s, fmt.Errorf("push/pull state: %d documents, at most %d", n, maxStateDocs)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		if w := r.str(); r.err == nil {
			s.docs = append(s.docs, []byte(w))
		}
	}
	if r.err == nil && len(r.b) > 0 {
		k := r.uint()
		if r.err == nil && k > maxStateDocs {
			return pushState{}, fmt.Errorf("push/pull state: %d notices, at most %d", k, maxStateDocs)
		}
		for i := uint64(0); i < k && r.err == nil; i++ {
			if p := r.str(); r.err == nil {
				ln, err := decodeLive([]byte(p))
				if err != nil {
					return pushState{}, fmt.Errorf("push/pull state: %w", err)
				}
				s.leaves = append(s.leaves, ln)
			}
		}
	}
	if r.err == nil && len(r.b) > 0 {
		k := r.uint()
		if r.err == nil && k > maxStateDocs {
			return pushState{}, fmt.Errorf("push/pull state: %d gone records, at most %d", k, maxStateDocs)
		}
		for i := uint64(0); i < k && r.err == nil; i++ {
			if p := r.str(); r.err == nil {
				g, err := decodeGone([]byte(p))
				if err != nil {
					return pushState{}, fmt.Errorf("push/pull state: %w", err)
				}
				s.gone = append(s.gone, g)
			}
		}
	}
	if r.err == nil && len(r.b) > 0 {
		s.shared = []byte(r.str())
	}
	if r.err != nil {
		return pushState{}, fmt.Errorf("push/pull state: %w", r.err)
	}
	return s, nil
}
