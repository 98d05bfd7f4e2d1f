package mesh

import (
	"net"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/llmkube/mesh/agent/api"
)

// After a link cut each side holds the other dead, and memberlist never probes the dead again:
// the two halves found each other only by a push/pull or a discovery round, 0.4–10 s after the
// link was back. So every rejoinEvery the rejoiner pings each member that died (not one that
// left) at its last address — one UDP packet, answered within the probe timeout when it is
// reachable — and joins it as soon as it answers: both halves merge within about a second of
// the link coming back. A member dead for longer than rejoinFast is pinged only every joinMax.
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

// rejoiner runs until shutdown.
func (m *Mesh) rejoiner() {
	tick := time.NewTicker(m.t.rejoinEvery)
	defer tick.Stop()
	state := map[string]*rejoinState{}
	for {
		select {
		case <-m.ctx.Done():
			return
		case now := <-tick.C:
			m.mu.Lock()
			for name := range state {
				if mb := m.members[name]; mb == nil || mb.state != api.Dead || mb.hearsay {
					delete(state, name)
				}
			}
			for name, mb := range m.members {
				if name == m.name || mb.state != api.Dead || mb.hearsay || mb.addr == "" {
					continue
				}
				st := state[name]
				if st == nil {
					st = &rejoinState{}
					state[name] = st
				}
				if st.inflight || now.Before(st.next) {
					continue
				}
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
				})
			}
			m.mu.Unlock()
		}
	}
}

func (m *Mesh) tryRejoin(name, addr string) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return
	}
	if _, err := m.ml.Ping(name, ua); err != nil {
		return // still unreachable
	}
	if _, err := m.ml.Join([]string{addr}); err != nil {
		m.log.Debug("rejoining a member that answers again", "member", name, "err", joinError(err))
		return
	}
	m.log.Info("rejoined a member that was dead", "member", name, "addr", addr)
}

// pings is memberlist's PingDelegate: it hears every probe acked directly, with its round trip.
type pings Mesh

func (p *pings) AckPayload() []byte { return nil }

func (p *pings) NotifyPingComplete(_ *memberlist.Node, rtt time.Duration, _ []byte) {
	m := (*Mesh)(p)
	m.lastAck.Store(time.Now().UnixNano())
	m.stats.probesAcked.Add(1)
	m.stats.rtt.observe(rtt)
}

// aloneLocked reports whether this member is cut off: it has other members, our own failure
// detector failed a probe since the last acked one, and none was acked for aloneAfter.
func (m *Mesh) aloneLocked(now time.Time) bool {
	ack, failed := m.lastAck.Load(), m.lastFailed.Load()
	if failed <= ack || now.Sub(time.Unix(0, ack)) < m.t.aloneAfter {
		return false
	}
	for name, mb := range m.members {
		if name != m.name && !mb.hearsay && (mb.state == api.Alive || mb.state == api.Suspect) {
			return true
		}
	}
	return false
}
