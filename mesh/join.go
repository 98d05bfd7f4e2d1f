package mesh

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/backoff"
	"github.com/llmkube/mesh/mesh/discovery"
)

// candidate is an address to join, from a seed, the last-known file or discovery.
type candidate struct {
	addr     string
	via      string
	onLink   bool      // mDNS: the address is on one of our subnets
	next     time.Time // next attempt
	backoff  backoff.Backoff
	err      error // of the last attempt; nil after a success
	tries    int
	joined   bool   // a join through it succeeded once
	seq      uint64 // order of arrival
	inflight bool
	pinging  bool // the rejoiner is pinging it (reconnect.go)
}

// Anyone on the LAN can send mDNS answers carrying the mesh's hash (it is in every agent's
// announcement) and any address: 6,000 forged answers once made an agent send 12,416 SYNs to a
// victim in 70 s, and keep going. So candidates found by mDNS — never seeds or last-known peers,
// which the admin or this host chose — are held to these limits:
const (
	maxMDNSCandidates = 64 // at once; more wait in a short queue, newest first
	maxOffLink        = 8  // of which off our subnets (a LAN peer is on the link)
	maxMDNSQueue      = 64
	maxMDNSTries      = 3                // then a candidate that never answered is dropped…
	mdnsCooldown      = 10 * time.Minute // …and its address ignored this long
	maxCooldown       = 1024
	mdnsDialEvery     = 500 * time.Millisecond // mDNS joins: one per interval on average…
	mdnsDialBurst     = 4                      // …and this many at once
)

// mdnsState is the joiner's memory of mDNS candidates. Guarded by Mesh.mu.
type mdnsState struct {
	queue    []queued             // found while the candidate set was full; newest last
	cooldown map[string]time.Time // address → when it was dropped
	tokens   float64              // dial tokens, see mdnsDialBurst
	refilled time.Time
	seq      uint64 // answers taken
}

// queued is an mDNS answer waiting for room, with its order of arrival.
type queued struct {
	p   discovery.Peer
	seq uint64
}

// discover runs the discovery sources until shutdown, turning what they find into candidates.
func (m *Mesh) discover() {
	srcs := []discovery.Source{discovery.Seeds(m.cfg.Seeds, nil)}
	if p := m.lastKnownPath(); p != "" {
		srcs = append(srcs, discovery.LastKnown(p, nil))
	}
	for _, s := range []discovery.Source{m.cfg.Discovery, m.discovered} {
		if s != nil {
			srcs = append(srcs, s)
		}
	}
	src := discovery.Multi(srcs...)
	m.diag.setSource(src)
	if err := src.Run(m.ctx, m.found); err != nil && m.ctx.Err() == nil {
		m.log.Warn("discovery stopped", "err", err)
	}
}

