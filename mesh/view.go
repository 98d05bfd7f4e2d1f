package mesh

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// View is an immutable snapshot of the mesh as this member sees it: every member with its
// liveness, capacity and placements. It marshals to JSON as api.MeshView (GET /v1/mesh).
// Treat everything reachable from it as read-only: snapshots share memory.
//
// Placements of a member that is not alive and reachable (suspect, dead, left, unreachable)
// have State api.StateUnavailable, Code api.CodeUnreachable, the state they had in Was (see
// WasState), and a Reason that says so for people: "was ready: host dead".
type View struct {
	api.MeshView
	index    map[string]int
	verified []bool // per member: alive and its API answered (or this member itself)
}

// Member returns the member called name.
func (v View) Member(name string) (api.Member, bool) {
	i, ok := v.index[name]
	if !ok {
		return api.Member{}, false
	}
	return v.Members[i], true
}

// Agents returns the agents — placement targets — whatever their liveness, by name.
func (v View) Agents() []api.Member {
	var out []api.Member
	for _, mb := range v.Members {
		if mb.Role == api.RoleAgent {
			out = append(out, mb)
		}
	}
	return out
}

// Placements returns every placement of every member, unavailable ones included.
func (v View) Placements() []api.Placement {
	var out []api.Placement
	for _, mb := range v.Members {
		out = append(out, mb.Placements...)
	}
	return out
}

// Ready returns the placements serving model that can take a request now: state ready, on an
// agent that is alive and whose API address answered. namespace "" matches every namespace.
// Never stale: a member that stops answering leaves this list at once.
func (v View) Ready(namespace, model string) []api.Placement {
	var out []api.Placement
	for i, mb := range v.Members {
		if !v.verified[i] || mb.Liveness != api.Alive || mb.Role != api.RoleAgent {
			continue
		}
		for _, p := range mb.Placements {
			if p.State == api.StateReady && p.Model == model && p.Part == nil && (namespace == "" || p.Namespace == namespace) {
				out = append(out, p)
			}
		}
	}
	return out
}

// WasState returns the state an unavailable placement had before its host stopped answering.
func WasState(p api.Placement) (api.PlacementState, bool) {
	if p.State != api.StateUnavailable || p.Was == "" {
		return "", false
	}
	return p.Was, true
}

// View returns a fresh snapshot.
func (m *Mesh) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.viewLocked()
}

func (m *Mesh) viewLocked() View {
	now := time.Now()
	return m.viewAsLocked(now, m.aloneLocked(now))
}

// viewAsLocked builds the view at now, with alone as aloneLocked answered.
func (m *Mesh) viewAsLocked(now time.Time, alone bool) View {
	v := View{
		MeshView: api.MeshView{Mesh: m.cfg.MeshID, Self: m.name, At: now},
		index:    make(map[string]int, len(m.members)),
	}
	for _, name := range m.namesLocked() {
		mb := m.members[name]
		if mb.consoleLeft() {
			continue // a console that came and went (every headless `mesh …` run) is not a host
		}
		out, verified := m.memberLocked(mb, alone)
		v.index[name] = len(v.Members)
		v.Members = append(v.Members, out)
		v.verified = append(v.verified, verified)
	}
	return v
}

// Ready is View().Ready(namespace, model), computed for the one model without building the
// rest of a view: a relaying agent asks it per request, and building a whole view (every
// member's host, placements and reasons, copied and sorted) was nearly half of its routing's
// CPU (a profile of BenchmarkFirstToken's two hops).
func (m *Mesh) Ready(namespace, model string) []api.Placement {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.readyLocked(namespace, model, m.aloneLocked(time.Now()))
}

func (m *Mesh) readyLocked(namespace, model string, alone bool) []api.Placement {
	var out []api.Placement
	m.eachAgentLocked(alone, func(mb *member, live api.Liveness, verified bool) {
		if !verified || live != api.Alive {
			return
		}
		for _, p := range m.placementsOfLocked(mb, live) {
			if p.State == api.StateReady && p.Model == model && p.Part == nil && (namespace == "" || p.Namespace == namespace) {
				out = append(out, p)
			}
		}
	})
	return out
}

// Member is View().Member(name), without building the rest of a view.
func (m *Mesh) Member(name string) (api.Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.memberNamedLocked(name, m.aloneLocked(time.Now()))
}

func (m *Mesh) memberNamedLocked(name string, alone bool) (api.Member, bool) {
	mb := m.members[name]
	if mb == nil || mb.consoleLeft() {
		return api.Member{}, false
	}
	out, _ := m.memberLocked(mb, alone)
	return out, true
}

// Placements is View().Placements(), without building the rest of a view.
func (m *Mesh) Placements() []api.Placement {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.placementsLocked(m.aloneLocked(time.Now()))
}

func (m *Mesh) placementsLocked(alone bool) []api.Placement {
	var out []api.Placement
	m.eachAgentLocked(alone, func(mb *member, live api.Liveness, _ bool) {
		out = append(out, m.placementsOfLocked(mb, live)...)
	})
	return out
}

