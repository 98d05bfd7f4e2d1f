package mesh

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/llmkube/mesh/agent/api"
)

// member is what this node knows of one member. Guarded by Mesh.mu.
type member struct {
	name    string
	addr    string // gossip host:port
	meta    nodeMeta
	rawMeta []byte // as memberlist carries it, for gone records
	metaErr error
	// hearsay: our memberlist does not know this member; a peer told us it is suspect, dead or
	// left (see gone.go).
	hearsay bool

	state api.Liveness // Alive, Suspect, Dead or Left: memberlist's view, completed by notices
	since time.Time    // of the last state change
	// quietUntil: a fresh suspicion is shown, and the member's models leave routing, only if
	// it stands unrefuted until then (see suspicionGraceLocked); quiet while it is not shown
	// yet. The housekeeper ends the quiet, having made up for any time this process stalled.
	quietUntil time.Time
	quiet      bool
	rtt        rttPeak   // its acks' round trips lately, for the grace
	linkRTT    rttFloor  // its acks' lowest round trip lately, for split plans
	updated    time.Time // of the last change of anything shown
	liveSeq    uint64    // highest liveness notice seen for this node
	leaving    bool      // it announced a graceful leave

	reach reachState

	emitted api.Liveness // the liveness last announced as an event; "" = none yet

	wantSince time.Time // first seen with a newer document generation than we hold
	fetchAt   time.Time // last time we asked it for its document
}

func (mb *member) setMeta(b []byte) {
	mb.rawMeta = append(mb.rawMeta[:0], b...)
	meta, err := decodeMeta(b)
	mb.meta, mb.metaErr = meta, err
	if err != nil {
		mb.meta = nodeMeta{}
	}
}

func (mb *member) isAgent() bool { return mb.metaErr == nil && mb.meta.Role == api.RoleAgent }

// isConsole reports whether the member said it is a console.
func (mb *member) isConsole() bool { return mb.metaErr == nil && mb.meta.Role == api.RoleConsole }

// consoleLeft reports a console that left gracefully: it is gone from views at once, rather
// than listed as left until memberlist forgets it.
func (mb *member) consoleLeft() bool { return mb.isConsole() && mb.state == api.Left }

// liveness is what a View shows: memberlist's state, or Unreachable for an alive agent whose
// API address did not answer.
func (mb *member) liveness() (api.Liveness, string) {
	if mb.state == api.Suspect && mb.quiet {
		return mb.aliveLiveness()
	}
	if mb.state != api.Alive || !mb.isAgent() {
		return mb.state, ""
	}
	return mb.aliveLiveness()
}

// aliveLiveness is the liveness of a member memberlist holds alive.
func (mb *member) aliveLiveness() (api.Liveness, string) {
	if !mb.isAgent() {
		return api.Alive, ""
	}
	if mb.meta.APIAddr == "" {
		return api.Unreachable, "advertises no API address"
	}
	if mb.reach.addr == mb.meta.APIAddr && mb.reach.status == reachFailed {
		return api.Unreachable, fmt.Sprintf("API address %s does not answer: %s", mb.reach.addr, mb.reach.err)
	}
	return api.Alive, ""
}

// verified reports whether the member may be routed to: alive and its API address answered.
func (mb *member) verified(self string) bool {
	if mb.name == self {
		return true
	}
	live, _ := mb.liveness()
	return live == api.Alive && mb.reach.addr == mb.meta.APIAddr && mb.reach.status == reachOK
}

// countAliveLocked refreshes the number of members alive or suspect.
func (m *Mesh) countAliveLocked() {
	n := 0
	for _, mb := range m.members {
		if (mb.state == api.Alive || mb.state == api.Suspect) && !mb.hearsay {
			n++
		}
	}
	m.nAlive.Store(int32(n))
}

