package mesh

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// Severities of a Finding (the same words discovery uses).
const (
	SeverityError   = discovery.SeverityError
	SeverityWarning = discovery.SeverityWarning
	SeverityInfo    = discovery.SeverityInfo
)

// Finding is one reason peers may be invisible or unusable, with what to do about it.
type Finding struct {
	Severity string `json:"severity"`
	Problem  string `json:"problem"`
	Fix      string `json:"fix"`
}

// DoctorReport explains why peers are not visible: what membership saw go wrong (decrypt
// failures, another mesh's traffic, duplicate names, API addresses that do not answer, seeds
// that refuse the gossip port, UDP blocked) and what discovery found (no multicast-capable
// interface, mDNS answers from another mesh, seeds that do not resolve).
type DoctorReport struct {
	Mesh     string    `json:"mesh"`
	Node     string    `json:"node"`
	Gossip   string    `json:"gossip_addr"`
	Members  int       `json:"members"` // alive, this one included
	At       time.Time `json:"at"`
	Findings []Finding `json:"findings"` // errors first
}

// Doctor builds the report. It first dials again every agent API address that did not
// answer, within ctx, so the report is fresh.
func (m *Mesh) Doctor(ctx context.Context) DoctorReport {
	m.recheckUnreachable(ctx)
	r := DoctorReport{Mesh: m.cfg.MeshID, Node: m.name, Gossip: m.GossipAddr(), Members: m.ml.NumMembers(), At: time.Now()}
	_, port, _ := net.SplitHostPort(r.Gossip)
	add := func(sev, problem, fix string) {
		r.Findings = append(r.Findings, Finding{Severity: sev, Problem: problem, Fix: fix})
	}
	ago := func(t time.Time) string { return time.Since(t).Round(time.Second).String() }
	joinFix := fmt.Sprintf("check the join string: every host of mesh %q must use the same one (`llmkube-agent init` made it)", m.cfg.MeshID)

	d := m.diag
	d.mu.Lock()
	for from, s := range d.decrypt {
		add(SeverityError,
			fmt.Sprintf("%d gossip messages from %s could not be decrypted (last %s ago): that host holds another mesh secret", s.count, from, ago(s.last)),
			joinFix+"; restart the host at "+from+" with it")
	}
	for from, s := range d.label {
		add(SeverityError,
			fmt.Sprintf("%d gossip messages from %s belong to another mesh: another mesh id or secret (last %s ago)", s.count, from, ago(s.last)),
			joinFix+"; if two meshes share this network on purpose, give them different gossip ports")
	}
	for name, s := range d.conflicts {
		file := nodeNameFile + " in its state dir"
		if m.cfg.StateDir != "" {
			file = filepath.Join(m.cfg.StateDir, nodeNameFile)
		}
		add(SeverityError,
			fmt.Sprintf("two nodes claim the name %q: %s (last %s ago); the second is refused", name, s.detail, ago(s.last)),
			fmt.Sprintf("give one of them another name: delete %s (a copied state folder or a cloned disk image carries the name along) or start it with another name, then restart it", file))
	}
	for name, s := range d.udp {
		add(SeverityError,
			fmt.Sprintf("%s answers over TCP but not over UDP (last %s ago): gossip packets are blocked", name, ago(s.last)),
			fmt.Sprintf("open UDP port %s, not only TCP, in the firewalls of %s and of this host", port, name))
	}
	var src discovery.Source = d.src
	d.mu.Unlock()

	m.mu.Lock()
	alone := m.nAlive.Load() <= 1
	for _, c := range m.candidates {
		if c.err == nil {
			continue
		}
		sev := SeverityWarning
		if alone {
			sev = SeverityError
		}
		problem, fix := seedFinding(c, port, joinFix)
		add(sev, problem, fix)
	}
	for _, mb := range m.members {
		if mb.name == m.name {
			continue
		}
		if live, reason := mb.liveness(); live == api.Unreachable {
			_, apiPort, _ := net.SplitHostPort(mb.meta.APIAddr)
			add(SeverityError,
				fmt.Sprintf("agent %s is unreachable: %s", mb.name, reason),
				fmt.Sprintf("start that agent with an API address other hosts can reach (not a loopback or container address), and open TCP port %s in its firewall", cmp.Or(apiPort, "of its API")))
		}
		if mb.metaErr != nil {
			add(SeverityWarning,
				fmt.Sprintf("member %s sent node metadata this build cannot read: %v", mb.name, mb.metaErr),
				"upgrade llmkube on this host: the other member runs a newer version")
		}
	}
	for addr, p := range m.foreign {
		add(SeverityWarning,
			fmt.Sprintf("mDNS: %s (%s) announces another mesh", cmp.Or(p.Node, "a host"), addr),
			joinFix+"; nothing to do if that host belongs to another mesh on purpose")
	}
	nCandidates := len(m.candidates)
	m.mu.Unlock()

	if src != nil {
		for _, f := range src.Findings() {
			add(f.Severity, f.Problem, f.Fix)
		}
	}
	if alone {
		fix := "give --join host:port of a running agent, or see the findings above for why none was found"
		if nCandidates == 0 && m.cfg.Discovery == nil && m.discovered == nil {
			fix = "give --join host:port of a running agent (no seeds, no last-known peers and no discovery are configured)"
		}
		add(SeverityWarning, "this member sees no other member", fix)
	}
	rank := map[string]int{SeverityError: 0, SeverityWarning: 1, SeverityInfo: 2}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(rank[a.Severity], rank[b.Severity]), cmp.Compare(a.Problem, b.Problem))
	})
	api.Sanitize(&r) // findings quote what other hosts announced
	return r
}

