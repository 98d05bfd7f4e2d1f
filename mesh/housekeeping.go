package mesh

import (
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// housekeeper does everything that is due rather than triggered: announcing deaths after
// their grace, expiring suspicions memberlist must have cleared, forgetting long-gone members,
// fetching documents we are missing, checking API addresses, saving last-known peers.
//
// It runs when the next of these falls due (housekeep returns when), or at once when
// something about another member changes (wakeHousekeeperLocked), never on a fixed tick: in
// a mesh at rest nothing is due for seconds to minutes (the next dial-back recheck, the next
// save), and ten rounds a second were most of what an idle agent did beyond a bare memberlist
// node (BENCHMARKS.md). Only while a suspicion's grace runs does it run every tick, as before:
// the grace counts only time this process ran, and a stall shows only as a late round (see
// housekeep).
func (m *Mesh) housekeeper() {
	timer := time.NewTimer(m.t.tick)
	defer timer.Stop()
	lastSave, last := time.Now(), time.Now()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-timer.C:
		case <-m.keepWake:
			// Rounds stay at least a tick apart, as on the old fixed tick: a burst of changes
			// (a mesh of 100 joining) costs one round a tick, not one per change.
			if soonest := last.Add(m.t.tick); time.Now().Before(soonest) {
				timer.Reset(time.Until(soonest))
				continue
			}
		}
		now := time.Now() // not the timer's: it may have waited in the channel
		last = now
		if now.Sub(lastSave) >= m.t.saveEvery {
			lastSave = now
			m.saveLastKnown()
			m.diag.expire(now)
		}
		next := m.housekeep(now, lastSave.Add(m.t.saveEvery))
		timer.Reset(next.Sub(time.Now()))
	}
}

// wakeHousekeeperLocked runs the housekeeper now: something about another member changed
// that may make work due sooner than it planned (a grace to time, a death to announce, a
// document to fetch, an API address to check). Whatever changes what housekeep looks at,
// other than the clock, calls it.
func (m *Mesh) wakeHousekeeperLocked() {
	// The round is due now, or a tick after the last one: a stall from then on is a stall
	// (see housekeep).
	if at := maxTime(time.Now(), m.lastKeep.Add(m.t.tick)); at.Before(m.keepDue) {
		m.keepDue = at
	}
	signal(m.keepWake)
}

// wakeKeepersLocked wakes the housekeeper and the rejoiner, which waits while no member is
// dead and no join candidate is to be pinged: a member changed, arrived, died or left.
func (m *Mesh) wakeKeepersLocked() {
	m.wakeHousekeeperLocked()
	signal(m.rejoinWake)
}

// housekeep does one round, and returns when the next is due: the soonest of what it found
// pending (a grace's end, a suspicion's or a gone member's expiry, a death to announce, a
// document's fetch, a dial-back, the cut-off check) and idleDue (the next save). Whatever can
// make something due sooner, other than the clock, wakes the housekeeper.
func (m *Mesh) housekeep(now, idleDue time.Time) time.Time {
	r := &round{now: now, next: idleDue, maxSusp: m.maxSuspicion()}

	m.mu.Lock()
	// A round this late means this process did not run meanwhile (a busy machine):
	// refutations may wait unread in its socket. A suspicion's grace counts only time we could
	// hear one, so every grace still running is lengthened by the stall. Seen in the e2e LAN:
	// an agent stalled 2.4 s showed a healthy peer suspect on waking, its refutation read 3 ms
	// later. The round was due at keepDue: when the last one planned it, or when something
	// woke it sooner.
	r.stalled = now.Sub(m.keepDue)
	if r.stalled <= m.t.tick {
		r.stalled = 0 // the timer's usual lateness
	}
	m.lastKeep = now
	for name, mb := range m.members {
		if name == m.name || m.expireLocked(r, name, mb) {
			continue
		}
		// A suspicion whose grace just ended is news to the view, not only an event.
		was := mb.emitted
		m.emitLocked(mb)
		if mb.emitted != was {
			r.changed = true
		}
		if live, _ := mb.liveness(); live == api.Dead && mb.emitted != api.Dead {
			r.due(mb.since.Add(m.t.deadGrace)) // emitLocked waits for a leave notice
		}
		m.wantDocLocked(r, name, mb)
	}
	m.forgetStraysLocked(r)
	m.watchCutOffLocked(r)
	if r.changed {
		m.countAliveLocked()
	}
	next := m.scheduleDialBacksLocked(now, r.next)
	next = maxTime(next, now.Add(m.t.tick)) // never sooner than the old fixed tick
	m.keepDue = next
	m.mu.Unlock()

	for _, f := range r.fetches {
		m.sendTo(f.name, f.addr, encodeDocRequest(f.name, m.name))
	}
	if r.changed {
		signal(m.changed)
	}
	return next
}

