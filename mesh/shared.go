package mesh

// Shared is a set every member keeps a whole copy of, merged without an owner (the intents:
// mesh/intent). The mesh carries it in two ways: a change is gossiped as a named broadcast (one
// per key, so a newer change of a key replaces the older in the queue) and every member that
// finds it news gossips it on; and every push/pull, periodic or on join, carries the whole set,
// so members that missed a broadcast, were partitioned or restarted with another set converge
// within a push/pull interval. Merge must be idempotent, commutative and associative.
type Shared interface {
	// Full is the whole set's wire form.
	Full() []byte
	// Merge takes a wire form (a whole set, or a change) and returns what was news, by key,
	// each in a wire form Merge reads, to gossip on.
	Merge(wire []byte) (news map[string][]byte, err error)
}

// Share gossips changes of the Shared set, by key (what Merge returned, or a local edit).
// A change too large for a gossip packet travels with the next push/pull only.
func (m *Mesh) Share(changes map[string][]byte) {
	for key, wire := range changes {
		if len(wire) > maxGossipDoc {
			continue
		}
		m.queue.QueueBroadcast(&broadcast{name: "shared:" + key, msg: append([]byte{msgShared}, wire...)})
	}
}

// mergeShared merges a part of the set from another member and gossips on what was news.
func (m *Mesh) mergeShared(wire []byte) {
	if m.cfg.Shared == nil {
		return
	}
	news, err := m.cfg.Shared.Merge(wire)
	if err != nil {
		m.log.Warn("dropping shared state", "err", err)
		return
	}
	m.Share(news)
}

// sharedFull is the whole set for a push/pull; nil without one.
func (m *Mesh) sharedFull() []byte {
	if m.cfg.Shared == nil {
		return nil
	}
	return m.cfg.Shared.Full()
}
