// Package mesh is the llmkube membership layer: who is in the mesh, what each host has, and
// whether it can be reached. It runs hashicorp/memberlist (SWIM gossip, encrypted with a key
// derived from the mesh secret, labelled with a tag derived from it), carries each node's compact
// metadata and its versioned state document, and keeps a View of every member for the
// console and the gateway.
//
// Roles: agents are placement targets and publish their state with SetLocal; consoles (the
// TUI and headless commands) are members that observe and act, never targets. Both must leave
// gracefully on exit (Close, or Leave then Shutdown): a bare Shutdown looks like a crash.
//
// Nothing stale is ever shown as ready: a member's liveness comes from memberlist's failure
// detector (alive, suspect, dead, left), and every placement of a member that is not alive and
// reachable is shown unavailable at once.
package mesh

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh/discovery"
	"github.com/llmkube/mesh/mesh/streamguard"
)

// lastKnownFile holds the gossip addresses of the peers seen last, under the state dir.
const lastKnownFile = "last-known-peers.json"

// Config configures a member.
type Config struct {
	MeshID string // names the mesh; with the secret it makes memberlist's Label, so meshes never mix
	Secret []byte // the mesh secret (api.SecretSize bytes); keys gossip encryption
	// NodeName is this member's name, unique in the mesh. Empty: made from the hostname plus a
	// random suffix, and kept in StateDir so it is stable across restarts.
	NodeName string
	Role     api.Role // api.RoleAgent (default) or api.RoleConsole

	BindAddr      string // gossip listen address; "" = 0.0.0.0
	BindPort      int    // gossip port, UDP and TCP; 0 = any free port
	AdvertiseAddr string // address others reach us at; "" = the one memberlist picks
	AdvertisePort int    // 0 = BindPort
	// APIAddr is an agent's HTTP API, host:port as other hosts reach it. Members check that it
	// answers (dial-back) before they route anything to it.
	APIAddr string

	Seeds    []string // gossip host:port to join (--join); retried with backoff
	StateDir string   // node name and last-known peers; "" = keep nothing (consoles)
	// Discovery finds more peers to join; nil = none. Its Findings join the doctor's.
	Discovery discovery.Source
	// NewDiscovery, if set, makes one more Source once the member's name and gossip port are
	// known — what mDNS needs to announce it:
	//
	//	cfg.NewDiscovery = func(node string, gossipPort int) (discovery.Source, error) {
	//		return discovery.NewMDNS(discovery.MDNSConfig{MeshID: id, Node: node, GossipPort: gossipPort, APIPort: apiPort})
	//	}
	NewDiscovery func(node string, gossipPort int) (discovery.Source, error)

	Profile string // ProfileLAN (default), ProfileWAN or ProfileLocal
	// Transport replaces the UDP/TCP sockets (in-process tests); nil = real sockets.
	Transport memberlist.Transport
	// DialBack checks that an agent's API address answers; nil = GET http://<addr>/healthz,
	// where any HTTP response counts as an answer unless another agent gives its name
	// (api.NodeHeader).
	DialBack func(ctx context.Context, apiAddr string) error
	// Seal is this member's side of the sealed channel: its key's fingerprint is gossiped in
	// the node metadata, and the dial-back speaks TLS with it. nil: plain HTTP (tests without
	// agents' listeners).
	Seal *seal.Identity
	// Shared is a set every member keeps a whole copy of (the intents, mesh/intent), carried
	// beside the state documents; nil: this member carries none.
	Shared Shared
	Log    *slog.Logger
}