// eachAgentLocked calls f with each agent a view shows, in its order, with its liveness and
// whether requests may be routed to it.
func (m *Mesh) eachAgentLocked(alone bool, f func(mb *member, live api.Liveness, verified bool)) {
	for _, name := range m.namesLocked() {
		mb := m.members[name]
		if mb.consoleLeft() || !mb.isAgent() {
			continue
		}
		live, _, verified := m.livenessLocked(mb, alone)
		f(mb, live, verified)
	}
}

// namesLocked is the members' names in order: a view's order, and so the routing's among
// equals.
func (m *Mesh) namesLocked() []string {
	names := make([]string, 0, len(m.members))
	for name := range m.members {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// livenessLocked is mb's liveness as a view shows it, why when it is not plain, and whether
// requests may be routed to it; alone is aloneLocked's answer: a member cut off from the mesh
// shows every other member unreachable.
func (m *Mesh) livenessLocked(mb *member, alone bool) (live api.Liveness, reason string, verified bool) {
	live, reason = mb.liveness()
	verified = mb.verified(m.name)
	if alone && mb.name != m.name && !mb.hearsay && (live == api.Alive || live == api.Suspect || live == api.Unreachable) {
		live, verified = api.Unreachable, false
		reason = "no member has answered this host for " + m.t.aloneAfter.String() + ": its own network may be down (cut off)"
	}
	return live, reason, verified
}

// memberLocked is mb as a view shows it, and whether requests may be routed to it.
func (m *Mesh) memberLocked(mb *member, alone bool) (api.Member, bool) {
	live, reason, verified := m.livenessLocked(mb, alone)
	var reasons []string
	if mb.metaErr != nil {
		reasons = append(reasons, mb.metaErr.Error())
	}
	if c := m.diag.conflictOf(mb.name); c != "" {
		reasons = append(reasons, c)
	}
	switch {
	case reason != "":
		reasons = append(reasons, reason)
	case live == api.Alive && mb.isAgent() && !verified:
		reasons = append(reasons, "API address "+mb.meta.APIAddr+" not checked yet")
	}
	out := api.Member{Name: mb.name, Role: mb.meta.Role, Addr: mb.addr, Liveness: live, Reason: strings.Join(reasons, "; "), Updated: mb.updated,
		SealKey: hex.EncodeToString(mb.meta.SealKey), RTTMillis: float64(mb.linkRTT.value()) / float64(time.Millisecond)}
	if mb.isAgent() {
		out.Host, out.Placements = m.hostLocked(mb, live)
	}
	return out, verified
}

// hostLocked joins what the metadata and the state document say of an agent. The document has
// everything; metadata that names another document (still on its way) updates the capacity
// figures it carries.
func (m *Mesh) hostLocked(mb *member, live api.Liveness) (*api.Host, []api.Placement) {
	e, ok := m.docs[mb.name]
	if !ok || e.doc.Host == nil {
		return mb.meta.host(mb.name), nil
	}
	h := *e.doc.Host
	h.Name = mb.name
	if e.hash != mb.meta.DocHash {
		h.Memory, h.Placements, h.APIAddr = mb.meta.Memory, mb.meta.Placements, mb.meta.APIAddr
	}
	return &h, m.placementsOfLocked(mb, live)
}

// placementsOfLocked is the placements of an agent as a view shows them (hostLocked's), without
// a copy of its host.
func (m *Mesh) placementsOfLocked(mb *member, live api.Liveness) []api.Placement {
	e, ok := m.docs[mb.name]
	if !ok || e.doc.Host == nil {
		return nil
	}
	ps := make([]api.Placement, len(e.doc.Placements))
	copy(ps, e.doc.Placements)
	// The document is not the one the node's metadata names, and it shows more placements
	// ready than the node now counts (one went down; a document of the node's previous run is
	// dropped outright, see updateMetaLocked):
	// which of them are still ready is in the document on its way. Never ready from stale
	// state. Metadata counting as many ready or more (a model added, figures updated) leaves
	// the older document's ready ones be, so an ordinary change does not flicker.
	behind := e.hash != mb.meta.DocHash && readyCount(ps) > mb.meta.Ready
	for i := range ps {
		ps[i].Host = mb.name
		switch {
		case live != api.Alive:
			ps[i].Reason = fmt.Sprintf("was %s: host %s", ps[i].State, live)
			ps[i].Was, ps[i].State = ps[i].State, api.StateUnavailable
			ps[i].Code = api.CodeUnreachable
		case behind && ps[i].State == api.StateReady:
			ps[i].Reason = "was ready: host " + mb.name + " counts fewer ready placements; its newer state is on its way"
			ps[i].Was, ps[i].State = ps[i].State, api.StateUnavailable
			ps[i].Code = api.CodeUnreachable
		}
	}
	slices.SortStableFunc(ps, func(a, b api.Placement) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.ID, b.ID))
	})
	return ps
}

func readyCount(ps []api.Placement) int {
	n := 0
	for _, p := range ps {
		if p.State == api.StateReady {
			n++
		}
	}
	return n
}

// Liveness is a member's liveness now, as a View would show it, without building one: the
// gateway asks it of a forwarded request's owner every tenth of a second. False when the
// member is not known (never seen, or forgotten long after it died).
func (m *Mesh) Liveness(name string) (api.Liveness, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[name]
	if mb == nil {
		return "", false
	}
	live, _ := mb.liveness()
	return live, true
}
