package mesh

import (
	"context"
	"path/filepath"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
	"github.com/llmkube/mesh/mesh/doctor"
)

// Doctor reports why peers may be invisible or unusable, as this member sees it (see
// doctor.Report). It first dials again every agent API address that did not answer, within ctx,
// so the report is fresh.
func (m *Mesh) Doctor(ctx context.Context) api.DoctorReport {
	m.recheckUnreachable(ctx)
	f := doctor.Facts{
		Mesh: m.cfg.MeshID, Node: m.name, Gossip: m.GossipAddr(), Members: m.ml.NumMembers(),
		Agent: m.cfg.Role == api.RoleAgent, APIAddr: m.cfg.APIAddr, RetainGone: m.t.retainGone,
		NameFile:   nodeNameFile + " in its state dir",
		ProbeEvery: time.Duration(max(m.nAlive.Load(), 1)) * m.mlc.ProbeInterval,
	}
	if m.cfg.StateDir != "" {
		f.NameFile = filepath.Join(m.cfg.StateDir, nodeNameFile)
	}
	src := m.diag.observe(&f)
	m.observe(&f)
	if src != nil {
		f.FromDiscovery = src.Findings()
	}
	return doctor.Report(f, time.Now())
}

// observe adds what membership knows to f.
func (m *Mesh) observe(f *doctor.Facts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f.Alone = m.nAlive.Load() <= 1
	f.Cut = m.aloneLocked(time.Now())
	if f.Cut {
		f.PeersHad = m.peersHadLocked()
		f.LastHeard = time.Unix(0, max(m.lastAck.Load(), m.lastPinged.Load()))
	}
	for _, c := range m.candidates {
		if c.err != nil {
			f.Candidates = append(f.Candidates, doctor.Candidate{Addr: c.addr, Via: c.via, Err: c.err, Tries: c.tries})
		}
	}
	f.NoCandidates = len(m.candidates) == 0
	f.NoDiscovery = m.cfg.Discovery == nil && m.discovered == nil
	for _, mb := range m.members {
		if mb.name == m.name {
			continue
		}
		live, reason := mb.liveness()
		o := doctor.Member{Name: mb.name, Agent: mb.isAgent(), Live: live, Reason: reason, Addr: mb.addr,
			APIAddr: mb.meta.APIAddr, Since: mb.since, MetaErr: mb.metaErr}
		if e, ok := m.docs[mb.name]; ok {
			o.Placements = e.doc.Placements
		}
		f.Others = append(f.Others, o)
	}
	f.ForeignMDNS = make(map[string]string, len(m.foreign))
	for addr, p := range m.foreign {
		f.ForeignMDNS[addr] = p.Node
	}
}

// observe adds what the diagnostics saw to f, and returns the discovery source to ask for its
// own findings.
func (d *diagnostics) observe(f *doctor.Facts) discovery.Source {
	d.mu.Lock()
	defer d.mu.Unlock()
	f.Decrypt, f.Label, f.UDP, f.Conflicts = sightings(d.decrypt), sightings(d.label), sightings(d.udp), sightings(d.conflicts)
	return d.src
}

// sightings copies a table of sightings, for reading outside the diagnostics' lock.
func sightings(in map[string]*doctor.Sighting) map[string]doctor.Sighting {
	out := make(map[string]doctor.Sighting, len(in))
	for k, s := range in {
		out[k] = *s
	}
	return out
}

// recheckUnreachable dials the unreachable agents again and records the answers.
func (m *Mesh) recheckUnreachable(ctx context.Context) {
	m.mu.Lock()
	addrs := map[string]string{}
	for _, mb := range m.members {
		if live, _ := mb.liveness(); live == api.Unreachable && mb.meta.APIAddr != "" && !mb.reach.inflight {
			addrs[mb.name] = mb.meta.APIAddr
		}
	}
	m.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	results := m.recheck(ctx, addrs)
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, err := range results {
		mb := m.members[name]
		if mb == nil || mb.reach.addr != addrs[name] || mb.reach.inflight || err != nil {
			continue
		}
		mb.reach.status, mb.reach.err, mb.reach.at = reachOK, "", time.Now()
		m.emitLocked(mb)
		signal(m.changed)
	}
}
