package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/grandcat/zeroconf"

	"github.com/llmkube/mesh/agent/api"
)

// Service is the DNS-SD service type agents announce.
const Service = "_llmkube._tcp"

// txtVersion is the TXT record layout version; readers ignore keys they do not know.
const txtVersion = "1"

// Timings of the mDNS source.
const (
	defaultBrowseEvery = 15 * time.Second
	// debounce gathers a burst of answers (every host answers one query at about the same
	// time) into one batch of found calls.
	debounce    = 200 * time.Millisecond
	maxDebounce = time.Second
	// maxSeen bounds what one source remembers of answers, since anyone on the LAN can send
	// any number of them.
	maxSeen = 1024
)

// MDNSConfig configures NewMDNS.
type MDNSConfig struct {
	MeshID     string // the mesh id; only its hash (api.MeshIDHash) goes on the wire
	Node       string // this member's node name, unique in the mesh
	GossipPort int
	APIPort    int
	// BrowseOnly finds peers and announces nothing: a console. It is no placement target and
	// joins the agents itself, and a short-lived headless command that announced would leave
	// every agent an address to retry after it exited. Node and the ports may then be empty.
	BrowseOnly bool
	// Interface restricts mDNS to one interface (--mdns-interface); "" = every interface that is
	// up, multicast-capable, not loopback, not a container bridge, with a routable address.
	Interface string
	// Advertise overrides the addresses announced; nil = the chosen interfaces' own addresses.
	Advertise []net.IP
	// BrowseEvery is the length of one browse round (a fresh resolver each round); 0 = 15s.
	// Announcements of new hosts are heard during a round, so this bounds only recovery from
	// lost packets.
	BrowseEvery time.Duration
	Log         *slog.Logger
}

// MDNSHostName is the host name an agent announces for itself: "<node>.llmkube.local.". It is
// unique per agent (an OS host name is not: Pis cloned from one image are all "raspberrypi"),
// so it can be used as a seed, "--join alpha.llmkube.local:7946", from a static build too.
func MDNSHostName(node string) string { return mdnsLabel(node) + ".llmkube.local." }

// mdnsLabel turns a node name into one DNS label. A name that had to change gets a short hash
// of the original, so two nodes never collide on one label.
func mdnsLabel(node string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(node) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	label := strings.Trim(b.String(), "-")
	if len(label) > 48 {
		label = strings.Trim(label[:48], "-")
	}
	if label != node {
		sum := sha256.Sum256([]byte(node))
		if label == "" {
			label = "node"
		}
		label += "-" + hex.EncodeToString(sum[:3])
	}
	return label
}