// emitLocked announces mb's liveness if it changed since the last announcement. A death waits
// deadGrace, in case the leave notice that makes it a graceful leave is a packet behind.
func (m *Mesh) emitLocked(mb *member) {
	live, reason := mb.liveness()
	if live == mb.emitted || mb.name == m.name {
		return
	}
	if live == api.Dead && time.Since(mb.since) < m.t.deadGrace {
		return // the housekeeper looks again
	}
	var kind api.MeshEventKind
	switch live {
	case api.Alive:
		kind = api.MeshJoined
		if mb.emitted == api.Suspect || mb.emitted == api.Dead || mb.emitted == api.Unreachable {
			kind = api.MeshRecovered
		}
	case api.Suspect:
		kind = api.MeshSuspect
	case api.Dead:
		kind = api.MeshDead
	case api.Left:
		kind = api.MeshLeft
	case api.Unreachable:
		kind = api.MeshUnreachable
	}
	mb.emitted = live
	if mb.isConsole() && (live == api.Alive || live == api.Left) {
		// Consoles come and go all day (each headless command is one): their arrival and
		// graceful leave are logged, not events. A console that dies is still an event.
		m.log.Debug("mesh console "+string(kind), "member", mb.name, "addr", mb.addr)
		return
	}
	msg := string(kind)
	if reason != "" {
		msg += ": " + reason
	}
	m.log.Info("mesh member "+string(kind), "member", mb.name, "addr", mb.addr, "reason", reason)
	m.subs.event(api.Event{Type: api.EventMesh, Host: m.name, Member: mb.name, Kind: kind, Message: msg, Code: eventCode(live)})
}

func eventCode(l api.Liveness) api.Code {
	if l == api.Unreachable {
		return api.CodeUnreachable
	}
	return ""
}

// events receives memberlist's membership callbacks. They run with memberlist's node lock
// held: they only update our table, never call back into memberlist, never block.
type events Mesh

func (e *events) mesh() *Mesh { return (*Mesh)(e) }

func (e *events) NotifyJoin(n *memberlist.Node) {
	m := e.mesh()
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[n.Name]
	now := time.Now()
	if mb == nil {
		mb = &member{name: n.Name}
		m.members[n.Name] = mb
	}
	mb.addr = n.Address()
	mb.hearsay = false
	m.updateMetaLocked(mb, n.Meta)
	if mb.state != api.Alive {
		mb.state, mb.since = api.Alive, now
	}
	mb.leaving = false
	mb.updated = now
	m.countAliveLocked()
	m.emitLocked(mb)
	signal(m.changed)
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	m := e.mesh()
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[n.Name]
	if mb == nil || n.Name == m.name {
		return
	}
	state := api.Dead
	if mb.leaving {
		state = api.Left
	}
	now := time.Now()
	mb.state, mb.since, mb.updated = state, now, now
	m.wakeKeepersLocked() // a death to announce after deadGrace, a member to rejoin
	m.countAliveLocked()
	m.emitLocked(mb)
	signal(m.changed)
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	m := e.mesh()
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[n.Name]
	if mb == nil {
		return
	}
	mb.addr = n.Address()
	m.updateMetaLocked(mb, n.Meta)
	mb.updated = time.Now()
	m.emitLocked(mb)
	signal(m.changed)
}

// NotifyConflict: two nodes claim one name. memberlist keeps the first and refuses the
// other; we make sure a person hears of it.
func (e *events) NotifyConflict(existing, other *memberlist.Node) {
	m := e.mesh()
	if m.diag.conflict(existing.Name, existing.Address(), other.Address()) {
		msg := fmt.Sprintf("%s: %s is claimed by %s and %s", api.MeshNameConflict, existing.Name, existing.Address(), other.Address())
		m.log.Error("mesh "+msg, "member", existing.Name)
		m.subs.event(api.Event{Type: api.EventMesh, Host: m.name, Member: existing.Name, Kind: api.MeshNameConflict, Message: msg, Code: api.CodeConflict})
	}
}

// updateMetaLocked decodes new metadata; a changed API address must be checked again, and a
// new run of the node (a higher start sequence) makes every older liveness notice stale. It
// comes with every arrival (NotifyJoin, a gone record), rejoin and update of a member, and
// wakes the keepers for all of them: the metadata may name a document to fetch, an API address
// to check.
func (m *Mesh) updateMetaLocked(mb *member, b []byte) {
	m.wakeKeepersLocked()
	oldAPI := mb.meta.APIAddr
	mb.setMeta(b)
	if mb.meta.Seq > mb.liveSeq && plausibleSeq(mb.meta.Seq) {
		mb.liveSeq, mb.leaving = mb.meta.Seq, false
	}
	if mb.metaErr != nil {
		m.log.Warn("member metadata not understood", "member", mb.name, "err", mb.metaErr)
	}
	if mb.meta.APIAddr != oldAPI {
		mb.reach = reachState{}
	}
	if e, ok := m.docs[mb.name]; ok && mb.metaErr == nil && mb.meta.Seq > e.run && mb.name != m.name {
		// The node started again: the document of its previous run describes a process that is
		// gone — its placements, when it started. Shown meanwhile, it made the keepers of the
		// other hosts take the old run's replica, restored or not, for one running longest and
		// remove their own instead (e2e TestLANIntents). The new run's document is fetched.
		delete(m.docs, mb.name)
		mb.updated = time.Now()
	}
	if p, ok := m.pending[mb.name]; ok && mb.metaErr == nil && p.hash == mb.meta.DocHash {
		m.storeDocLocked(mb, p)
	}
}

