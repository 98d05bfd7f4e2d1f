package mesh

import (
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/statedoc"
)

// aliveCheck is memberlist's AliveDelegate: a node whose name is not a valid node name (a DNS
// label, as validNodeName says) is refused before memberlist adds it. Names are shown in every
// console and are the key of every table, so they are checked once, here, rather than escaped
// everywhere.
type aliveCheck Mesh

func (a *aliveCheck) NotifyAlive(n *memberlist.Node) error { return validNodeName(n.Name) }

// delegate is memberlist's Delegate. memberlist calls it from its packet and stream loops,
// concurrently: nothing here blocks, and buffers are copied before they are kept.
type delegate Mesh

func (d *delegate) mesh() *Mesh { return (*Mesh)(d) }

// NodeMeta hands memberlist the metadata encoded (and size-checked) by SetLocal.
func (d *delegate) NodeMeta(limit int) []byte {
	b := *d.mesh().meta.Load()
	if len(b) > limit {
		// encodeMeta never returns more than memberlist.MetaMaxSize; a smaller limit would be a
		// memberlist change. Say only the role rather than let memberlist panic.
		return b[:min(len(b), 4)]
	}
	return b
}

// NotifyMsg receives a user message, by gossip or by TCP.
func (d *delegate) NotifyMsg(b []byte) {
	m := d.mesh()
	if len(b) == 0 {
		return
	}
	switch b[0] {
	case msgDoc:
		wire := append([]byte(nil), b[1:]...) // memberlist reuses b after we return
		doc, err := statedoc.Decode(wire)
		if err != nil {
			m.log.Warn("dropping a state document", "err", err)
			return
		}
		m.acceptDoc(doc, wire)
	case msgDocRequest:
		node, from, err := decodeDocRequest(b[1:])
		if err != nil {
			m.log.Warn("dropping a document request", "err", err)
			return
		}
		m.answerDocRequest(node, from)
	case msgLive:
		n, err := decodeLive(b[1:])
		if err != nil {
			m.log.Warn("dropping a liveness notice", "err", err)
			return
		}
		m.acceptLive(n)
	case msgShared:
		m.mergeShared(append([]byte(nil), b[1:]...)) // memberlist reuses b after we return
	default:
		m.log.Debug("ignoring a message of an unknown type (a newer member?)", "type", b[0])
	}
}

// GetBroadcasts hands memberlist our queued documents and notices to piggyback on gossip.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.mesh().queue.GetBroadcasts(overhead, limit)
}

// LocalState is our side of a push/pull. A join carries every document we hold of a known
// member, so a newcomer sees the whole mesh at once. A periodic push/pull carries only our own:
// memberlist's part of the exchange already carries every member's metadata, with its
// document generation, and the housekeeper fetches from its owner any document found newer
// than ours — anti-entropy by digest, at a fraction of the bytes (see doc.go). Both carry the
// whole Shared set (shared.go), which has no owner to fetch it from.
func (d *delegate) LocalState(join bool) []byte {
	m := d.mesh()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := pushState{gone: m.goneLocked(time.Now()), shared: m.sharedFull()}
	for name, mb := range m.members {
		if mb.leaving && mb.state == api.Left && name != m.name {
			s.leaves = append(s.leaves, liveNotice{Kind: liveLeave, Seq: mb.liveSeq, Node: name, From: m.name})
		}
	}
	if !join {
		if e, ok := m.docs[m.name]; ok {
			s.docs = [][]byte{e.wire}
		}
		return encodeState(s)
	}
	for name, e := range m.docs {
		if _, ok := m.members[name]; ok {
			s.docs = append(s.docs, e.wire)
		}
	}
	return encodeState(s)
}

// MergeRemoteState merges the other side of a push/pull.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	m := d.mesh()
	s, err := decodeState(buf)
	if err != nil {
		m.log.Warn("dropping push/pull state", "err", err)
		return
	}
	for _, n := range s.leaves {
		m.acceptLive(n)
	}
	if len(s.shared) > 0 {
		m.mergeShared(s.shared)
	}
	docs := make([]*statedoc.Doc, len(s.docs))
	for i, w := range s.docs {
		doc, err := statedoc.Decode(w)
		if err != nil {
			m.log.Warn("dropping a state document from push/pull", "err", err)
			continue
		}
		docs[i] = doc
	}
	// The gone members and the documents in one step, so no view shows a member gone without
	// its placements (a newcomer's first view did, between the two). Documents last: a gone
	// member's metadata, which names its document, comes with its record.
	m.mu.Lock()
	changed := false
	now := time.Now()
	for _, g := range s.gone {
		changed = m.acceptGoneLocked(g, now) || changed
	}
	for i, doc := range docs {
		if doc != nil {
			m.acceptDocLocked(doc, s.docs[i])
		}
	}
	m.mu.Unlock()
	if changed {
		signal(m.changed)
	}
}

// acceptDoc takes a document from gossip, push/pull or TCP, whoever relayed it. Only the
// document the node's current metadata names (by hash, see doc.go) is kept; another one is set
// aside until metadata names it, and a document about ourselves is ignored: what we publish is
// ours alone to say.
func (m *Mesh) acceptDoc(doc *statedoc.Doc, wire []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acceptDocLocked(doc, wire)
}

// acceptDocLocked is acceptDoc under m.mu.
func (m *Mesh) acceptDocLocked(doc *statedoc.Doc, wire []byte) {
	if doc.Node == m.name {
		return
	}
	e := docEntry{doc: doc, wire: wire, hash: statedoc.Hash(wire), at: time.Now()}
	mb := m.members[doc.Node]
	if mb == nil || mb.metaErr != nil || e.hash != mb.meta.DocHash {
		// Most likely the node, or the metadata naming this document, is a packet behind.
		_, known := m.pending[doc.Node]
		if m.docs[doc.Node].hash != e.hash && (known || len(m.pending) < maxPendingDocs) {
			m.pending[doc.Node] = e
			m.wakeHousekeeperLocked() // to drop it if no member names it
		}
		return
	}
	m.storeDocLocked(mb, e)
}

// maxPendingDocs bounds the documents set aside: one per node, and a member with the key could
// invent any number of nodes.
const maxPendingDocs = 256

// storeDocLocked keeps e, the document mb's metadata names, and gossips it on if small.
func (m *Mesh) storeDocLocked(mb *member, e docEntry) {
	delete(m.pending, mb.name)
	if m.docs[mb.name].hash == e.hash {
		return
	}
	e.run = mb.meta.Seq
	m.docs[mb.name] = e
	mb.updated, mb.wantSince = e.at, time.Time{}
	if len(e.wire) <= maxGossipDoc {
		m.queue.QueueBroadcast(&broadcast{name: "doc:" + mb.name, msg: append([]byte{msgDoc}, e.wire...)})
	}
	signal(m.changed)
}

// answerDocRequest sends our document to a member that asked for it.
func (m *Mesh) answerDocRequest(node, from string) {
	if node != m.name {
		return // only the owner answers: it alone has the newest
	}
	m.mu.Lock()
	e, ok := m.docs[m.name]
	var addr string
	if mb := m.members[from]; mb != nil && (mb.state == api.Alive || mb.state == api.Suspect) {
		addr = mb.addr
	}
	m.mu.Unlock()
	if !ok || addr == "" {
		return
	}
	m.sendTo(from, addr, append([]byte{msgDoc}, e.wire...))
}
