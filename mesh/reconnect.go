package mesh

import (
	"net"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// After a link cut each side holds the other dead, and memberlist never probes the dead again:
// the two halves found each other only by a push/pull or a discovery round, 0.4–10 s after the
// link was back. So every rejoinEvery the rejoiner pings each member that died (not one that
// left) at its last address — one UDP packet, answered within the probe timeout when it is
// reachable — and joins it as soon as it answers: both halves merge within about a second of
// the link coming back. A member dead for longer than rejoinFast is pinged only every joinMax.
// Members we only heard of are pinged too: a peer's gone record of a dead host (hearsay), and,
// while no other member is alive here, the seeds and last-known peers whose join failed — a
// host that restarted while its link was down knows its peers only so, and its join backoff
// (up to joinMax) would otherwise keep it out for up to half a minute after the link is back.
// Peers found by mDNS are not pinged: anyone on the LAN can forge those answers.
//
// And a host whose own link is cut knows it: when its failure detector has failed a probe and
// no member has acked one for aloneAfter, it is alone — every other member is shown unreachable
// and its models unavailable at once, rather than one by one as memberlist (slowing itself down,
// as Lifeguard does when it cannot tell who is at fault) gets round to suspecting each.

const rejoinFast = 2 * time.Minute

type rejoinState struct {
	next     time.Time
	inflight bool
}

// rejoiner runs until shutdown. It wakes when the next dead member is due a ping (or its last
// ping ends), every rejoinEvery while candidates are to be pinged, and otherwise only when
// woken (wakeKeepersLocked: a member died, arrived or changed, a candidate was added).
func (m *Mesh) rejoiner() {
	timer := time.NewTimer(m.t.rejoinEvery)
	defer timer.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-timer.C:
		case <-m.rejoinWake:
		}
		now := time.Now()
		var next time.Time // zero: nothing due
		m.mu.Lock()
		for name := range m.rejoins {
			if mb := m.members[name]; mb == nil || mb.state != api.Dead {
				delete(m.rejoins, name)
			}
		}
		for name, mb := range m.members {
			if name == m.name || mb.state != api.Dead || mb.addr == "" {
				continue
			}
			st := m.rejoins[name]
			if st == nil {
				st = &rejoinState{}
				m.rejoins[name] = st
			}
			if !st.inflight && !now.Before(st.next) {
				st.inflight = true
				st.next = now.Add(m.t.rejoinEvery)
				if now.Sub(mb.since) > rejoinFast {
					st.next = now.Add(m.t.joinMax)
				}
				name, addr := name, mb.addr
				m.goRun(func() {
					m.tryRejoin(name, addr)
					m.mu.Lock()
					st.inflight = false
					m.mu.Unlock()
					signal(m.rejoinWake) // its next ping may be due already
				})
				continue
			}
			if !st.inflight && (next.IsZero() || st.next.Before(next)) {
				next = st.next
			}
		}
		if m.pingCandidatesLocked() && (next.IsZero() || next.After(now.Add(m.t.rejoinEvery))) {
			next = now.Add(m.t.rejoinEvery)
		}
		m.mu.Unlock()
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
	}
}

// pingCandidatesLocked pings, while no other member is alive here, each seed and last-known
// peer whose join failed, and makes one that answers due for a join at once. It reports
// whether to look again in rejoinEvery: while no other member is alive and there are
// candidates (a join may fail meanwhile).
func (m *Mesh) pingCandidatesLocked() bool {
	if m.nAlive.Load() > 1 || len(m.candidates) == 0 {
		return false
	}
	known := map[string]bool{}
	for _, mb := range m.members {
		known[mb.addr] = true // the rejoiner pings a dead member by name
	}
	for _, c := range m.candidates {
		if c.via == discovery.ViaMDNS || c.err == nil || c.inflight || c.pinging || known[c.addr] || c.addr == m.gossipAddr {
			continue
		}
		ua, err := net.ResolveUDPAddr("udp", c.addr)
		if err != nil {
			continue
		}
		c.pinging = true
		m.goRun(func() {
			// No name: a seed or a last-known address does not say whose it is, and memberlist
			// answers a ping without one.
			_, err := m.ml.Ping("", ua)
			m.mu.Lock()
			defer m.mu.Unlock()
			c.pinging = false
			if err == nil && m.candidates[c.addr] == c && !c.inflight {
				c.next = time.Now()
				c.backoff.Reset()
				signal(m.joinCh)
			}
		})
	}
	return true
}