// acceptLive applies a liveness notice (see liveNotice) and gossips it on if it was news.
func (m *Mesh) acceptLive(n liveNotice) {
	health := 0
	if n.Kind == liveSuspect && n.Node != m.name {
		health = m.ml.GetHealthScore() // read before taking mu: never held calling memberlist
	}
	m.mu.Lock()
	if n.Node == m.name {
		refute := n.Kind == liveSuspect && n.Seq >= m.liveSeq
		m.mu.Unlock()
		if refute {
			m.refute()
		}
		return
	}
	mb := m.members[n.Node]
	if mb == nil || !plausibleSeq(n.Seq) {
		m.mu.Unlock()
		return
	}
	news := false
	now := time.Now()
	switch n.Kind {
	case liveAlive:
		if n.Seq > mb.liveSeq {
			mb.liveSeq, news = n.Seq, true
			if mb.state == api.Suspect {
				m.refutedLocked(mb, now)
			}
		}
	case liveSuspect:
		// A suspicion names the sequence it suspects: the one we know. One above it is either a
		// member ahead of us (our own detector will tell) or a forgery meant to outrank the
		// node's refutation.
		if n.Seq == mb.liveSeq && mb.state == api.Alive {
			news = true
			mb.state, mb.since = api.Suspect, now
			grace := m.suspicionGraceLocked(mb, now, health)
			mb.quietUntil, mb.quiet = now.Add(grace), true
			m.log.Debug("member suspected; shown unless refuted within the grace", "member", n.Node, "by", n.From, "grace", grace)
		}
	case liveLeave:
		if n.Seq > mb.liveSeq {
			mb.liveSeq, news = n.Seq, true
			mb.leaving = true
			if mb.state == api.Dead {
				mb.state = api.Left
			}
		}
	}
	if news {
		mb.updated = now
		m.wakeKeepersLocked() // a grace to time, a suspicion ended, a leave to show
		m.countAliveLocked()
		m.emitLocked(mb)
	}
	m.mu.Unlock()
	if news {
		m.queueLive(n)
		signal(m.changed)
	}
}

// How long a suspicion must stand unrefuted before it is shown. A healthy host refutes as soon
// as it hears of it, so the grace is how long a host may be unable to answer, beyond the probe
// that failed (memberlist waits out its whole interval, 0.5 s on the LAN), and never be shown
// suspect. Measured in the e2e LAN with a fixed 0.5 s grace: a host frozen (SIGSTOP) up to
// 1.0 s was never shown suspect; frozen 1.2 s it was, once in three, its refutation 19 ms late.
// A host under CPU load first answers slower (acks on 2 busy cores took up to 330 ms, against
// ~1 ms idle), and one that stalled once stalls again. So the grace is suspectGrace plus
// rttGraceMult times the slowest ack from that member lately — a refuted suspicion counting as
// an ack as late as it was, since memberlist reports none past its probe timeout — times one
// plus this member's own ill health as memberlist's awareness counts it (Lifeguard: missed
// nacks say the fault may be ours). It never outlasts memberlist's shortest suspicion timeout
// less suspectGrace, so a crashed host is still shown suspect before it is declared dead: on
// the LAN 0.5 s on an idle network, as before, up to 1.0 s for a member slow lately (and for
// its crash).
const (
	rttGraceMult = 3
	maxGraceMult = 3
	rttWindow    = 5 * time.Second // the peak is the highest of this window's and the last one's
)

func (m *Mesh) suspicionGraceLocked(mb *member, now time.Time, health int) time.Duration {
	g := m.t.suspectGrace + rttGraceMult*mb.rtt.peak(now)
	g *= time.Duration(1 + max(health, 0))
	limit := min(maxGraceMult*m.t.suspectGrace, m.minSuspicion()-m.t.suspectGrace)
	return max(min(g, limit), m.t.suspectGrace)
}

