// Package doctor turns what one mesh member observed into findings a person can act on: why
// peers may be invisible or unusable, each with a severity, the problem as this member sees it,
// and a fix. Package mesh gathers the observations (Facts) under its locks; this package holds
// every finding's wording and the thresholds at which evidence becomes a finding.
package doctor

import (
	"cmp"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// Sighting is how often and when something was seen: gossip another mesh sent, a probe
// answered over TCP only, a name two nodes claim.
type Sighting struct {
	Count       int
	First, Last time.Time
	Detail      string
}

// Candidate is a peer address this member tried to join through, and how that went.
type Candidate struct {
	Addr  string
	Via   string // discovery.Via*: where the address came from
	Err   error  // of the last attempt; nil after a success
	Tries int
}

// Member is another member as this member sees it.
type Member struct {
	Name    string
	Agent   bool
	Live    api.Liveness
	Reason  string // why it is unreachable
	Addr    string // gossip host:port
	APIAddr string
	Since   time.Time // of its last change of liveness
	MetaErr error     // its node metadata could not be read
	// Placements are its placements from its state document.
	Placements []api.Placement
}

// Facts is what a member observed, gathered for one report.
type Facts struct {
	Mesh, Node, Gossip string
	Members            int // as memberlist counts them
	Agent              bool
	APIAddr            string        // advertised, for an agent
	NameFile           string        // where the node's name is kept
	ProbeEvery         time.Duration // how often one member is probed

	Decrypt   map[string]Sighting // by sender host
	Label     map[string]Sighting // by sender host; Detail "labelled" when it carried a label
	UDP       map[string]Sighting // by node name: probes answered over TCP only
	Conflicts map[string]Sighting // by name; Detail: the two addresses

	Alone bool // no other member is alive
	// Cut: none of the peers this member had answers it.
	Cut       bool
	PeersHad  int
	LastHeard time.Time

	Candidates    []Candidate // those whose last attempt failed
	NoCandidates  bool        // there were none at all, failed or not
	NoDiscovery   bool        // no discovery is configured
	Others        []Member
	RetainGone    time.Duration     // how long a dead member stays in the report
	ForeignMDNS   map[string]string // mDNS answers of another mesh: address to node
	FromDiscovery []api.Finding     // what discovery found
}

// Thresholds at which evidence becomes a finding.
const (
	// ForeignMinMessages is how many unlabelled messages from one host make an error rather
	// than a warning: a stray packet or two is weak evidence (a scanner, a port another
	// program reused).
	ForeignMinMessages = 3
	// UDPMinSightings is how many probes must have gone over TCP only before UDP counts as
	// blocked.
	UDPMinSightings = 5
)

// Report makes the report of f: whether this member is cut off (none of the peers it had
// answers it: then that is the finding, rather than one about each of them), what membership
// saw go wrong (decrypt failures and their source, another mesh's traffic, duplicate names, UDP
// blocked, seeds that do not answer), agents that are dead, suspect or whose API address does
// not answer, the models those agents' placements leave unroutable (findings with their
// namespace), an agent's own loopback advertisement, and what discovery found. Findings are
// sorted, and sanitized: they quote what other hosts announced.
func Report(f Facts, at time.Time) api.DoctorReport {
	r := api.DoctorReport{Mesh: f.Mesh, Node: f.Node, Gossip: f.Gossip, Members: f.Members, At: at}
	_, port, _ := net.SplitHostPort(f.Gossip)
	b := builder{r: &r, joinFix: fmt.Sprintf("check the join string: every host of mesh %q must use the same one (`llmkube-agent init` made it)", f.Mesh)}
	b.membership(f, port)
	if f.Agent {
		if problem, fix := Advert(f.APIAddr, f.Gossip); problem != "" {
			b.add(api.SeverityError, problem, fix)
		}
	}
	if f.Cut {
		b.add(api.SeverityError,
			"this host is cut off: no other member answers it, though it had peers; it routes to none of their models meanwhile",
			fmt.Sprintf("check this host's network: its cable or Wi-Fi, its address, a firewall dropping UDP or TCP port %s; if it is fine, every other host is down. It rejoins them within seconds of their answering again", cmp.Or(port, "of the gossip")))
		b.detail("%d peer(s), the last heard from %s ago", f.PeersHad, ago(f.LastHeard))
	}
	for _, c := range f.Candidates {
		sev := api.SeverityWarning
		if f.Alone {
			sev = api.SeverityError
		}
		problem, fix := seed(c, port, b.joinFix)
		b.add(sev, problem, fix)
		b.detail("%d tries", c.Tries)
	}
	for _, mb := range f.Others {
		b.member(f, mb)
	}
	for addr, node := range f.ForeignMDNS {
		b.add(api.SeverityWarning,
			fmt.Sprintf("mDNS: %s (%s) announces another mesh", cmp.Or(node, "a host"), addr),
			b.joinFix+"; nothing to do if that host belongs to another mesh on purpose")
	}
	for _, d := range f.FromDiscovery {
		b.add(d.Severity, d.Problem, d.Fix)
	}
	if f.Alone && !f.Cut {
		fix := "give --join host:port of a running agent, or see the findings above for why none was found"
		if f.NoCandidates && f.NoDiscovery {
			fix = "give --join host:port of a running agent (no seeds, no last-known peers and no discovery are configured)"
		}
		b.add(api.SeverityWarning, "this member sees no other member", fix)
	}
	api.SortFindings(r.Findings)
	api.Sanitize(&r)
	return r
}

// builder adds findings to a report.
type builder struct {
	r       *api.DoctorReport
	joinFix string
}

func (b builder) addNS(ns, sev, problem, fix string) {
	b.r.Findings = append(b.r.Findings, api.Finding{Severity: sev, Problem: problem, Fix: fix, Namespace: ns})
}

func (b builder) add(sev, problem, fix string) { b.addNS("", sev, problem, fix) }

// detail sets the last finding's changing figures, kept out of its problem so that the same
// problem seen by several members merges into one finding.
func (b builder) detail(format string, args ...any) {
	b.r.Findings[len(b.r.Findings)-1].Detail = fmt.Sprintf(format, args...)
}

// membership reports what memberlist saw go wrong: another mesh's traffic, duplicate names,
// UDP blocked.
func (b builder) membership(f Facts, port string) {
	for from, s := range f.Decrypt {
		b.add(api.SeverityError,
			fmt.Sprintf("gossip from %s could not be decrypted: that host holds another mesh secret", from),
			b.joinFix+"; restart the host at "+from+" with it")
		b.detail("%d message(s), the last %s ago", s.Count, ago(s.Last))
	}
	for from, s := range f.Label {
		// A label is the mesh id and secret's: another one is another llmkube mesh, at once an
		// error; no label at all is some other program, or a scanner, unless it keeps coming.
		sev := api.SeverityError
		if s.Detail == "" && s.Count < ForeignMinMessages {
			sev = api.SeverityWarning
		}
		b.add(sev,
			fmt.Sprintf("gossip from %s belongs to another mesh: another mesh id or secret", from),
			b.joinFix+"; if two meshes share this network on purpose, give them different gossip ports")
		b.detail("%d message(s), the last %s ago", s.Count, ago(s.Last))
	}
	for name, s := range f.Conflicts {
		b.add(api.SeverityError,
			fmt.Sprintf("two nodes claim the name %q: %s; the second is refused", name, s.Detail),
			fmt.Sprintf("give one of them another name: delete %s (a copied state folder or a cloned disk image carries the name along) or start it with another name, then restart it", f.NameFile))
		b.detail("last seen %s ago", ago(s.Last))
	}
	// One probe answered over TCP and not UDP is a busy host's late ack; UDP blocked fails every
	// probe of that member. Report it only while it is dense: most probes of it, lately.
	for name, s := range f.UDP {
		if s.Count < UDPMinSightings || s.Last.Sub(s.First) > time.Duration(s.Count)*3*f.ProbeEvery || time.Since(s.Last) > 5*f.ProbeEvery {
			continue
		}
		b.add(api.SeverityError,
			fmt.Sprintf("%s answers over TCP but not over UDP: gossip packets are blocked", name),
			fmt.Sprintf("open UDP port %s, not only TCP, in the firewalls of %s and of this host", port, name))
		b.detail("%d probe(s), the last %s ago", s.Count, ago(s.Last))
	}
}

// member reports another member that is unreachable, dead or suspect, the models it leaves
// unroutable, and metadata this build cannot read.
func (b builder) member(f Facts, mb Member) {
	switch {
	case !mb.Agent:
	case f.Cut:
		// Every other member fails from here: a finding about each would send a person to
		// check hosts that are fine. The cut-off finding says where to look.
	case mb.Live == api.Unreachable:
		_, apiPort, _ := net.SplitHostPort(mb.APIAddr)
		b.add(api.SeverityError,
			fmt.Sprintf("agent %s is unreachable: %s", mb.Name, mb.Reason),
			fmt.Sprintf("start that agent with an API address other hosts can reach (--advertise; not a loopback or container address), and open TCP port %s in its firewall", cmp.Or(apiPort, "of its API")))
	case mb.Live == api.Dead:
		b.add(api.SeverityError,
			fmt.Sprintf("agent %s (%s) is dead: it stopped answering the mesh's probes", mb.Name, mb.Addr),
			fmt.Sprintf("check that host: is it on, on the network, and is llmkube-agent running there? A host that is gone for good drops out of this report %s after it died", f.RetainGone))
		b.detail("dead for %s", ago(mb.Since))
	case mb.Live == api.Suspect:
		b.add(api.SeverityWarning,
			fmt.Sprintf("agent %s (%s) is suspect: it stopped answering the mesh's probes", mb.Name, mb.Addr),
			"if it does not recover within seconds, check its network and whether it is overloaded; requests to it end after a short grace")
		b.detail("suspect for %s", ago(mb.Since))
	}
	// A suspect host may well refute it in a moment (a busy host answers probes late): its
	// models count as unroutable once it is dead, or alive but its API does not answer.
	if mb.Agent && !f.Cut && (mb.Live == api.Dead || mb.Live == api.Unreachable) {
		for _, p := range mb.Placements {
			if p.State.Terminal() {
				continue
			}
			b.addNS(p.Namespace, api.SeverityError,
				fmt.Sprintf("model %q (namespace %s, %s) on %s cannot be served: %s is %s", p.Model, p.Namespace, p.Runtime, mb.Name, mb.Name, mb.Live),
				fmt.Sprintf("the gateways route to another ready replica where there is one; bring %s back, or place %q on another host", mb.Name, p.Model))
		}
	}
	if mb.MetaErr != nil {
		b.add(api.SeverityWarning,
			fmt.Sprintf("member %s sent node metadata this build cannot read: %v", mb.Name, mb.MetaErr),
			"upgrade llmkube on this host: the other member runs a newer version")
	}
}

// Advert finds an agent's own advertised API address useless to other hosts: a loopback or
// unspecified address while gossip runs on a real one (a host without a default route picks
// loopback). Every peer would dial its own loopback and reach its own agent. On a mesh that runs
// on one machine (gossip on loopback too) loopback is right.
func Advert(apiAddr, gossip string) (problem, fix string) {
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

// seed explains why joining a candidate failed.
func seed(c Candidate, port, joinFix string) (problem, fix string) {
	what := "seed"
	switch c.Via {
	case discovery.ViaLastKnown:
		what = "last-known peer"
	case discovery.ViaMDNS:
		what = "mDNS peer"
	}
	_, peerPort, _ := net.SplitHostPort(c.Addr)
	port = cmp.Or(peerPort, port)
	e := strings.ToLower(c.Err.Error())
	switch {
	case strings.Contains(e, "refused"):
		return fmt.Sprintf("%s %s refused the gossip port: %v", what, c.Addr, c.Err),
			fmt.Sprintf("check that an agent runs there and listens on port %s; if it does, open TCP and UDP %s in its firewall", port, port)
	case strings.Contains(e, "timeout"), strings.Contains(e, "no route"), strings.Contains(e, "unreachable"):
		return fmt.Sprintf("%s %s does not answer on the gossip port: %v", what, c.Addr, c.Err),
			fmt.Sprintf("a firewall may drop it: open TCP and UDP port %s on that host, and check the address", port)
	case strings.Contains(e, "decrypt"), strings.Contains(e, "encrypt"), strings.Contains(e, "remote error"):
		return fmt.Sprintf("%s %s rejected us: it holds another mesh secret (%v)", what, c.Addr, c.Err), joinFix
	case strings.Contains(e, "eof"), strings.Contains(e, "reset"), strings.Contains(e, "closed"):
		return fmt.Sprintf("%s %s hung up on us (%v): it may belong to another mesh", what, c.Addr, c.Err), joinFix
	}
	return fmt.Sprintf("could not join %s %s: %v", what, c.Addr, c.Err),
		"check the address, and that an llmkube agent runs there"
}

// ago is how long ago t was, in whole seconds.
func ago(t time.Time) string { return time.Since(t).Round(time.Second).String() }
