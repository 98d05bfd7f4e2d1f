package mesh

import (
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// housekeeper does everything that is due rather than triggered, every tick: announcing deaths
// after their grace, expiring suspicions memberlist must have cleared, forgetting long-gone
// members, fetching documents we are missing, checking API addresses, saving last-known peers.
//
// All of that is about other members. A member alone (nothing about anyone else held:
// aloneWithNothingLocked) has nothing due, so it stops ticking — ten rounds a second were most of
// what an idle agent did beyond a bare memberlist node (BENCHMARKS.md) — until something about
// another member arrives (m.keepWake) or saveEvery passes (diagnostics still expire). Its wait is not a stall: the next round does
// not lengthen suspicion graces by it (none was running, and none starts during the wait
// without waking it first).
func (m *Mesh) housekeeper() {
	tick := time.NewTicker(m.t.tick)
	defer tick.Stop()
	lastSave := time.Now()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now() // not the tick's: it may have waited in the channel
		m.housekeep(now)
		if now.Sub(lastSave) >= m.t.saveEvery {
			lastSave = now
			m.saveLastKnown()
		}
		m.mu.Lock()
		idle := m.aloneWithNothingLocked()
		m.mu.Unlock()
		if !idle {
			continue
		}
		tick.Stop()
		wait := time.NewTimer(m.t.saveEvery)
		select {
		case <-m.ctx.Done():
			wait.Stop()
			return
		case <-m.keepWake:
		case <-wait.C:
		}
		wait.Stop()
		m.mu.Lock()
		m.lastKeep = time.Now()
		m.mu.Unlock()
		tick.Reset(m.t.tick)
	}
}

// aloneWithNothingLocked reports whether this member holds nothing about any other: no member
// but itself (alive, suspect or gone), no document but its own, none set aside. Whatever adds
// one calls wakeKeepersLocked.
func (m *Mesh) aloneWithNothingLocked() bool {
	if len(m.members) != 1 || m.members[m.name] == nil || len(m.pending) != 0 {
		return false
	}
	for name := range m.docs {
		if name != m.name {
			return false
		}
	}
	return true
}

// wakeKeepersLocked tells the housekeeper and the rejoiner, which wait while this member is
// alone with nothing (aloneWithNothingLocked, and for the rejoiner no join candidate), that
// something about another member arrived.
func (m *Mesh) wakeKeepersLocked() {
	signal(m.keepWake)
	signal(m.rejoinWake)
}

func (m *Mesh) housekeep(now time.Time) {
	type fetch struct{ name, addr string }
	var fetches []fetch
	changed := false
	maxSusp := m.maxSuspicion()

	m.mu.Lock()
	// A tick this late means this process did not run meanwhile (a busy machine): refutations
	// may wait unread in its socket. A suspicion's grace counts only time we could hear one, so
	// every grace still running is lengthened by the stall. Seen in the e2e LAN: an agent
	// stalled 2.4 s showed a healthy peer suspect on waking, its refutation read 3 ms later.
	stalled := now.Sub(m.lastKeep) - m.t.tick
	if stalled <= m.t.tick {
		stalled = 0 // the ticker's usual lateness
	}
	m.lastKeep = now
	for name, mb := range m.members {
		if name == m.name {
			continue
		}
		switch mb.state {
		case api.Suspect:
			if mb.quiet {
				mb.quietUntil = mb.quietUntil.Add(stalled)
				mb.quiet = now.Before(mb.quietUntil) // else shown: emitLocked below says so
			}
			// A suspicion our memberlist does not share was refuted in a way we missed; one
			// only heard of (hearsay) was not, or our memberlist would have heard the node's
			// refutation: it timed out into a death.
			if now.Sub(mb.since) > maxSusp {
				mb.state, mb.since, mb.updated = api.Alive, now, now
				if mb.hearsay {
					mb.state = api.Dead
				}
				changed = true
			}
		case api.Dead, api.Left:
			if now.Sub(mb.since) > m.t.retainGone {
				delete(m.members, name)
				changed = true
				continue
			}
		}
		// A suspicion whose grace just ended is news to the view, not only an event.
		was := mb.emitted
		m.emitLocked(mb)
		if mb.emitted != was {
			changed = true
		}

		// The metadata names a document we do not hold: wait a moment for gossip if it travels
		// that way, then ask its owner over TCP, again every fetchRetry until it arrives.
		if mb.state != api.Alive || mb.metaErr != nil || mb.meta.DocHash == "" || m.docs[name].hash == mb.meta.DocHash {
			mb.wantSince = time.Time{}
			continue
		}
		if mb.wantSince.IsZero() {
			mb.wantSince = now
		}
		wait := time.Duration(0)
		if mb.meta.Flags&flagDocGossiped != 0 {
			wait = m.t.fetchGrace
		}
		if now.Sub(mb.wantSince) >= wait && now.Sub(mb.fetchAt) >= m.t.fetchRetry {
			mb.fetchAt = now
			fetches = append(fetches, fetch{name, mb.addr})
		}
	}
	for name, e := range m.docs {
		if _, ok := m.members[name]; !ok && now.Sub(e.at) > m.t.retainGone {
			delete(m.docs, name)
		}
	}
	for name, e := range m.pending {
		if _, ok := m.members[name]; !ok && now.Sub(e.at) > m.t.fetchRetry {
			delete(m.pending, name) // no such member came: nothing will ever name it
		}
	}
	if alone := m.aloneLocked(now); alone != m.wasAlone {
		m.wasAlone, changed = alone, true
		if alone {
			m.log.Warn("no member answers: this host is cut off; showing every other member unreachable")
		} else {
			m.log.Info("members answer again")
		}
	}
	if changed {
		m.countAliveLocked()
	}
	m.scheduleDialBacksLocked(now)
	m.mu.Unlock()

	for _, f := range fetches {
		m.sendTo(f.name, f.addr, encodeDocRequest(f.name, m.name))
	}
	m.diag.expire(now)
	if changed {
		signal(m.changed)
	}
}

// saveLastKnown writes the gossip addresses of the members alive now, when they changed. An
// empty list never overwrites a saved one: a member alone still wants to find the old peers.
func (m *Mesh) saveLastKnown() {
	path := m.lastKnownPath()
	if path == "" {
		return
	}
	m.mu.Lock()
	var addrs []string
	for name, mb := range m.members {
		if name != m.name && mb.state == api.Alive && mb.addr != "" {
			addrs = append(addrs, mb.addr)
		}
	}
	slices.Sort(addrs)
	joined := strings.Join(addrs, ",")
	if len(addrs) == 0 || joined == m.savedPeers {
		m.mu.Unlock()
		return
	}
	m.savedPeers = joined
	m.mu.Unlock()
	if err := discovery.SaveLastKnown(path, addrs); err != nil {
		m.log.Warn("saving last-known peers", "err", err)
	}
}