// rttPeak is the highest probe round trip to a member lately: over the current window and the
// one before, so a spike counts for rttWindow to twice that.
type rttPeak struct {
	cur, prev time.Duration
	start     time.Time // of the current window
}

func (p *rttPeak) add(rtt time.Duration, now time.Time) {
	p.roll(now)
	p.cur = max(p.cur, rtt)
}

func (p *rttPeak) peak(now time.Time) time.Duration {
	p.roll(now)
	return max(p.cur, p.prev)
}

func (p *rttPeak) roll(now time.Time) {
	switch d := now.Sub(p.start); {
	case d >= 2*rttWindow:
		p.cur, p.prev, p.start = 0, 0, now
	case d >= rttWindow:
		p.prev, p.cur, p.start = p.cur, 0, p.start.Add(rttWindow)
	}
}

// maxSeqAhead: liveness sequences come from the wall clock of the node they are about, in
// microseconds (see liveNotice). One further ahead of ours than any clock could be is a forgery
// by a member with the key, meant to outrank every later notice of that node for good: refused.
const maxSeqAhead = 24 * time.Hour

func plausibleSeq(seq uint64) bool {
	return seq <= uint64(time.Now().Add(maxSeqAhead).UnixMicro())
}

// suspicions receives memberlist's suspicions (the fork's SuspicionDelegate, see
// third_party/memberlist/LLMKUBE.md). NotifyCleared and NotifyRefuting run with memberlist's
// node lock held, as the events do: they update our table and send, never call back into
// memberlist for its state, never block.
type suspicions Mesh

func (s *suspicions) mesh() *Mesh { return (*Mesh)(s) }

// NotifySuspect: our own probe of node went unanswered. A peer's suspicion reaches the mesh as
// its own notice (acceptLive), numbered against the suspect's refutations.
func (s *suspicions) NotifySuspect(node *memberlist.Node, from string) {
	m := s.mesh()
	if from != m.name {
		return
	}
	m.stats.probesFailed.Add(1)
	m.suspected(node.Name)
}

// NotifyCleared: node refuted a suspicion our memberlist held. Its own notice says so too, but
// may never come: a member that counted us dead while we were cut off sends it only to the
// members it holds alive, and gossips it for a few rounds, before we are back.
func (s *suspicions) NotifyCleared(node *memberlist.Node) {
	s.mesh().cleared(node.Name)
}

// NotifyRefuting: a peer suspects us, and memberlist refutes it; so does the mesh's notice.
func (s *suspicions) NotifyRefuting(string) {
	m := s.mesh()
	m.stats.refutations.Add(1)
	m.refute()
}

// cleared ends a suspicion of name at once: our memberlist saw it refuted.
func (m *Mesh) cleared(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[name]
	if mb == nil || mb.hearsay || mb.state != api.Suspect {
		return
	}
	now := time.Now()
	m.refutedLocked(mb, now)
	mb.updated = now
	m.wakeKeepersLocked()
	m.countAliveLocked()
	m.emitLocked(mb)
	signal(m.changed)
}

// refutedLocked makes a suspect member alive again. The suspicion counts as an ack as slow as
// it lasted, about a probe interval and this long, for the grace of the member's next
// suspicion: memberlist reports no ack later than its probe timeout.
func (m *Mesh) refutedLocked(mb *member, now time.Time) {
	mb.rtt.add(m.mlc.ProbeInterval+now.Sub(mb.since), now)
	mb.state, mb.since = api.Alive, now
}

// suspected is called when our own memberlist's failure detector suspects a node.
func (m *Mesh) suspected(name string) {
	m.lastFailed.Store(time.Now().UnixNano())
	m.mu.Lock()
	m.wakeHousekeeperLocked() // the cut-off clock starts (aloneLocked)
	mb := m.members[name]
	if mb == nil || name == m.name {
		m.mu.Unlock()
		return
	}
	n := liveNotice{Kind: liveSuspect, Seq: mb.liveSeq, Node: name, From: m.name}
	addr := mb.addr
	m.mu.Unlock()
	m.acceptLive(n)
	// Straight to the suspect too, so a member that is only slow refutes within the grace:
	// gossip would take a round or two to reach it.
	if node, err := memberlistNode(name, addr); err == nil {
		if err := m.ml.SendBestEffort(node, encodeLive(n)); err != nil {
			m.log.Debug("sending a suspect notice", "member", name, "err", err)
		}
	}
}