// Mesh is a running member. Its methods are safe for concurrent use.
type Mesh struct {
	cfg        Config
	t          timings
	name       string
	gossipAddr string
	log        *slog.Logger
	ml         *memberlist.Memberlist
	mlc        *memberlist.Config
	queue      *memberlist.TransmitLimitedQueue
	diag       *diagnostics
	stats      *gossipCounters
	unroute    func()           // stops routing memberlist's metrics to stats
	discovered discovery.Source // from Config.NewDiscovery
	subs       broker

	ctx     context.Context // background work; ends at Shutdown
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	jobs    chan func()   // TCP sends, run by a few workers so delegates never block
	publish chan struct{} // the local metadata changed: tell memberlist, push to consoles
	changed chan struct{} // something a View shows changed
	joinCh  chan struct{} // a new join candidate
	// keepWake and rejoinWake: something about another member changed (wakeKeepersLocked)
	keepWake, rejoinWake chan struct{}

	meta    atomic.Pointer[[]byte] // encoded local metadata, what memberlist gossips
	nAlive  atomic.Int32           // members alive or suspect, for the broadcast queue
	leaving atomic.Bool            // Leave was called: refute no suspicion
	// lastAck, lastFailed and lastPinged time (Unix ns) the last probe memberlist saw acked,
	// the last one our failure detector failed, and the last probe of us by another member:
	// together they tell a member cut off (reconnect.go).
	lastAck, lastFailed, lastPinged atomic.Int64
	wasAlone                        bool        // guarded by mu; for the housekeeper to notice a change
	cutOff                          atomic.Bool // wasAlone, for an ack to wake the housekeeper (heard)
	lastKeep                        time.Time   // guarded by mu: the housekeeper's last round
	keepDue                         time.Time   // guarded by mu: when its next round is due

	mu         sync.Mutex // guards everything below; never held while calling memberlist
	members    map[string]*member
	docs       map[string]docEntry
	pending    map[string]docEntry // per node: a document its metadata does not name (yet)
	local      localState
	liveSeq    uint64 // our own liveness notices
	startSeq   uint64 // liveSeq at start, in our metadata
	candidates map[string]*candidate
	rejoins    map[string]*rejoinState // per dead member: the rejoiner's pings (reconnect.go)
	mdns       mdnsState
	foreign    map[string]discovery.Peer // mDNS answers from other meshes
	savedPeers string                    // last list written to the last-known file
	joins      int                       // memberlist joins in flight (joining)
	joinsIdle  chan struct{}             // closed while joins is 0

	life     sync.Mutex // orders Leave and Shutdown
	left     bool
	shutdown bool
	done     chan struct{}
}

// Start joins the mesh: it starts memberlist and, in the background, joins the seeds, the
// last-known peers and whatever Discovery finds, retrying with backoff. It returns once
// memberlist listens; it does not wait for peers. When ctx ends the member leaves gracefully
// and shuts down (as Close does); call Close yourself to leave earlier.
func Start(ctx context.Context, cfg Config) (*Mesh, error) {
	if err := checkConfig(&cfg); err != nil {
		return nil, err
	}
	mlc, t, err := profile(cfg.Profile)
	if err != nil {
		return nil, err
	}
	logger := cfg.Log
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hostname, _ := os.Hostname()
	name, err := resolveNodeName(cfg.NodeName, cfg.StateDir, hostname)
	if err != nil {
		return nil, err
	}
	m, err := newMesh(cfg, mlc, t, name, logger.With("node", name))
	if err != nil {
		return nil, err
	}
	guard, err := m.configure(mlc)
	if err != nil {
		m.unroute()
		return nil, err
	}
	if err := m.listen(mlc, guard); err != nil {
		m.unroute()
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.run(ctx)
	m.log.Info("mesh member started", "mesh", cfg.MeshID, "role", cfg.Role, "gossip", m.GossipAddr(), "profile", cfg.Profile)
	return m, nil
}

// checkConfig refuses a mesh id, secret or role that cannot work and fills in the role's
// defaults.
func checkConfig(cfg *Config) error {
	if err := api.ValidMeshID(cfg.MeshID); err != nil {
		return err
	}
	if len(cfg.Secret) != api.SecretSize {
		return fmt.Errorf("mesh secret has %d bytes, want %d", len(cfg.Secret), api.SecretSize)
	}
	switch cfg.Role {
	case "":
		cfg.Role = api.RoleAgent
	case api.RoleAgent, api.RoleConsole:
	default:
		return fmt.Errorf("mesh role %q: use %q or %q", cfg.Role, api.RoleAgent, api.RoleConsole)
	}
	if cfg.Role == api.RoleConsole {
		cfg.APIAddr = ""
	}
	return nil
}

// newMesh is the member before memberlist starts: its tables, its first metadata and itself
// as the first member.
func newMesh(cfg Config, mlc *memberlist.Config, t timings, name string, logger *slog.Logger) (*Mesh, error) {
	m := &Mesh{
		cfg: cfg, t: t, name: name, log: logger, mlc: mlc,
		jobs:       make(chan func(), 256),
		publish:    make(chan struct{}, 1),
		changed:    make(chan struct{}, 1),
		joinCh:     make(chan struct{}, 1),
		joinsIdle:  closedChan(),
		keepWake:   make(chan struct{}, 1),
		rejoinWake: make(chan struct{}, 1),
		members:    map[string]*member{},
		docs:       map[string]docEntry{},
		pending:    map[string]docEntry{},
		candidates: map[string]*candidate{},
		rejoins:    map[string]*rejoinState{},
		mdns:       mdnsState{cooldown: map[string]time.Time{}},
		foreign:    map[string]discovery.Peer{},
		done:       make(chan struct{}),
		liveSeq:    uint64(time.Now().UnixMicro()),
	}
	m.diag = newDiagnostics(m)
	m.stats = &gossipCounters{}
	m.lastAck.Store(time.Now().UnixNano())
	m.lastKeep = time.Now()
	m.keepDue = m.lastKeep.Add(t.tick)
	m.local.gen = uint64(time.Now().UnixMicro())
	m.startSeq = m.liveSeq
	initial, err := encodeMeta(nodeMeta{Role: cfg.Role, APIAddr: cfg.APIAddr, Seq: m.startSeq, SealKey: m.sealKey()})
	if err != nil {
		return nil, err
	}
	m.meta.Store(&initial)
	m.members[name] = &member{name: name, state: api.Alive, emitted: api.Alive, since: time.Now(), updated: time.Now()}
	m.members[name].setMeta(initial)
	m.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return int(m.nAlive.Load()) },
		RetransmitMult: mlc.RetransmitMult,
	}
	return m, nil
}