// round is what one housekeeping round found: when the next is due, whether the view
// changed, and the documents to ask their owners for once the lock is released.
type round struct {
	now, next time.Time
	stalled   time.Duration // how much later than planned the round runs
	maxSusp   time.Duration
	changed   bool
	fetches   []docFetch
}

type docFetch struct{ name, addr string }

func (r *round) due(t time.Time) { r.next = minTime(r.next, t) }

// expireLocked ends what has run its time for one other member: a suspicion or a gone
// member's retention. It reports whether the member was deleted.
func (m *Mesh) expireLocked(r *round, name string, mb *member) (deleted bool) {
	switch mb.state {
	case api.Suspect:
		if mb.quiet {
			mb.quietUntil = mb.quietUntil.Add(r.stalled)
			mb.quiet = r.now.Before(mb.quietUntil) // else shown: emitLocked says so
		}
		// A suspicion our memberlist does not share was refuted in a way we missed; one
		// only heard of (hearsay) was not, or our memberlist would have heard the node's
		// refutation: it timed out into a death.
		if r.now.Sub(mb.since) > r.maxSusp {
			mb.state, mb.since, mb.updated = api.Alive, r.now, r.now
			if mb.hearsay {
				mb.state = api.Dead
				signal(m.rejoinWake)
			}
			r.changed = true
		} else {
			r.due(mb.since.Add(r.maxSusp + time.Millisecond))
		}
		if mb.quiet {
			// Round by round, not at quietUntil: a stall is seen only as a late round.
			r.due(r.now.Add(m.t.tick))
		}
	case api.Dead, api.Left:
		if r.now.Sub(mb.since) > m.t.retainGone {
			delete(m.members, name)
			r.changed = true
			return true
		}
		r.due(mb.since.Add(m.t.retainGone + time.Millisecond))
	}
	return false
}

// wantDocLocked plans the fetch of a document a member's metadata names and we do not hold:
// wait a moment for gossip if it travels that way, then ask its owner over TCP, again every
// fetchRetry until it arrives.
func (m *Mesh) wantDocLocked(r *round, name string, mb *member) {
	if mb.state != api.Alive || mb.metaErr != nil || mb.meta.DocHash == "" || m.docs[name].hash == mb.meta.DocHash {
		mb.wantSince = time.Time{}
		return
	}
	if mb.wantSince.IsZero() {
		mb.wantSince = r.now
	}
	wait := time.Duration(0)
	if mb.meta.Flags&flagDocGossiped != 0 {
		wait = m.t.fetchGrace
	}
	if r.now.Sub(mb.wantSince) >= wait && r.now.Sub(mb.fetchAt) >= m.t.fetchRetry {
		mb.fetchAt = r.now
		r.fetches = append(r.fetches, docFetch{name, mb.addr})
	}
	r.due(maxTime(mb.wantSince.Add(wait), mb.fetchAt.Add(m.t.fetchRetry)))
}

// forgetStraysLocked drops, once they have waited long enough, the documents of members that
// are gone and the pending documents of members that never came.
func (m *Mesh) forgetStraysLocked(r *round) {
	for name, e := range m.docs {
		if _, ok := m.members[name]; !ok {
			if r.now.Sub(e.at) > m.t.retainGone {
				delete(m.docs, name)
			} else {
				r.due(e.at.Add(m.t.retainGone + time.Millisecond))
			}
		}
	}
	for name, e := range m.pending {
		if _, ok := m.members[name]; !ok {
			if r.now.Sub(e.at) > m.t.fetchRetry {
				delete(m.pending, name) // no such member came: nothing will ever name it
			} else {
				r.due(e.at.Add(m.t.fetchRetry + time.Millisecond))
			}
		}
	}
}

// watchCutOffLocked notices this host being cut off from every other member, or reached again.
func (m *Mesh) watchCutOffLocked(r *round) {
	if alone := m.aloneLocked(r.now); alone != m.wasAlone {
		m.wasAlone, r.changed = alone, true
		m.cutOff.Store(alone)
		if alone {
			m.log.Warn("no member answers: this host is cut off; showing every other member unreachable")
		} else {
			m.log.Info("members answer again")
		}
	}
	if !m.wasAlone && m.lastFailed.Load() > m.lastAck.Load() {
		// A failed probe and no ack since: cut off once nothing is heard for aloneAfter (a
		// time already past means no peer to be cut off from: one arriving wakes us). Another
		// failed probe wakes the housekeeper (suspected), and so does, once cut off, any sign
		// of life (heard).
		heard := max(m.lastAck.Load(), m.lastPinged.Load())
		if at := time.Unix(0, heard).Add(m.t.aloneAfter + time.Millisecond); at.After(r.now) {
			r.due(at)
		}
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