// refute answers a suspicion of ourselves with a newer alive notice — unless we are leaving:
// the notice would replace our queued leave notice (same broadcast name) and outrank it.
func (m *Mesh) refute() {
	m.mu.Lock()
	// Checked under the lock Leave takes to number its notice, not before it: a refutation
	// numbered after the leave notice outranks it, and a member that hears the refutation first
	// refuses the leave and shows the graceful leave as a death.
	if m.leaving.Load() {
		m.mu.Unlock()
		return
	}
	m.liveSeq = max(m.liveSeq+1, uint64(time.Now().UnixMicro()))
	n := liveNotice{Kind: liveAlive, Seq: m.liveSeq, Node: m.name, From: m.name}
	peers := m.peersLocked()
	m.mu.Unlock()
	m.queueLive(n)
	m.sendEach(peers, encodeLive(n)) // and at once, within the suspicion's grace
}

// peersLocked are the other members our memberlist holds alive or suspect, to send to.
func (m *Mesh) peersLocked() []*memberlist.Node {
	var out []*memberlist.Node
	for name, mb := range m.members {
		if name != m.name && !mb.hearsay && (mb.state == api.Alive || mb.state == api.Suspect) {
			if node, err := memberlistNode(name, mb.addr); err == nil {
				out = append(out, node)
			}
		}
	}
	return out
}

// sendEach sends msg to each node in one UDP packet, best effort: the notices it carries also
// travel by gossip.
func (m *Mesh) sendEach(nodes []*memberlist.Node, msg []byte) {
	for _, n := range nodes {
		if err := m.ml.SendBestEffort(n, msg); err != nil {
			m.log.Debug("sending a notice", "member", n.Name, "err", err)
		}
	}
}

func (m *Mesh) queueLive(n liveNotice) {
	m.queue.QueueBroadcast(&broadcast{name: "live:" + n.Node, msg: encodeLive(n)})
}

// maxSuspicion bounds how long memberlist keeps a node suspect before declaring it dead
// (SuspicionMaxTimeoutMult × the suspicion timeout), plus a probe round. A node still suspect in
// our table after that was refuted in a way we missed.
func (m *Mesh) maxSuspicion() time.Duration {
	return time.Duration(m.mlc.SuspicionMaxTimeoutMult)*m.minSuspicion() + 2*m.mlc.ProbeInterval
}

// minSuspicion is memberlist's suspicion timeout once enough members confirm a suspicion: the
// soonest it declares a suspect dead (see memberlist's suspicionTimeout).
func (m *Mesh) minSuspicion() time.Duration {
	n := float64(max(m.nAlive.Load(), 1))
	scale := math.Max(1, math.Log10(n))
	return time.Duration(float64(m.mlc.SuspicionMult) * scale * float64(m.mlc.ProbeInterval))
}

// broadcast is a named memberlist broadcast: queuing one replaces any queued broadcast of the
// same name, so only the latest document or notice of a node waits in the queue.
type broadcast struct {
	name string
	msg  []byte
}

func (b *broadcast) Name() string    { return b.name }
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}
func (b *broadcast) Invalidates(o memberlist.Broadcast) bool {
	nb, ok := o.(memberlist.NamedBroadcast)
	return ok && nb.Name() == b.name
}

// rttFloor keeps a member's last probe round trips; the lowest is the link's own delay. A busy
// host acks a probe late, which only adds to it: a split plan asks how far the link is (its
// RTT bound leaves a host out), and one late ack must not move a host away for the many probes
// a smoothed mean takes to forget it (a loaded 2-core test machine acked loopback probes in
// 50 ms and more).
type rttFloor struct {
	last [8]time.Duration
	n    int
}

func (f *rttFloor) add(rtt time.Duration) {
	f.last[f.n%len(f.last)] = rtt
	f.n++
}

// value is the lowest of the round trips kept, 0 before the first.
func (f *rttFloor) value() time.Duration {
	var low time.Duration
	for _, d := range f.last[:min(f.n, len(f.last))] {
		if low == 0 || d < low {
			low = d
		}
	}
	return low
}
