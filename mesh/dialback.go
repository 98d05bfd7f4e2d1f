package mesh

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
)

// maxDialBacks bounds the checks in flight, so a mesh of 100 agents appearing at once does not
// open 100 connections from every member.
const maxDialBacks = 8

// Reachability of an agent's API address, checked from here.
const (
	reachUnknown = iota
	reachOK
	reachFailed
)

type reachState struct {
	addr     string // the API address these results are about
	status   int
	err      string
	at       time.Time // last check finished
	inflight bool
}

// defaultDialBack asks GET /healthz at addr; any HTTP answer, whatever its status, shows the
// address answers (a 503 is an unhealthy agent, not an unreachable one) — unless it comes from
// another agent than node (api.NodeHeader): an address that leads elsewhere, such as a loopback
// advertisement that sends every checker to its own agent, is not node's. With the sealed
// channel (Config.Seal) it asks over TLS, and the handshake checks the answerer is node holding
// the key node gossips.
func (m *Mesh) defaultDialBack(ctx context.Context, node, addr string) error {
	scheme, client := "http://", http.DefaultClient
	if id := m.cfg.Seal; id != nil {
		m.mu.Lock()
		var key []byte
		if mb := m.members[node]; mb != nil {
			key = mb.meta.SealKey
		}
		m.mu.Unlock()
		// One connection per check: a check every few minutes keeps nothing open between them.
		scheme, client = "https://", &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
			TLSClientConfig: id.ClientConfig(seal.Peer{Name: node, KeyID: key})}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+addr+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if got := resp.Header.Get(api.NodeHeader); got != "" && got != node {
		return fmt.Errorf("it is agent %.64q that answers there, not %s: the address leads to another host (a loopback address reaches the checker's own agent)", got, node)
	}
	return nil
}

// dialer is the dial-back in use: Config.DialBack, or GET /healthz with the answerer's name checked.
func (m *Mesh) dialer() func(ctx context.Context, node, addr string) error {
	if d := m.cfg.DialBack; d != nil {
		return func(ctx context.Context, _, addr string) error { return d(ctx, addr) }
	}
	return m.defaultDialBack
}

// sealKey is the fingerprint of this member's sealed-channel key, nil without one.
func (m *Mesh) sealKey() []byte {
	if m.cfg.Seal == nil {
		return nil
	}
	return m.cfg.Seal.KeyID()
}

// scheduleDialBacksLocked starts the checks that are due: an agent that appeared or changed
// its API address at once, one that did not answer every dialRetry, one that answered every
// dialRecheck. It returns next, or when the next check falls due if sooner; a check that
// finishes wakes the housekeeper (its next is known only then, and one waiting for a free
// slot may start).
func (m *Mesh) scheduleDialBacksLocked(now, next time.Time) time.Time {
	inflight := 0
	for _, mb := range m.members {
		if mb.reach.inflight {
			inflight++
		}
	}
	for _, mb := range m.members {
		if inflight >= maxDialBacks {
			return next
		}
		if mb.name == m.name || mb.state != api.Alive || !mb.isAgent() || mb.meta.APIAddr == "" || mb.reach.inflight {
			continue
		}
		r := &mb.reach
		switch {
		case r.addr != mb.meta.APIAddr:
			*r = reachState{addr: mb.meta.APIAddr}
		case r.status == reachUnknown:
		case r.status == reachFailed && now.Sub(r.at) >= m.t.dialRetry:
		case r.status == reachOK && now.Sub(r.at) >= m.t.dialRecheck:
		case r.status == reachFailed:
			next = minTime(next, r.at.Add(m.t.dialRetry))
			continue
		default:
			next = minTime(next, r.at.Add(m.t.dialRecheck))
			continue
		}
		r.inflight = true
		inflight++
		name, addr := mb.name, r.addr
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.dialBack(name, addr)
		}()
	}
	return next
}

func (m *Mesh) dialBack(name, addr string) {
	ctx, cancel := context.WithTimeout(m.ctx, m.t.dialTimeout)
	err := m.dialer()(ctx, name, addr)
	cancel()
	if m.ctx.Err() != nil {
		return // shutting down: the result means nothing
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[name]
	if mb == nil || mb.reach.addr != addr {
		return // gone, or moved to another address meanwhile
	}
	r := &mb.reach
	r.inflight, r.at = false, time.Now()
	m.wakeHousekeeperLocked()
	old := r.status
	if err != nil {
		r.status, r.err = reachFailed, err.Error()
	} else {
		r.status, r.err = reachOK, ""
	}
	if old != r.status {
		if err != nil {
			m.log.Warn("agent API address does not answer", "member", name, "api", addr, "err", err)
		}
		mb.updated = r.at
		m.emitLocked(mb)
		signal(m.changed)
	}
}

// recheck dials the given agents now, for a fresh doctor's report; bounded by ctx.
func (m *Mesh) recheck(ctx context.Context, addrs map[string]string) map[string]error {
	dial := m.dialer()
	type result struct {
		name string
		err  error
	}
	ch := make(chan result, len(addrs))
	sem := make(chan struct{}, maxDialBacks)
	for name, addr := range addrs {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, m.t.dialTimeout)
			defer cancel()
			ch <- result{name, dial(dctx, name, addr)}
		}()
	}
	out := map[string]error{}
	for range addrs {
		r := <-ch
		out[r.name] = r.err
	}
	return out
}
