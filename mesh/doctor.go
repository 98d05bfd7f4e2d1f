package mesh

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// Doctor reports why peers may be invisible or unusable, as this member sees it: whether this
// member is cut off (none of the peers it had answers it: then that is the finding, rather than
// one about each of them), what membership saw go wrong (decrypt failures and their source,
// another mesh's traffic, duplicate names, UDP blocked, seeds that do not answer), agents that
// are dead, suspect or whose API address does not answer (checked from here), the models those
// agents' placements leave unroutable (findings with their namespace), an agent's own loopback
// advertisement, and what discovery found. It first dials again every agent API address that
// did not answer, within ctx, so the report is fresh.
func (m *Mesh) Doctor(ctx context.Context) api.DoctorReport {
	m.recheckUnreachable(ctx)
	r := api.DoctorReport{Mesh: m.cfg.MeshID, Node: m.name, Gossip: m.GossipAddr(), Members: m.ml.NumMembers(), At: time.Now()}
	_, port, _ := net.SplitHostPort(r.Gossip)
	addNS := func(ns, sev, problem, fix string) {
		r.Findings = append(r.Findings, api.Finding{Severity: sev, Problem: problem, Fix: fix, Namespace: ns})
	}
	add := func(sev, problem, fix string) { addNS("", sev, problem, fix) }
	// detail sets the last finding's changing figures, kept out of its problem so that the
	// same problem seen by several members merges into one finding.
	detail := func(format string, args ...any) { r.Findings[len(r.Findings)-1].Detail = fmt.Sprintf(format, args...) }
	joinFix := fmt.Sprintf("check the join string: every host of mesh %q must use the same one (`llmkube-agent init` made it)", m.cfg.MeshID)

	d := m.diag
	d.mu.Lock()
	for from, s := range d.decrypt {
		add(api.SeverityError,
			fmt.Sprintf("gossip from %s could not be decrypted: that host holds another mesh secret", from),
			joinFix+"; restart the host at "+from+" with it")
		detail("%d message(s), the last %s ago", s.count, ago(s.last))
	}
	for from, s := range d.label {
		// A label is the mesh id and secret's: another one is another llmkube mesh, at once an
		// error; no label at all is some other program, or a scanner, unless it keeps coming.
		sev := api.SeverityError
		if s.detail == "" && s.count < foreignMinMessages {
			sev = api.SeverityWarning
		}
		add(sev,
			fmt.Sprintf("gossip from %s belongs to another mesh: another mesh id or secret", from),
			joinFix+"; if two meshes share this network on purpose, give them different gossip ports")
		detail("%d message(s), the last %s ago", s.count, ago(s.last))
	}
	for name, s := range d.conflicts {
		file := nodeNameFile + " in its state dir"
		if m.cfg.StateDir != "" {
			file = filepath.Join(m.cfg.StateDir, nodeNameFile)
		}
		add(api.SeverityError,
			fmt.Sprintf("two nodes claim the name %q: %s; the second is refused", name, s.detail),
			fmt.Sprintf("give one of them another name: delete %s (a copied state folder or a cloned disk image carries the name along) or start it with another name, then restart it", file))
		detail("last seen %s ago", ago(s.last))
	}
	// One probe answered over TCP and not UDP is a busy host's late ack; UDP blocked fails every
	// probe of that member. Report it only while it is dense: most probes of it, lately.
	probed := time.Duration(max(m.nAlive.Load(), 1)) * m.mlc.ProbeInterval // how often one member is probed
	for name, s := range d.udp {
		if s.count < udpMinSightings || s.last.Sub(s.first) > time.Duration(s.count)*3*probed || time.Since(s.last) > 5*probed {
			continue
		}
		add(api.SeverityError,
			fmt.Sprintf("%s answers over TCP but not over UDP: gossip packets are blocked", name),
			fmt.Sprintf("open UDP port %s, not only TCP, in the firewalls of %s and of this host", port, name))
		detail("%d probe(s), the last %s ago", s.count, ago(s.last))
	}
	var src discovery.Source = d.src
	d.mu.Unlock()

	if m.cfg.Role == api.RoleAgent {
		if problem, fix := advertProblem(m.cfg.APIAddr, r.Gossip); problem != "" {
			add(api.SeverityError, problem, fix)
		}
	}

	m.mu.Lock()
	alone := m.nAlive.Load() <= 1
	cut := m.aloneLocked(time.Now())
	if cut {
		add(api.SeverityError,
			"this host is cut off: no other member answers it, though it had peers; it routes to none of their models meanwhile",
			fmt.Sprintf("check this host's network: its cable or Wi-Fi, its address, a firewall dropping UDP or TCP port %s; if it is fine, every other host is down. It rejoins them within seconds of their answering again", cmp.Or(port, "of the gossip")))
		detail("%d peer(s), the last heard from %s ago", m.peersHadLocked(), ago(time.Unix(0, max(m.lastAck.Load(), m.lastPinged.Load()))))
	}
	for _, c := range m.candidates {
		if c.err == nil {
			continue
		}
		sev := api.SeverityWarning
		if alone {
			sev = api.SeverityError
		}
		problem, fix := seedFinding(c, port, joinFix)
		add(sev, problem, fix)
		detail("%d tries", c.tries)
	}
	for _, mb := range m.members {
		if mb.name == m.name {
			continue
		}
		live, reason := mb.liveness()
		switch {
		case !mb.isAgent():
		case cut:
			// Every other member fails from here: a finding about each would send a person to
			// check hosts that are fine. The cut-off finding says where to look.
		case live == api.Unreachable:
			_, apiPort, _ := net.SplitHostPort(mb.meta.APIAddr)
			add(api.SeverityError,
				fmt.Sprintf("agent %s is unreachable: %s", mb.name, reason),
				fmt.Sprintf("start that agent with an API address other hosts can reach (--advertise; not a loopback or container address), and open TCP port %s in its firewall", cmp.Or(apiPort, "of its API")))
		case live == api.Dead:
			add(api.SeverityError,
				fmt.Sprintf("agent %s (%s) is dead: it stopped answering the mesh's probes", mb.name, mb.addr),
				fmt.Sprintf("check that host: is it on, on the network, and is llmkube-agent running there? A host that is gone for good drops out of this report %s after it died", m.t.retainGone))
			detail("dead for %s", ago(mb.since))
		case live == api.Suspect:
			add(api.SeverityWarning,
				fmt.Sprintf("agent %s (%s) is suspect: it stopped answering the mesh's probes", mb.name, mb.addr),
				"if it does not recover within seconds, check its network and whether it is overloaded; requests to it end after a short grace")
			detail("suspect for %s", ago(mb.since))
		}
		// A suspect host may well refute it in a moment (a busy host answers probes late): its
		// models count as unroutable once it is dead, or alive but its API does not answer.
		if mb.isAgent() && !cut && (live == api.Dead || live == api.Unreachable) {
			if e, ok := m.docs[mb.name]; ok {
				for _, p := range e.doc.Placements {
					if p.State.Terminal() {
						continue
					}
					addNS(p.Namespace, api.SeverityError,
						fmt.Sprintf("model %q (namespace %s, %s) on %s cannot be served: %s is %s", p.Model, p.Namespace, p.Runtime, mb.name, mb.name, live),
						fmt.Sprintf("the gateways route to another ready replica where there is one; bring %s back, or place %q on another host", mb.name, p.Model))
				}
			}
		}
		if mb.metaErr != nil {
			add(api.SeverityWarning,
				fmt.Sprintf("member %s sent node metadata this build cannot read: %v", mb.name, mb.metaErr),
				"upgrade llmkube on this host: the other member runs a newer version")
		}
	}
	for addr, p := range m.foreign {
		add(api.SeverityWarning,
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
	if alone && !cut {
		fix := "give --join host:port of a running agent, or see the findings above for why none was found"
		if nCandidates == 0 && m.cfg.Discovery == nil && m.discovered == nil {
			fix = "give --join host:port of a running agent (no seeds, no last-known peers and no discovery are configured)"
		}
		add(api.SeverityWarning, "this member sees no other member", fix)
	}
	api.SortFindings(r.Findings)
	api.Sanitize(&r) // findings quote what other hosts announced
	return r
}

// foreignMinMessages is how many unlabelled messages from one host make an error rather than a
// warning: a stray packet or two is weak evidence (a scanner, a port another program reused).
const foreignMinMessages = 3

// udpMinSightings is how many probes must have gone over TCP only before UDP counts as blocked.
const udpMinSightings = 5

// advertProblem finds an agent's own advertised API address useless to other hosts: a loopback
// or unspecified address while gossip runs on a real one (a host without a default route picks
// loopback). Every peer would dial its own loopback and reach its own agent. On a mesh that runs
// on one machine (gossip on loopback too) loopback is right.
func advertProblem(apiAddr, gossip string) (problem, fix string) {
	gh, _, err := net.SplitHostPort(gossip)
	if gip := net.ParseIP(gh); err != nil || gip == nil || gip.IsLoopback() {
		return "", ""
	}
	host, port, err := net.SplitHostPort(apiAddr)
	if err != nil {
		return "", ""
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !(ip.IsLoopback() || ip.IsUnspecified())) {
		return "", ""
	}
	return fmt.Sprintf("this agent advertises its API at %s, which no other host can reach: each would dial its own %s", apiAddr, host),
		fmt.Sprintf("restart it with --advertise %s (the address peers gossip with)", net.JoinHostPort(gh, cmp.Or(port, "7777")))
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
		return fmt.Sprintf("%s %s refused the gossip port: %v", what, c.addr, c.err),
			fmt.Sprintf("check that an agent runs there and listens on port %s; if it does, open TCP and UDP %s in its firewall", port, port)
	case strings.Contains(e, "timeout"), strings.Contains(e, "no route"), strings.Contains(e, "unreachable"):
		return fmt.Sprintf("%s %s does not answer on the gossip port: %v", what, c.addr, c.err),
			fmt.Sprintf("a firewall may drop it: open TCP and UDP port %s on that host, and check the address", port)
	case strings.Contains(e, "decrypt"), strings.Contains(e, "encrypt"), strings.Contains(e, "remote error"):
		return fmt.Sprintf("%s %s rejected us: it holds another mesh secret (%v)", what, c.addr, c.err), joinFix
	case strings.Contains(e, "eof"), strings.Contains(e, "reset"), strings.Contains(e, "closed"):
		return fmt.Sprintf("%s %s hung up on us (%v): it may belong to another mesh", what, c.addr, c.err), joinFix
	}
	return fmt.Sprintf("could not join %s %s: %v", what, c.addr, c.err),
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

// ago is how long ago t was, in whole seconds.
func ago(t time.Time) string { return time.Since(t).Round(time.Second).String() }
