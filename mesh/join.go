package mesh

import (
	"math/rand/v2"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// candidate is an address to join, from a seed, the last-known file or discovery.
type candidate struct {
	addr     string
	via      string
	next     time.Time // next attempt
	backoff  time.Duration
	err      error // of the last attempt; nil after a success
	tries    int
	inflight bool
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
		m.foreign[p.GossipAddr] = p
		return
	}
	if c, ok := m.candidates[p.GossipAddr]; ok {
		c.next = time.Now() // seen again: try soon, keep the backoff
		signal(m.joinCh)
		return
	}
	m.candidates[p.GossipAddr] = &candidate{addr: p.GossipAddr, via: p.Via, next: time.Now(), backoff: m.t.joinFirst}
	signal(m.joinCh)
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
		for _, c := range m.candidates {
			if c.addr == self || c.inflight {
				continue
			}
			if member[c.addr] {
				c.err, c.backoff = nil, m.t.joinFirst
				continue
			}
			if c.next.After(now) {
				next = minTime(next, c.next)
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
	_, err := m.ml.Join([]string{addr})
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.candidates[addr]
	if c == nil {
		return
	}
	c.inflight = false
	c.tries++
	if err == nil {
		c.err, c.backoff = nil, m.t.joinFirst
		c.next = time.Now().Add(m.t.joinMax)
		m.log.Info("joined the mesh through a peer", "peer", addr, "via", c.via)
		return
	}
	c.err = joinError(err)
	jitter := time.Duration(rand.Int64N(int64(c.backoff)/4 + 1))
	c.next = time.Now().Add(c.backoff + jitter)
	c.backoff = min(c.backoff*2, m.t.joinMax)
	if c.tries == 1 || c.backoff == m.t.joinMax {
		m.log.Warn("could not join peer; retrying", "peer", addr, "via", c.via, "err", c.err, "retry_in", c.backoff)
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

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