// NewMDNS returns a Source that announces this member as _llmkube._tcp and browses for members
// of the same mesh. Only configuration errors are returned; a host without a usable interface
// still gets a Source, whose Findings say so, and which starts working when one comes up.
func NewMDNS(cfg MDNSConfig) (Source, error) {
	if err := api.ValidMeshID(cfg.MeshID); err != nil {
		return nil, fmt.Errorf("mdns: %w", err)
	}
	if (cfg.Node == "" && !cfg.BrowseOnly) || len(cfg.Node) > 200 {
		return nil, fmt.Errorf("mdns: node name %q must have 1-200 bytes", cfg.Node)
	}
	for _, p := range []struct {
		name string
		port int
	}{{"gossip", cfg.GossipPort}, {"api", cfg.APIPort}} {
		if cfg.BrowseOnly && p.port == 0 {
			continue
		}
		if p.port < 1 || p.port > 65535 {
			return nil, fmt.Errorf("mdns: %s port %d is not from 1 to 65535", p.name, p.port)
		}
	}
	for _, ip := range cfg.Advertise {
		if ip == nil || ip.IsUnspecified() {
			return nil, fmt.Errorf("mdns: cannot advertise address %v", ip)
		}
	}
	if cfg.BrowseEvery <= 0 {
		cfg.BrowseEvery = defaultBrowseEvery
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &mdnsSource{
		cfg:   cfg,
		hash:  api.MeshIDHash(cfg.MeshID),
		label: mdnsLabel(cfg.Node),
		other: map[string]string{},
	}, nil
}

type mdnsSource struct {
	cfg      MDNSConfig
	hash     string
	label    string
	findings findings

	mu    sync.Mutex
	other map[string]string // instance → mesh hash of members of other meshes heard
	addrs []net.IP          // what we announce, to recognise ourselves and impostors
}

func (m *mdnsSource) Findings() []Finding { return m.findings.list() }

// announcer is one registration: the DNS-SD records (zeroconf) and the host-name responder,
// on one set of interfaces.
type announcer struct {
	key       string
	server    *zeroconf.Server
	responder *hostResponder
}

func (a *announcer) stop() {
	if a == nil {
		return
	}
	a.server.Shutdown()
	a.responder.close()
}

func (m *mdnsSource) Run(ctx context.Context, found func(Peer)) error {
	var ann *announcer
	defer func() { ann.stop() }()
	seen := map[string]Peer{}
	for ctx.Err() == nil {
		ifs, localNets := m.interfaces()
		if len(ifs) > 0 {
			if !m.cfg.BrowseOnly {
				ann = m.announce(ann, ifs)
			}
			m.browseRound(ctx, ifs, localNets, seen, found)
			continue
		}
		ann.stop()
		ann = nil
		t := time.NewTimer(m.cfg.BrowseEvery)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return nil
}

// interfaces picks this round's interfaces (they come and go: Wi-Fi after boot, a laptop's
// dock) and records or clears the "no interface" finding.
func (m *mdnsSource) interfaces() ([]net.Interface, []*net.IPNet) {
	all, err := systemInterfaces()
	var picked []ifaceInfo
	why := ""
	if err != nil {
		why = err.Error()
	} else {
		picked, why = pickInterfaces(m.cfg.Interface, all)
	}
	if len(picked) == 0 {
		fix := "connect this host to the LAN, name the LAN interface with --mdns-interface, or join by --join host:port seeds (mDNS resumes by itself when an interface comes up)"
		m.findings.set("interface", Finding{Severity: SeverityError, Problem: "mDNS: " + why, Fix: fix})
		return nil, nil
	}
	m.findings.clear("interface")
	var nets []*net.IPNet
	var addrs []net.IP
	for _, p := range picked {
		ifAddrs, _ := p.iface.Addrs()
		for _, a := range ifAddrs {
			if n, ok := a.(*net.IPNet); ok {
				nets = append(nets, n)
			}
		}
		addrs = append(addrs, usableAddrs(p.addrs)...)
	}
	if len(m.cfg.Advertise) > 0 {
		addrs = m.cfg.Advertise
	}
	m.mu.Lock()
	m.addrs = addrs
	m.mu.Unlock()
	return netIfaces(picked), nets
}

// announce (re)registers when the interfaces or addresses changed since the last round.
func (m *mdnsSource) announce(old *announcer, ifs []net.Interface) *announcer {
	m.mu.Lock()
	addrs := slices.Clone(m.addrs)
	m.mu.Unlock()
	var key strings.Builder
	for _, i := range ifs {
		fmt.Fprintf(&key, "%s/%d ", i.Name, i.Index)
	}
	ips := make([]string, len(addrs))
	for i, a := range addrs {
		ips[i] = a.String()
	}
	key.WriteString(strings.Join(ips, " "))
	if old != nil && old.key == key.String() {
		return old
	}
	old.stop()

	host := MDNSHostName(m.cfg.Node)
	txt := []string{
		"mesh=" + m.hash,
		"node=" + m.cfg.Node,
		"gossip=" + strconv.Itoa(m.cfg.GossipPort),
		"api=" + strconv.Itoa(m.cfg.APIPort),
		"v=" + txtVersion,
	}
	// RegisterProxy, never Register: Register announces the OS host name, which is not unique.
	srv, err := zeroconf.RegisterProxy(m.label, Service, "local", m.cfg.GossipPort, host, ips, txt, ifs)
	if err != nil {
		m.findings.set("announce", Finding{
			Severity: SeverityError,
			Problem:  "mDNS: cannot announce this host: " + err.Error(),
			Fix:      "check that UDP port 5353 can be bound (another mDNS stack with exclusive use?) or join by --join seeds",
		})
		return nil
	}
	m.findings.clear("announce")
	// Without the responder, browsing and announcing still work; only "--join <this
	// host>.llmkube.local" does not, so it is a warning, not a stop.
	resp, err := newHostResponder(host, addrs, ifs, m.cfg.Log)
	if err != nil {
		m.findings.set("responder", Finding{
			Severity: SeverityWarning,
			Problem:  "mDNS: cannot answer queries for " + host + ": " + err.Error(),
			Fix:      "peers cannot use " + strings.TrimSuffix(host, ".") + " as a --join seed; give them this host's IP address, or check that UDP port 5353 is free for sharing and IPv4 multicast works here",
		})
	} else {
		m.findings.clear("responder")
	}
	m.cfg.Log.Info("mdns: announcing", "host", host, "addrs", ips, "interfaces", key.String())
	return &announcer{key: key.String(), server: srv, responder: resp}
}

// browseRound browses with a fresh resolver (a zeroconf resolver is single-use) for one round,
// reporting new or changed peers after each burst of answers settles.
func (m *mdnsSource) browseRound(ctx context.Context, ifs []net.Interface, localNets []*net.IPNet, seen map[string]Peer, found func(Peer)) {
	rctx, cancel := context.WithTimeout(ctx, m.cfg.BrowseEvery)
	defer cancel()
	m.cfg.Log.Debug("mdns: browse round", "interfaces", len(ifs), "known", len(seen))
	r, err := zeroconf.NewResolver(zeroconf.SelectIfaces(ifs))
	if err != nil {
		// IPv6 may be off on the host; IPv4 alone is enough on a LAN.
		r, err = zeroconf.NewResolver(zeroconf.SelectIfaces(ifs), zeroconf.SelectIPTraffic(zeroconf.IPv4))
	}
	if err != nil {
		m.findings.set("browse", Finding{
			Severity: SeverityError,
			Problem:  "mDNS: cannot browse: " + err.Error(),
			Fix:      "check that UDP port 5353 can be bound and multicast is allowed on the interface, or join by --join seeds",
		})
		<-rctx.Done()
		return
	}
	entries := make(chan *zeroconf.ServiceEntry, 16)
	if err := r.Browse(rctx, Service, "local.", entries); err != nil {
		m.findings.set("browse", Finding{Severity: SeverityError, Problem: "mDNS: cannot browse: " + err.Error(),
			Fix: "check that multicast is allowed on the interface, or join by --join seeds"})
		cancel()
		for range entries { // Browse closes the channel when its context ends
		}
		return
	}
	m.findings.clear("browse")

	pending := map[string]Peer{}
	var since time.Time // when the oldest pending answer arrived
	flush := func() {
		for node, p := range pending {
			if seen[node] != p {
				if _, ok := seen[node]; ok || len(seen) < maxSeen {
					seen[node] = p // beyond maxSeen (forged answers), reported every round
				}
				m.cfg.Log.Debug("mdns: found", "node", p.Node, "gossip", p.GossipAddr, "api", p.APIAddr)
				found(p)
			}
		}
		clear(pending)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case e, ok := <-entries:
			if !ok {
				flush()
				return
			}
			if p, ok := m.consider(e, localNets); ok {
				if len(pending) == 0 {
					since = time.Now()
				}
				pending[p.Node] = p
				// A steady trickle of answers (a big LAN) must not hold back the first ones.
				if time.Since(since) > maxDebounce {
					flush()
				} else {
					timer.Reset(debounce)
				}
			}
		case <-timer.C:
			flush()
		}
	}
}

// consider decides what an answer is: a peer to report, ourselves, a member of another mesh
// (counted for the doctor), or noise.
func (m *mdnsSource) consider(e *zeroconf.ServiceEntry, localNets []*net.IPNet) (Peer, bool) {
	p, err := parseEntry(e, localNets)
	if err != nil {
		m.cfg.Log.Debug("mdns: ignoring answer", "instance", e.Instance, "err", err)
		return Peer{}, false
	}
	if p.MeshHash != m.hash {
		m.noteOtherMesh(e.Instance, p.MeshHash)
		return Peer{}, false
	}
	if p.Node == m.cfg.Node {
		m.checkImpostor(e)
		return Peer{}, false
	}
	return p, true
}

func (m *mdnsSource) noteOtherMesh(instance, hash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.other[instance] == hash {
		return
	}
	if _, ok := m.other[instance]; !ok && len(m.other) >= maxSeen {
		return // anyone can send answers: the list stays bounded
	}
	m.other[instance] = hash
	m.cfg.Log.Info("mdns: ignoring a member of another mesh", "instance", instance)
	names := make([]string, 0, len(m.other))
	for n := range m.other {
		names = append(names, n)
	}
	slices.Sort(names)
	list := names
	if len(list) > 5 {
		list = append(slices.Clone(list[:5]), "…")
	}
	m.findings.set("other-mesh", Finding{
		Severity: SeverityWarning,
		Problem: fmt.Sprintf("mDNS answers from %d host(s) of another mesh: %s",
			len(names), strings.Join(list, ", ")),
		Fix: "check the join string: hosts meant to be in this mesh must be started with this mesh's join string (same mesh id and secret); hosts of another mesh can be ignored",
	})
}

// checkImpostor flags another host announcing our node name: a state folder copied between
// hosts (exo #1599). Memberlist would refuse one of the two; the doctor says why.
func (m *mdnsSource) checkImpostor(e *zeroconf.ServiceEntry) {
	m.mu.Lock()
	ours := slices.Clone(m.addrs)
	m.mu.Unlock()
	for _, ip := range append(slices.Clone(e.AddrIPv4), e.AddrIPv6...) {
		if slices.ContainsFunc(ours, ip.Equal) {
			return
		}
	}
	m.findings.set("impostor", Finding{
		Severity: SeverityError,
		Problem:  fmt.Sprintf("another host (%v) announces this node's name %q", append(e.AddrIPv4, e.AddrIPv6...), m.cfg.Node),
		Fix:      "give each host its own node name (--node); a state folder copied from another host carries its name",
	})
}

// parseEntry reads a browse answer's TXT records and picks the address a peer should dial.
func parseEntry(e *zeroconf.ServiceEntry, localNets []*net.IPNet) (Peer, error) {
	txt := map[string]string{}
	for _, kv := range e.Text {
		k, v, _ := strings.Cut(kv, "=")
		txt[strings.ToLower(k)] = v
	}
	if txt["mesh"] == "" {
		return Peer{}, errors.New("no mesh= record: not an llmkube agent")
	}
	if txt["v"] == "" {
		return Peer{}, errors.New("no v= record")
	}
	p := Peer{Node: txt["node"], MeshHash: txt["mesh"], Via: ViaMDNS}
	if p.Node == "" {
		p.Node = e.Instance
	}
	ip, onLink := pickAddr(e.AddrIPv4, e.AddrIPv6, localNets)
	p.OnLink = onLink
	if ip == nil {
		return Peer{}, errors.New("no usable address")
	}
	gossip, err := port(txt["gossip"])
	if err != nil {
		return Peer{}, fmt.Errorf("gossip=: %w", err)
	}
	p.GossipAddr = net.JoinHostPort(ip.String(), gossip)
	if api, err := port(txt["api"]); err == nil {
		p.APIAddr = net.JoinHostPort(ip.String(), api)
	}
	return p, nil
}

func port(s string) (string, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q is not from 1 to 65535", s)
	}
	return strconv.Itoa(n), nil
}

// pickAddr prefers an IPv4 address on one of our own subnets (reachable without a router, and
// onLink), then any usable IPv4, then a global IPv6.
func pickAddr(v4, v6 []net.IP, localNets []*net.IPNet) (ip net.IP, onLink bool) {
	usable := usableAddrs(append(slices.Clone(v4), v6...))
	for _, ip := range usable {
		for _, n := range localNets {
			if n.Contains(ip) {
				return ip, true
			}
		}
	}
	if len(usable) > 0 {
		return usable[0], false
	}
	return nil, false
}