// configure sets memberlist up for this mesh: name, label and key from the secret, addresses,
// the delegates that are the mesh, metrics routed to this member's counters, logs through the
// diagnostics, and a guarded transport. Whatever it returns, the route is set (see unroute).
func (m *Mesh) configure(mlc *memberlist.Config) (*streamguard.Guard, error) {
	cfg := m.cfg
	mlc.Name = m.name
	mlc.Label = api.GossipLabel(cfg.MeshID, cfg.Secret)
	mlc.SecretKey = api.GossipKey(cfg.Secret)
	mlc.GossipVerifyIncoming = true
	mlc.GossipVerifyOutgoing = true
	mlc.BindAddr = cfg.BindAddr
	if mlc.BindAddr == "" {
		mlc.BindAddr = "0.0.0.0"
	}
	mlc.BindPort = cfg.BindPort
	mlc.AdvertiseAddr = cfg.AdvertiseAddr
	mlc.AdvertisePort = cfg.AdvertisePort
	if mlc.AdvertisePort == 0 {
		mlc.AdvertisePort = cfg.BindPort
	}
	mlc.MetricLabels, m.unroute = routeMetrics(m.stats)
	mlc.Delegate = (*delegate)(m)
	mlc.Events = (*events)(m)
	mlc.Ping = (*pings)(m)
	mlc.Suspicion = (*suspicions)(m)
	mlc.Alive = (*aliveCheck)(m)
	mlc.Conflict = (*events)(m)
	mlc.LogOutput = nil
	mlc.Logger = log.New(m.diag, "", 0)
	// Every transport is guarded: see streamguard.
	var guard *streamguard.Guard
	switch t := cfg.Transport.(type) {
	case nil:
		var err error
		if guard, err = streamguard.NewNetTransport(mlc, m.diag.streamDropped, &m.stats.tcpReceived); err != nil {
			return nil, err
		}
	case memberlist.NodeAwareTransport:
		guard = streamguard.New(t, m.diag.streamDropped, &m.stats.tcpReceived)
	default:
		return nil, fmt.Errorf("mesh: transport %T is not a memberlist.NodeAwareTransport", t)
	}
	mlc.Transport = guard
	return guard, nil
}

// listen starts memberlist on the guarded transport, and discovery once the gossip port is known.
func (m *Mesh) listen(mlc *memberlist.Config, guard *streamguard.Guard) error {
	ml, err := memberlist.Create(mlc)
	if err != nil {
		guard.Shutdown()
		return startError(err)
	}
	m.ml = ml
	m.gossipAddr = ml.LocalNode().Address() // read once: the node memberlist returns is not ours to read later
	if m.cfg.NewDiscovery != nil {
		_, port, _ := net.SplitHostPort(m.gossipAddr)
		p, _ := strconv.Atoi(port)
		if m.discovered, err = m.cfg.NewDiscovery(m.name, p); err != nil {
			ml.Shutdown()
			return fmt.Errorf("starting discovery: %w", err)
		}
	}
	return nil
}

// run starts the member's loops, and leaves the mesh gracefully when ctx ends.
func (m *Mesh) run(ctx context.Context) {
	for range 4 {
		m.goRun(m.worker)
	}
	m.goRun(m.publisher)
	m.goRun(m.notifier)
	m.goRun(m.housekeeper)
	m.goRun(m.joiner)
	m.goRun(m.rejoiner)
	m.goRun(m.discover)
	go func() {
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), m.t.publishWait)
			defer cancel()
			if err := m.Close(cctx); err != nil {
				m.log.Warn("leaving the mesh", "err", err)
			}
		case <-m.done:
		}
	}()
}

func (m *Mesh) goRun(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// worker runs queued jobs (TCP sends) until shutdown.
func (m *Mesh) worker() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case job := <-m.jobs:
			job()
		}
	}
}