func (m *Mesh) tryRejoin(name, addr string) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return
	}
	if _, err := m.ml.Ping(name, ua); err != nil {
		return // still unreachable
	}
	m.answered()
	if !m.joining(func() { _, err = m.ml.Join([]string{addr}) }) {
		return // leaving
	}
	if err != nil {
		m.log.Debug("rejoining a member that answers again", "member", name, "err", joinError(err))
		return
	}
	m.log.Info("rejoined a member that was dead", "member", name, "addr", addr)
}

// pings is memberlist's PingDelegate: it hears every probe acked directly, with its round trip.
type pings Mesh

// AckPayload is called as we answer another member's probe: it can reach us.
func (p *pings) AckPayload() []byte {
	m := (*Mesh)(p)
	m.lastPinged.Store(time.Now().UnixNano())
	m.heard()
	return nil
}

func (p *pings) NotifyPingComplete(n *memberlist.Node, rtt time.Duration, _ []byte) {
	m := (*Mesh)(p)
	now := time.Now()
	m.lastAck.Store(now.UnixNano())
	m.heard()
	m.stats.probesAcked.Add(1)
	m.stats.rtt.observe(rtt)
	m.mu.Lock()
	if mb := m.members[n.Name]; mb != nil {
		mb.rtt.add(rtt, now) // for the suspicion grace (members.go)
		mb.linkRTT.add(rtt)
	}
	m.mu.Unlock()
	m.diag.acked(n.Addr.String(), now)
}

// aloneLocked reports whether this member is cut off: it has had peers, our own failure
// detector failed a probe since the last acked one, and for aloneAfter no probe of ours was
// acked and no member probed us. Peers
// our memberlist declared dead meanwhile still count (an agent, not a console that came and
// went): a host cut off for longer than memberlist's suspicion timeout stays cut off, in its
// view and its doctor, until one answers again. From here that cannot be told apart from every
// other host failing at once, and the doctor's finding says both.
//
// Nor is a member probed by others meanwhile cut off: probes of a peer that just crashed can
// take every probe slot for aloneAfter (memberlist probes a suspect too, and may probe one
// member twice running across its shuffle), and in the e2e LAN a healthy host with two peers
// called itself cut off for 0.1 s in most crash checks, its view showing every other member
// unreachable meanwhile.
func (m *Mesh) aloneLocked(now time.Time) bool {
	ack, failed := m.lastAck.Load(), m.lastFailed.Load()
	heard := max(ack, m.lastPinged.Load())
	if failed <= ack || now.Sub(time.Unix(0, heard)) < m.t.aloneAfter {
		return false
	}
	return m.peersHadLocked() > 0
}

// peersHadLocked counts the members that make a silence mean this member is cut off: those our
// memberlist holds alive or suspect, and the agents it declared dead.
func (m *Mesh) peersHadLocked() int {
	n := 0
	for name, mb := range m.members {
		if name == m.name || mb.hearsay {
			continue
		}
		if mb.state == api.Alive || mb.state == api.Suspect || (mb.state == api.Dead && mb.isAgent()) {
			n++
		}
	}
	return n
}

// answered records a sign of life from another member outside memberlist's probes: a rejoin
// ping answered, a join that went through. A member cut off is not alone any more from then.
func (m *Mesh) answered() {
	m.lastAck.Store(time.Now().UnixNano())
	m.heard()
}

// heard wakes the housekeeper of a member cut off, which waits for no clock to say it is not
// any more: another member acked a probe of ours or probed us.
func (m *Mesh) heard() {
	if m.cutOff.Load() {
		signal(m.keepWake)
	}
}
