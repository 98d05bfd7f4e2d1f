package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/llmkube/mesh/agent/api"
)

// A member that joins after a host crashed never learns of it from memberlist: a push/pull
// carries dead and suspect nodes, but memberlist merges only alive ones into a member that has
// never heard of them. So a headless `mesh hosts`, a fresh member each time, would never show a
// host dead — a script checking liveness would see it vanish instead. Each push/pull therefore
// also carries our gone records: every member we hold as suspect, dead or left, with its
// metadata and how long ago that became so. A member that knows the node from its own
// memberlist ignores them (memberlist owns liveness); one that does not shows the node as the
// sender does, as hearsay, until its own memberlist hears from the node (it came back) or the
// record ages out like any gone member.

// goneRecord is one member the sender holds as suspect, dead or left.
type goneRecord struct {
	State api.Liveness // Suspect, Dead or Left
	Node  string
	Addr  string // gossip host:port
	Meta  []byte // its node metadata, as memberlist carries it
	Age   time.Duration
	Seq   uint64 // its liveness sequence, see liveNotice
}

var goneStates = map[api.Liveness]byte{api.Suspect: 1, api.Dead: 2, api.Left: 3}

func encodeGone(g goneRecord) []byte {
	b := []byte{goneStates[g.State]}
	b = appendLenString(b, g.Node)
	b = appendLenString(b, g.Addr)
	b = appendLenString(b, string(g.Meta))
	b = binary.AppendUvarint(b, uint64(max(g.Age, 0)/time.Millisecond))
	return binary.AppendUvarint(b, g.Seq)
}

func decodeGone(p []byte) (goneRecord, error) {
	r := reader{b: p}
	kind := r.byte()
	g := goneRecord{Node: r.str(), Addr: r.str(), Meta: []byte(r.str())}
	age := r.uint()
	g.Seq = r.uint()
	if r.err != nil {
		return goneRecord{}, fmt.Errorf("gone record: %w", r.err)
	}
	for s, k := range goneStates {
		if k == kind {
			g.State = s
		}
	}
	if g.State == "" {
		return goneRecord{}, fmt.Errorf("gone record: unknown state %d", kind)
	}
	if g.Node == "" || len(g.Node) > maxNodeName {
		return goneRecord{}, errors.New("gone record: bad node name")
	}
	if len(g.Meta) > memberlist.MetaMaxSize {
		return goneRecord{}, errors.New("gone record: metadata over memberlist's limit")
	}
	if _, _, err := net.SplitHostPort(g.Addr); err != nil {
		return goneRecord{}, fmt.Errorf("gone record: address %q: %w", g.Addr, err)
	}
	// An absurd age is simply old: it ages out at once.
	g.Age = time.Duration(min(age, uint64(24*time.Hour/time.Millisecond))) * time.Millisecond
	return g, nil
}

// goneLocked lists the members to tell a push/pull peer about.
func (m *Mesh) goneLocked(now time.Time) []goneRecord {
	var out []goneRecord
	for name, mb := range m.members {
		if name == m.name || (mb.state != api.Suspect && mb.state != api.Dead && mb.state != api.Left) {
			continue
		}
		out = append(out, goneRecord{State: mb.state, Node: name, Addr: mb.addr, Meta: mb.rawMeta, Age: now.Sub(mb.since), Seq: mb.liveSeq})
	}
	return out
}

// acceptGoneLocked takes a peer's record of a member that is not alive, under m.mu; it reports
// whether the view changed.
func (m *Mesh) acceptGoneLocked(g goneRecord, now time.Time) bool {
	mb := m.members[g.Node]
	if g.Node == m.name || g.Age >= m.t.retainGone || (mb != nil && !mb.hearsay) || !plausibleSeq(g.Seq) {
		return false
	}
	since := now.Add(-g.Age)
	if mb == nil {
		mb = &member{name: g.Node, hearsay: true}
		m.members[g.Node] = mb
	} else if mb.state == g.State && g.Seq <= mb.liveSeq {
		return false // nothing new
	}
	mb.addr, mb.state, mb.since, mb.updated = g.Addr, g.State, since, now
	mb.quiet = false // a peer's suspicion is shown as the peer gives it
	mb.leaving = g.State == api.Left
	m.updateMetaLocked(mb, g.Meta)
	mb.liveSeq = max(mb.liveSeq, g.Seq)
	m.emitLocked(mb)
	return true
}