// do queues a job without ever blocking: a full queue drops it, and the housekeeping that
// queued it will queue it again.
func (m *Mesh) do(job func()) {
	select {
	case m.jobs <- job:
	default:
		m.log.Debug("mesh job queue full; dropping a send")
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// LocalNode is this member's node name.
func (m *Mesh) LocalNode() string { return m.name }

// GossipAddr is the host:port other members reach this one at.
func (m *Mesh) GossipAddr() string { return m.gossipAddr }

// Members is the number of members memberlist counts alive (suspect included), this one too.
func (m *Mesh) Members() int { return m.ml.NumMembers() }

// Done is closed once the member has shut down.
func (m *Mesh) Done() <-chan struct{} { return m.done }

// Leave tells the mesh this member is going: a leave notice (so others show it "left", not
// "dead"), then memberlist's own leave, waiting at most timeout for it to go out. The member
// keeps running until Shutdown. Safe to call more than once.
func (m *Mesh) Leave(timeout time.Duration) error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.shutdown {
		return errors.New("mesh: leave after shutdown")
	}
	if m.left {
		return nil
	}
	m.left = true
	m.leaving.Store(true) // from here no join starts (joining)
	start := time.Now()
	// A join in flight when the leave is sent makes its peer hear of this member after the
	// leave: that peer then sees it die. Wait for it first, for up to leaveJoinWait.
	m.mu.Lock()
	idle := m.joinsIdle
	m.mu.Unlock()
	wait := time.NewTimer(min(leaveJoinWait, timeout/2))
	select {
	case <-idle:
	case <-wait.C:
	}
	wait.Stop()
	m.mu.Lock()
	m.liveSeq = max(m.liveSeq+1, uint64(time.Now().UnixMicro()))
	n := liveNotice{Kind: liveLeave, Seq: m.liveSeq, Node: m.name, From: m.name}
	others := m.nAlive.Load() > 1
	peers := m.peersLocked()
	m.mu.Unlock()
	m.queueLive(n)
	// And one packet straight to every member: gossip alone gives the notice only a few
	// transmissions (4·log10(n+1) on the LAN profile), and each probe of a member that just
	// crashed carries it there too, so right after a crash some members would never hear it and
	// show this graceful leave as a death.
	m.sendEach(peers, encodeLive(n))
	if others {
		// Give the notice a head start on memberlist's leave message, which would otherwise
		// overtake it in the same packet.
		time.Sleep(min(m.t.leaveWait, timeout))
	}
	rest := max(timeout-time.Since(start), 10*time.Millisecond)
	if err := m.ml.Leave(rest); err != nil {
		return fmt.Errorf("leaving the mesh: %w", err)
	}
	return nil
}

// leaveJoinWait bounds Leave's wait for a join in flight: a join of a peer that answers takes
// milliseconds (60 ms on a loaded 2-core machine in the mesh tests); one still in flight after
// this is dialing a peer that does not answer, which will not hear of this member through it.
const leaveJoinWait = time.Second

// Shutdown stops the member at once. Without Leave first, the others see it die.
func (m *Mesh) Shutdown() error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.shutdown {
		return nil
	}
	m.shutdown = true
	m.saveLastKnown()
	m.cancel()
	err := m.ml.Shutdown()
	m.unroute()
	m.wg.Wait()
	m.subs.close()
	close(m.done)
	m.log.Info("mesh member stopped")
	return err
}

// Close leaves gracefully (waiting until ctx's deadline, or 5 s) and shuts down.
func (m *Mesh) Close(ctx context.Context) error {
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	m.life.Lock()
	down := m.shutdown
	m.life.Unlock()
	if down {
		return nil
	}
	lerr := m.Leave(timeout)
	return errors.Join(lerr, m.Shutdown())
}

// memberlistNode addresses a member for SendReliable.
func memberlistNode(name, addr string) (*memberlist.Node, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("member %s has no IP address (%q)", name, addr)
	}
	return &memberlist.Node{Name: name, Addr: ip, Port: uint16(p)}, nil
}

// sendTo sends a message to a member over TCP, in a worker.
func (m *Mesh) sendTo(name, addr string, msg []byte) {
	m.do(func() {
		n, err := memberlistNode(name, addr)
		if err == nil {
			err = m.ml.SendReliable(n, msg)
		}
		if err != nil {
			m.log.Debug("sending to member", "member", name, "err", err)
		}
	})
}

func (m *Mesh) lastKnownPath() string {
	if m.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(m.cfg.StateDir, lastKnownFile)
}

// startError is memberlist's failure to start, with what to do when the cause is one a user
// meets on the first run: a host with only public or no IPv4 addresses, on which memberlist
// will not pick an address to advertise by itself.
func startError(err error) error {
	if strings.Contains(err.Error(), "no private IP address found") {
		return fmt.Errorf("starting memberlist: %w: this host has no private IPv4 address, and the mesh advertises one only when told — "+
			"start it with --bind ADDR (an address of this host that peers reach; llmkube-agent also takes --advertise ADDR)", err)
	}
	return fmt.Errorf("starting memberlist: %w", err)
}
