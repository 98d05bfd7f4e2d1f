package mesh

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/statedoc"
)

// What "changed enough to matter" means for SetLocal. Anything an agent reports is published
// when it changes — states, placements, engines, budget, committed and reserved memory — except
// these figures, which wobble continuously and are published only when they move by more than:
const (
	// availStep: Memory.Available follows the page cache. The larger of 128 MiB and 1/32 of the
	// host's memory (256 MiB on an 8 GiB Pi) is well under any model's size, so ranking never
	// misses a real change, and far above the noise.
	availStepMin   = 128 << 20
	availStepShare = 32
	// progressStep: a pull's Progress (and PulledBytes with it) — every 5 points, and at 100 %.
	progressStep = 0.05
	// rateStep: rolling TokensPerS and TTFTMillis — a 20 % change.
	rateStep = 0.20
)

// LastUsed, UpdatedAt and Host.Generation never cause a publication on their own: they change
// on every request.

// localState is what this agent last published. Guarded by Mesh.mu.
type localState struct {
	host       *api.Host // nil until the first SetLocal
	placements []api.Placement
	sig        signature
	gen        uint64 // generation of the last document; the next is higher
}

// SetLocal publishes this agent's state: its host and placements. It is cheap to call often:
// when nothing changed enough to matter (see availStep and friends) it does nothing. Otherwise
// it bumps the document generation, updates the node metadata (size-checked: an error, and
// nothing published, if it cannot fit) and gossips or pushes the document. Consoles publish
// nothing.
func (m *Mesh) SetLocal(host api.Host, placements []api.Placement) error {
	if m.cfg.Role == api.RoleConsole {
		return errors.New("mesh: a console publishes no host state")
	}
	host.Name = m.name
	if host.APIAddr == "" {
		host.APIAddr = m.cfg.APIAddr
	}
	ps := slices.Clone(placements)
	for i := range ps {
		ps[i].Host = m.name
	}
	slices.SortStableFunc(ps, func(a, b api.Placement) int { return cmp.Compare(a.ID, b.ID) })
	sig := newSignature(&host, ps)

	m.mu.Lock()
	if m.local.host != nil && !m.local.sig.differs(sig) {
		m.mu.Unlock()
		return nil
	}
	small, err := m.publishLocked(&host, ps, sig)
	wire := m.docs[m.name].wire
	m.mu.Unlock()
	if err != nil {
		return err
	}
	m.announce(wire, small)
	return nil
}

// publishLocked makes the next document and metadata; on error nothing changes.
func (m *Mesh) publishLocked(h *api.Host, ps []api.Placement, sig signature) (small bool, err error) {
	now := time.Now()
	gen := max(m.local.gen+1, uint64(now.UnixMicro()))
	wire, err := statedoc.Encode(&statedoc.Doc{V: statedoc.Version, Node: m.name, Gen: gen, At: now, Host: h, Placements: ps})
	if err != nil {
		return false, err
	}
	small = len(wire) <= maxGossipDoc
	nm := metaFromHost(h, ps, gen, small)
	nm.Seq = m.startSeq
	hash := statedoc.Hash(wire)
	nm.DocHash = hash
	nm.SealKey = m.sealKey()
	meta, err := encodeMeta(nm)
	if err != nil {
		return false, err
	}
	stored, err := statedoc.Decode(wire) // our own deep copy, shared by no caller
	if err != nil {
		return false, err
	}
	m.local = localState{host: stored.Host, placements: stored.Placements, sig: sig, gen: gen}
	m.meta.Store(&meta)
	m.docs[m.name] = docEntry{doc: stored, wire: wire, hash: hash, at: now}
	if self := m.members[m.name]; self != nil {
		self.setMeta(meta)
		self.updated = now
	}
	return small, nil
}

// announce sends a new local document on its way: gossip if small, and straight to every
// console over TCP, so a console sees it within a round trip. The metadata update waits in the
// publisher: memberlist's UpdateNode blocks until its broadcast has gone out.
func (m *Mesh) announce(wire []byte, small bool) {
	msg := append([]byte{msgDoc}, wire...)
	if small {
		m.queue.QueueBroadcast(&broadcast{name: "doc:" + m.name, msg: msg})
	}
	type target struct{ name, addr string }
	var consoles []target
	m.mu.Lock()
	for _, mb := range m.members {
		if mb.name != m.name && mb.state == api.Alive && mb.metaErr == nil && mb.meta.Role == api.RoleConsole {
			consoles = append(consoles, target{mb.name, mb.addr})
		}
	}
	m.mu.Unlock()
	for _, c := range consoles {
		m.sendTo(c.name, c.addr, msg)
	}
	signal(m.publish)
	signal(m.changed)
}

// publisher re-advertises the metadata through memberlist, one update at a time (a burst of
// changes becomes one update carrying the latest).
func (m *Mesh) publisher() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.publish:
		}
		// UpdateNode waits until the update has gone out; a shutdown must not wait for it.
		sent := make(chan error, 1)
		go func() { sent <- m.ml.UpdateNode(m.t.publishWait) }()
		select {
		case err := <-sent:
			if err != nil {
				m.log.Debug("metadata update not yet gossiped", "err", err)
			}
		case <-m.ctx.Done():
			return
		}
	}
}

// signature is a published state reduced to what decides whether a new one matters.
type signature struct {
	key            []byte // host and placements without the wobbling figures
	total, avail   int64
	progress, tps  []float64
	ttft           []float64
	placementCount int
}

func newSignature(h *api.Host, ps []api.Placement) signature {
	hc := *h
	hc.Memory.Available, hc.Generation = 0, 0
	s := signature{total: h.Memory.Total, avail: h.Memory.Available, placementCount: len(ps)}
	pc := make([]api.Placement, len(ps))
	for i, p := range ps {
		s.progress = append(s.progress, p.Progress)
		s.tps = append(s.tps, p.TokensPerS)
		s.ttft = append(s.ttft, p.TTFTMillis)
		p.Progress, p.PulledBytes, p.TokensPerS, p.TTFTMillis = 0, 0, 0, 0
		p.LastUsed, p.UpdatedAt = time.Time{}, time.Time{}
		pc[i] = p
	}
	// JSON, not reflect.DeepEqual: nil and empty slices, and the monotonic clock reading of a
	// time.Time, must not count as changes.
	s.key, _ = json.Marshal(struct {
		H api.Host
		P []api.Placement
	}{hc, pc})
	return s
}

// differs reports whether b (newer) matters compared with a (published).
func (a signature) differs(b signature) bool {
	if !bytes.Equal(a.key, b.key) || a.placementCount != b.placementCount {
		return true
	}
	step := max(int64(availStepMin), b.total/availStepShare)
	if abs64(b.avail-a.avail) >= step {
		return true
	}
	for i := range a.progress {
		if math.Abs(b.progress[i]-a.progress[i]) >= progressStep || (a.progress[i] >= 1) != (b.progress[i] >= 1) {
			return true
		}
		if relChange(a.tps[i], b.tps[i]) >= rateStep || relChange(a.ttft[i], b.ttft[i]) >= rateStep {
			return true
		}
	}
	return false
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// relChange is |new−old|/old; a first measurement (old 0) is a full change.
func relChange(old, new float64) float64 {
	switch {
	case old == new:
		return 0
	case old == 0:
		return 1
	}
	return math.Abs(new-old) / math.Abs(old)
}