// seedFinding explains why joining a candidate failed.
func seedFinding(c *candidate, port, joinFix string) (problem, fix string) {
	what := "seed"
	switch c.via {
	case discovery.ViaLastKnown:
		what = "last-known peer"
	case discovery.ViaMDNS:
		what = "mDNS peer"
	}
	_, peerPort, _ := net.SplitHostPort(c.addr)
	port = cmp.Or(peerPort, port)
	e := strings.ToLower(c.err.Error())
	switch {
	case strings.Contains(e, "refused"):
		return fmt.Sprintf("%s %s refused the gossip port (%d tries): %v", what, c.addr, c.tries, c.err),
			fmt.Sprintf("check that an agent runs there and listens on port %s; if it does, open TCP and UDP %s in its firewall", port, port)
	case strings.Contains(e, "timeout"), strings.Contains(e, "no route"), strings.Contains(e, "unreachable"):
		return fmt.Sprintf("%s %s does not answer on the gossip port (%d tries): %v", what, c.addr, c.tries, c.err),
			fmt.Sprintf("a firewall may drop it: open TCP and UDP port %s on that host, and check the address", port)
	case strings.Contains(e, "decrypt"), strings.Contains(e, "encrypt"), strings.Contains(e, "remote error"):
		return fmt.Sprintf("%s %s rejected us: it holds another mesh secret (%v)", what, c.addr, c.err), joinFix
	case strings.Contains(e, "eof"), strings.Contains(e, "reset"), strings.Contains(e, "closed"):
		return fmt.Sprintf("%s %s hung up on us (%v): it may belong to another mesh", what, c.addr, c.err), joinFix
	}
	return fmt.Sprintf("could not join %s %s (%d tries): %v", what, c.addr, c.tries, c.err),
		"check the address, and that an llmkube agent runs there"
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

// WriteText writes the report for a terminal.
func (r DoctorReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "mesh %s, node %s (gossip %s): %d member(s) alive\n", r.Mesh, r.Node, r.Gossip, r.Members)
	if len(r.Findings) == 0 {
		b.WriteString("no problems found\n")
	}
	for _, f := range r.Findings {
		mark := map[string]string{SeverityError: "error", SeverityWarning: "warning"}[f.Severity]
		if mark == "" {
			mark = "info"
		}
		fmt.Fprintf(&b, "%-7s %s\n        fix: %s\n", mark, f.Problem, f.Fix)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