// found takes a peer from discovery.
func (m *Mesh) found(p discovery.Peer) {
	if p.GossipAddr == "" || p.Node == m.name {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.MeshHash != "" && p.MeshHash != api.MeshIDHash(m.cfg.MeshID) {
		if _, ok := m.foreign[p.GossipAddr]; ok || len(m.foreign) < maxSightings {
			m.foreign[p.GossipAddr] = p
		}
		return
	}
	if c, ok := m.candidates[p.GossipAddr]; ok {
		c.next = time.Now() // seen again: try soon, keep the backoff
		signal(m.joinCh)
		return
	}
	m.mdns.seq++
	q := queued{p, m.mdns.seq}
	if p.Via == discovery.ViaMDNS && !m.roomForMDNSLocked(p) {
		if _, cooling := m.mdns.cooldown[p.GossipAddr]; !cooling {
			m.queueMDNSLocked(q)
		}
		return
	}
	m.addCandidateLocked(q, time.Now())
	signal(m.joinCh)
}

func (m *Mesh) addCandidateLocked(q queued, now time.Time) {
	p := q.p
	m.candidates[p.GossipAddr] = &candidate{addr: p.GossipAddr, via: p.Via, onLink: p.OnLink, next: now, backoff: backoff.New(m.t.joinFirst, m.t.joinMax), seq: q.seq}
	m.wakeKeepersLocked()
}

// roomForMDNSLocked says whether an mDNS peer may become a candidate now.
func (m *Mesh) roomForMDNSLocked(p discovery.Peer) bool {
	if at, ok := m.mdns.cooldown[p.GossipAddr]; ok {
		if time.Since(at) < mdnsCooldown {
			return false
		}
		delete(m.mdns.cooldown, p.GossipAddr)
	}
	all, off := 0, 0
	for _, c := range m.candidates {
		if c.via == discovery.ViaMDNS {
			all++
			if !c.onLink {
				off++
			}
		}
	}
	return all < maxMDNSCandidates && (p.OnLink || off < maxOffLink)
}

// queueMDNSLocked keeps a peer that found no room, newest last: a burst of forgeries must not
// bury the answer that came after it.
func (m *Mesh) queueMDNSLocked(q queued) {
	m.mdns.queue = slices.DeleteFunc(m.mdns.queue, func(o queued) bool { return o.p.GossipAddr == q.p.GossipAddr })
	m.mdns.queue = append(m.mdns.queue, q)
	if len(m.mdns.queue) > maxMDNSQueue {
		m.mdns.queue = m.mdns.queue[1:]
	}
}

// dropMDNSLocked forgets an mDNS candidate that never answered, and lets the newest queued
// peer that fits take its place.
func (m *Mesh) dropMDNSLocked(c *candidate) {
	delete(m.candidates, c.addr)
	now := time.Now()
	for addr, at := range m.mdns.cooldown {
		if now.Sub(at) >= mdnsCooldown {
			delete(m.mdns.cooldown, addr)
		}
	}
	if len(m.mdns.cooldown) < maxCooldown {
		m.mdns.cooldown[c.addr] = now
	}
	for i := len(m.mdns.queue) - 1; i >= 0; i-- {
		q := m.mdns.queue[i]
		if _, ok := m.candidates[q.p.GossipAddr]; ok || !m.roomForMDNSLocked(q.p) {
			continue
		}
		m.mdns.queue = slices.Delete(m.mdns.queue, i, i+1)
		m.addCandidateLocked(q, now)
		return
	}
}

// mdnsTokenLocked takes a dial token for an mDNS candidate, if one is left.
func (m *Mesh) mdnsTokenLocked(now time.Time) bool {
	s := &m.mdns
	if s.refilled.IsZero() {
		s.tokens = mdnsDialBurst
	} else {
		s.tokens = min(mdnsDialBurst, s.tokens+float64(now.Sub(s.refilled))/float64(mdnsDialEvery))
	}
	s.refilled = now
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

// joining runs join, a memberlist Join, counted as in flight so that Leave can wait for it,
// unless Leave has begun: then it does not run it, and reports so.
func (m *Mesh) joining(join func()) bool {
	m.mu.Lock()
	if m.leaving.Load() {
		m.mu.Unlock()
		return false
	}
	if m.joins == 0 {
		m.joinsIdle = make(chan struct{})
	}
	m.joins++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.joins--; m.joins == 0 {
			close(m.joinsIdle)
		}
	}()
	join()
	return true
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// joiner joins the candidates that are not members yet, each with its own capped exponential
// backoff (with jitter, so hosts rebooted together do not retry in lockstep). A candidate
// that is a member is left alone; if it dies, it is tried again.
func (m *Mesh) joiner() {
	timer := time.NewTimer(m.t.joinFirst)
	defer timer.Stop()
	self := m.GossipAddr()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.joinCh:
		case <-timer.C:
		}
		now := time.Now()
		next := now.Add(m.t.joinMax)
		m.mu.Lock()
		member := map[string]bool{}
		for _, mb := range m.members {
			if mb.state == api.Alive || mb.state == api.Suspect {
				member[mb.addr] = true
			}
		}
		var due []*candidate
		for _, c := range m.candidates {
			if c.addr == self || c.inflight {
				continue
			}
			if member[c.addr] {
				c.err, c.joined = nil, true
				c.backoff.Reset()
				continue
			}
			if c.next.After(now) {
				next = minTime(next, c.next)
				continue
			}
			due = append(due, c)
		}
		// mDNS candidates on our subnets first, then the least tried, then the newest (a flood
		// of forgeries must not hold back the answer after it), as dial tokens allow.
		slices.SortFunc(due, func(a, b *candidate) int {
			return cmp.Or(cmp.Compare(b2i(!a.onLink), b2i(!b.onLink)), cmp.Compare(a.tries, b.tries), cmp.Compare(b.seq, a.seq))
		})
		for _, c := range due {
			if c.via == discovery.ViaMDNS && !m.mdnsTokenLocked(now) {
				next = minTime(next, now.Add(mdnsDialEvery))
				continue
			}
			c.inflight = true
			addr := c.addr
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.tryJoin(addr)
			}()
		}
		m.mu.Unlock()
		timer.Reset(max(time.Until(next), m.t.tick))
	}
}

func (m *Mesh) tryJoin(addr string) {
	var err error
	started := m.joining(func() { _, err = m.ml.Join([]string{addr}) })
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.candidates[addr]
	if c == nil {
		return
	}
	c.inflight = false
	if !started {
		return // leaving
	}
	c.tries++
	if err == nil {
		m.answered()
		c.err = nil
		c.backoff.Reset()
		c.next = time.Now().Add(m.t.joinMax)
		m.log.Info("joined the mesh through a peer", "peer", addr, "via", c.via)
		return
	}
	c.err = joinError(err)
	if c.via == discovery.ViaMDNS && !c.joined && (c.tries >= maxMDNSTries || len(m.mdns.queue) > 0) {
		// Never answered: forged, or gone. A queued peer gets its place.
		m.dropMDNSLocked(c)
		signal(m.joinCh)
		return
	}
	c.next = time.Now().Add(backoff.Jitter(c.backoff.Next()))
	if c.tries == 1 || c.backoff.AtMax() {
		m.log.Warn("could not join peer; retrying", "peer", addr, "via", c.via, "err", c.err, "retry_in", c.backoff.Current())
	}
	signal(m.joinCh)
}

// joinError strips memberlist's multierror framing ("1 error occurred:\n\t* Failed to join
// …: …") down to the cause.
func joinError(err error) error {
	s := err.Error()
	if i := strings.LastIndex(s, "* "); i >= 0 {
		s = s[i+2:]
	}
	s = strings.TrimSpace(s)
	const prefix = "failed to join " // "Failed to join" in older memberlist versions
	if len(s) > len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		if _, cause, ok := strings.Cut(s[len(prefix):], ": "); ok {
			s = cause
		}
	}
	return joinErr(s)
}

type joinErr string

func (e joinErr) Error() string { return string(e) }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
