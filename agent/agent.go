// Package agent is the host agent: it admits placements against the host's memory budget,
// pulls and loads them on the engine drivers, supervises them, persists them, and serves the
// HTTP API that the mesh, the gateway and the console use.
//
// The Agent is built from a Config with the drivers and the sizer injected, so the same code
// runs against real engines and against the simulators in sim/.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/agent/events"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/agent/metrics"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/agent/store"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/hwprobe"
)

// Sizer estimates what a source will cost before any byte of it is pulled
// (engines/sizing.Sizer implements it). Errors are *api.Error where the code matters.
type Sizer interface {
	// EstimateRun sizes src for run.Slots contexts of contextSize tokens each, run with the
	// engine arguments run describes.
	EstimateRun(ctx context.Context, src source.Source, contextSize int, run sizing.Run) (api.SizeEstimate, error)
}

// Memory check modes (Config.MemoryCheckMode).
const (
	MemoryCheckFail = "fail"
	MemoryCheckWarn = api.MemoryCheckWarn
)

// hailo10HMemory is a Hailo-10H's own memory when the probe could not read it.
const hailo10HMemory = 8 << 30

// Config builds an Agent.
type Config struct {
	// State is the open state dir (its lock held by the caller, who closes it after the agent).
	State *state.Dir
	// ModelsDir is the model store. AllowTempStore accepts one under the temporary folder
	// (tests and demos only: see agent/store).
	ModelsDir      string
	AllowTempStore bool
	// NodeName overrides the name kept in the state dir.
	NodeName string
	// Host is what hwprobe found. Reprobe, when set, refreshes its available memory and whether
	// it runs on battery at each detection round (hwprobe.ProbeLive does); the budget stays as
	// computed at start.
	Host    hwprobe.Info
	Reprobe func(context.Context) hwprobe.Info
	// Drivers are the selected runtimes, one driver each.
	Drivers []engines.Driver
	Sizer   Sizer

	// Chosen says the operator named the runtimes (--runtimes): each one that does not run is
	// a doctor finding. Otherwise every runtime is tried and an absent one is only unused.
	Chosen bool

	// Budget overrides the memory budget in bytes; MemoryFraction overrides the fraction of
	// the host's total (0.67 up to 36 GiB, 0.75 above).
	Budget         int64
	MemoryFraction float64
	// MemoryCheckMode is "fail" (default: refuse a model whose size cannot be known, or that
	// does not fit) or "warn" (admit it with a logged warning).
	MemoryCheckMode string
	// Evict lets admission unload idle placements of lower priority to make room.
	Evict bool
	// IdleAfter is how long a ready placement must go unused to count as idle for eviction.
	IdleAfter time.Duration
	// IdleTTL is how long a ready placement may go with no request before it sleeps (its engine
	// unloaded, its budget freed, loaded again by the next request); 0 never sleeps. A
	// placement's own ttl, or a request's keep_alive, overrides it.
	IdleTTL time.Duration
	// Namespaces is the allowlist; empty allows any.
	Namespaces []string
	// Labels are the operator's labels of this host (api.Host.Labels).
	Labels map[string]string
	// AnonymousNamespace, when set, serves the gateway's listing and inference routes without a
	// token, as this one namespace: for clients that cannot send one (Home Assistant's
	// hailo-ollama integration, hailo-ollama CLIs). Off by default; shown in GET /v1/host.
	AnonymousNamespace string
	// LANHTTP: the API also serves plain HTTP to other hosts (--lan-http), for clients that
	// cannot speak TLS; only the gateway's routes, never the admin token. Shown in GET /v1/host
	// and as a doctor's finding.
	LANHTTP bool
	// Offline: downloads reach only an allowlist of hosts that are not the internet's (a local
	// mesh's loopback), so hf:// and https:// sources are refused. Gossiped, so a console
	// suggests what does work.
	Offline bool
	// AllowHTTP accepts plain http:// sources (a LAN mirror, a test server).
	AllowHTTP bool
	// GGUFDirs are the folders file:// sources may name, besides the model store. Only the
	// admin token may name a file elsewhere: a namespace token must not make the agent read
	// (and an engine load) any file the agent's user can read.
	GGUFDirs []string
	APIAddr  string
	Version  string
	// Supervision timings; zero values take the defaults in defaults().
	HealthInterval    time.Duration
	HealthTimeout     time.Duration
	ReadyTTL          time.Duration
	RestartBackoff    time.Duration
	RestartBackoffMax time.Duration
	DetectInterval    time.Duration
	SizingTimeout     time.Duration
	// StallTimeout: when the agent's state stays locked this long, Run fails (see watchdog).
	StallTimeout time.Duration
	// EventRing is how many events are kept for replay.
	EventRing int
	// ServeUploads is how many copies of model files the agent serves its peers at once (0:
	// DefaultServeUploads); ServeRate caps their bytes a second together (0: unlimited).
	ServeUploads int
	ServeRate    int64
	// HailoLibrary, when set, serves this host's hailo-ollama a mirror of Hailo's model library
	// from the store and the mesh's peers (HailoLibraryPath); nil serves none.
	HailoLibrary *HailoLibrary
	// OllamaMirror, when set, serves the Ollama daemon's models to the mesh's agents and its
	// daemon a mirror of the registry API (OllamaRegistryPath); nil serves neither.
	OllamaMirror *OllamaMirror
	Log          *slog.Logger
}

func (c *Config) defaults() {
	if c.HealthInterval <= 0 {
		c.HealthInterval = 5 * time.Second
	}
	if c.HealthTimeout <= 0 {
		c.HealthTimeout = 5 * time.Second
	}
	if c.ReadyTTL <= 0 {
		c.ReadyTTL = 3*c.HealthInterval + c.HealthTimeout
	}
	if c.RestartBackoff <= 0 {
		c.RestartBackoff = time.Second
	}
	if c.RestartBackoffMax <= 0 {
		c.RestartBackoffMax = time.Minute
	}
	if c.DetectInterval <= 0 {
		c.DetectInterval = 30 * time.Second
	}
	if c.SizingTimeout <= 0 {
		c.SizingTimeout = time.Minute
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = time.Minute
	}
	if c.IdleAfter <= 0 {
		c.IdleAfter = 10 * time.Minute
	}
	if c.EventRing <= 0 {
		c.EventRing = 1024
	}
	if c.MemoryCheckMode == "" {
		c.MemoryCheckMode = MemoryCheckFail
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Agent runs placements on one host.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	hub      *events.Hub
	metrics  *metrics.Metrics
	store    *store.Store
	files    *files
	omirror  *ollamaMirror // nil: Config.OllamaMirror unset
	drivers  map[api.Runtime]engines.Driver
	budget   int64
	hailoMem int64 // 0: no Hailo device
	started  time.Time

	saveMu sync.Mutex // orders state saves, so an older snapshot never overwrites a newer one

	// mu guards what follows. Readers that change nothing (List, Get, ServingAll: every
	// request the gateway routes reads the placements twice) share it, so concurrent requests
	// do not queue behind one another for a copy of the same few placements.
	mu         sync.RWMutex
	identity   state.Identity
	host       hwprobe.Info
	placements map[string]*placement
	engines    map[api.Runtime]api.Engine
	gen        uint64
	watchers   map[chan struct{}]struct{}
	runCtx     context.Context // set by Run; lifecycles started before Run wait for it
	pending    []*placement    // restored placements whose lifecycles Run starts
	running    bool
	closed     bool
	beat       time.Time // last housekeeping tick: /readyz fails when it stalls
	wg         sync.WaitGroup
	// hailoLoad is how long the Hailo-10H's last load took, from the load's start to ready
	// (hailo-ollama's pause, the load, a restart before it): a swap's silence, said before the
	// next one (api.Accelerator.LastLoadMillis). 0 before the first.
	hailoLoad time.Duration

	// For split placements (split.go), set by JoinMesh before Run: the mesh view, hop to reach
	// other agents over the sealed channel, and the tunnels that carry splits' RPC.
	view    func() api.MeshView
	hop     *hop.Client
	tunnels tunnelSet

	// onReplaced, set by OnReplaced before Run, hears of each swap made.
	onReplaced func(old, by api.Placement)
}

// New opens the model store, restores the placements kept in the state dir and accounts for
// them. It starts nothing: Run does.
func New(cfg Config) (*Agent, error) {
	cfg.defaults()
	if cfg.State == nil {
		return nil, errors.New("agent: no state dir")
	}
	if cfg.Sizer == nil {
		return nil, errors.New("agent: no sizer")
	}
	switch cfg.MemoryCheckMode {
	case MemoryCheckFail, MemoryCheckWarn:
	default:
		return nil, fmt.Errorf("memory check mode %q: want fail or warn", cfg.MemoryCheckMode)
	}
	if cfg.MemoryFraction < 0 || cfg.MemoryFraction > 1 {
		return nil, fmt.Errorf("memory fraction %v: want a number in (0, 1]", cfg.MemoryFraction)
	}
	if cfg.Budget < 0 {
		return nil, fmt.Errorf("memory budget %d: must not be negative", cfg.Budget)
	}
	for _, ns := range cfg.Namespaces {
		if err := api.ValidNamespace(ns); err != nil {
			return nil, err
		}
	}
	if err := api.CheckLabels(cfg.Labels); err != nil {
		return nil, err
	}
	if ns := cfg.AnonymousNamespace; ns != "" {
		if err := api.ValidNamespace(ns); err != nil {
			return nil, fmt.Errorf("anonymous namespace: %w", err)
		}
		if len(cfg.Namespaces) > 0 && !slices.Contains(cfg.Namespaces, ns) {
			return nil, fmt.Errorf("anonymous namespace %q is not among the namespaces allowed on this host (%s)", ns, strings.Join(cfg.Namespaces, ", "))
		}
	}
	// The store is on this machine's disk, whatever host the probe describes (a demo fixture).
	st, err := store.Open(cfg.ModelsDir, store.Options{GOOS: runtime.GOOS, AllowTemp: cfg.AllowTempStore})
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:        cfg,
		log:        cfg.Log,
		store:      st,
		drivers:    make(map[api.Runtime]engines.Driver),
		host:       cfg.Host,
		placements: make(map[string]*placement),
		engines:    make(map[api.Runtime]api.Engine),
		watchers:   make(map[chan struct{}]struct{}),
		started:    time.Now().UTC(),
	}
	a.files = newFiles(st, cfg.ServeUploads, cfg.ServeRate, cfg.Log, func() {
		a.mu.Lock()
		a.changedLocked()
		a.mu.Unlock()
	})
	if cfg.OllamaMirror != nil {
		a.files.ollama = cfg.OllamaMirror.Models
		a.omirror = newOllamaMirror(a, *cfg.OllamaMirror)
	}
	for _, d := range cfg.Drivers {
		r := d.Runtime()
		if _, dup := a.drivers[r]; dup {
			return nil, fmt.Errorf("agent: two drivers for runtime %s", r)
		}
		a.drivers[r] = d
		a.engines[r] = api.Engine{Runtime: r, Detail: "not detected yet"}
	}
	a.budget = budgetFor(cfg.Host, cfg.Budget, cfg.MemoryFraction)
	for _, acc := range cfg.Host.Accelerators {
		if acc.Kind == hwprobe.KindHailo {
			a.hailoMem = acc.Memory
			if a.hailoMem <= 0 {
				a.hailoMem = hailo10HMemory
			}
		}
	}

	saved, ok, err := cfg.State.Load()
	if err != nil {
		return nil, err
	}
	a.identity = saved.Identity
	if a.identity.NodeID == "" {
		if a.identity.NodeID, err = state.NewNodeID(); err != nil {
			return nil, err
		}
		a.identity.CreatedAt = a.started
	}
	switch {
	case cfg.NodeName != "":
		a.identity.NodeName = cfg.NodeName
	case a.identity.NodeName == "":
		a.identity.NodeName = defaultNodeName(cfg.Host.Hostname, a.identity.NodeID)
	}
	a.metrics = metrics.New(a.metricsSnapshot)
	a.hub = events.New(a.identity.NodeName, cfg.EventRing)
	if ok {
		a.restore(saved.Placements)
	}
	a.cleanPartials()
	if err := a.save(); err != nil {
		return nil, fmt.Errorf("writing state: %w", err)
	}
	return a, nil
}

// budgetFor is the memory budget: the operator's bytes, else fraction × total (0.67 up to
// 36 GiB, 0.75 above). Zero when the total is unknown and nothing overrides it: admission then
// fails closed.
func budgetFor(h hwprobe.Info, override int64, fraction float64) int64 {
	if override > 0 {
		return override
	}
	total := h.Memory.Total
	if total <= 0 || !h.Known(hwprobe.FieldTotal) {
		return 0
	}
	if fraction == 0 {
		fraction = 0.67
		if total > 36<<30 {
			fraction = 0.75
		}
	}
	return int64(float64(total) * fraction)
}

// defaultNodeName is the hostname plus a piece of the node id: Pis flashed from one image all
// call themselves "raspberrypi", and node names must be unique in the mesh.
func defaultNodeName(hostname, id string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(hostname) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r == '.' || r == '_' || r == ' ':
			b.WriteRune('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	name := strings.Trim(b.String(), "-")
	if name == "" {
		name = "host"
	}
	return name + "-" + id[:4]
}

// Name is the agent's node name.
func (a *Agent) Name() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.identity.NodeName
}

// Metrics is the agent's Prometheus instrumentation.
func (a *Agent) Metrics() *metrics.Metrics { return a.metrics }

// Events is the agent's event hub: the mesh publishes member changes into it too.
func (a *Agent) Events() *events.Hub { return a.hub }

// Budget is the memory budget in bytes (0: unknown, every admission fails closed).
func (a *Agent) Budget() int64 { return a.budget }

// Run starts the engines' detection, the restored placements and housekeeping, and returns
// when ctx ends, after stopping the engine processes the agent started. Placements stay
// recorded as they were, so the next start restores them.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.running || a.closed {
		a.mu.Unlock()
		return errors.New("agent: Run called twice")
	}
	a.running = true
	a.mu.Unlock()

	a.logStartup()
	a.detectAll(ctx)

	a.mu.Lock()
	a.runCtx = ctx
	a.beat = time.Now()
	pending := a.pending
	a.pending = nil
	for _, pl := range pending {
		a.startLocked(pl)
	}
	a.mu.Unlock()
	if len(pending) > 0 {
		a.log.Info("restoring placements", "count", len(pending))
	}

	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.housekeeping(ctx)
	}()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.files.run(ctx)
	}()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.housekeepParts(ctx, a.heartbeatEvery())
	}()
	stalled := a.watchdog(ctx)
	select {
	case <-ctx.Done():
	case err := <-stalled:
		// Limping on with a stuck agent would leave placements looking served: exit, loudly,
		// so the service manager restarts the agent (which restores its placements).
		a.log.Error("agent stalled; stopping so the service manager restarts it", "err", err)
		return err
	}
	a.shutdown()
	return nil
}

// watchdog reports when the agent's lock has been held for StallTimeout: every API call,
// supervision step and admission needs it, so a deadlock there would otherwise leave an agent
// that answers /healthz and nothing else.
func (a *Agent) watchdog(ctx context.Context) <-chan error {
	out := make(chan error, 1)
	go func() {
		tick := time.NewTicker(a.cfg.StallTimeout / 6)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			got := make(chan struct{})
			go func() {
				a.mu.Lock()
				a.mu.Unlock() // an empty critical section: only whether it can be entered matters
				close(got)
			}()
			select {
			case <-got:
			case <-ctx.Done():
				return
			case <-time.After(a.cfg.StallTimeout):
				out <- fmt.Errorf("the agent's state has been locked for %s", a.cfg.StallTimeout)
				return
			}
		}
	}()
	return out
}

// logStartup says once what the operator most needs to know about this host.
func (a *Agent) logStartup() {
	h := a.cfg.Host
	hailo := ""
	for _, acc := range h.Accelerators {
		if acc.Kind == hwprobe.KindHailo {
			hailo = acc.Device
		}
	}
	if hailo != "" {
		a.log.Info("Hailo device node present", "device", hailo, "device_memory", api.FormatBytes(a.hailoMem))
	} else {
		a.log.Info("no Hailo device node: hailo:// placements will be refused")
	}
	if ns := a.cfg.AnonymousNamespace; ns != "" {
		a.log.Warn("anonymous access is on: listing and inference routes answer requests without a token as namespace "+ns+
			" (for clients that cannot send one); anyone who reaches this port can use its models", "namespace", ns)
	}
	if h.Memory.HostFigures {
		a.log.Warn("memory figures are the host's: the memory controller is on cgroup v1, so a container limit is not seen; set --memory-budget if this agent is limited")
	}
	if h.Memory.Total > 0 && a.budget > h.Memory.Total {
		a.log.Warn("the memory budget is larger than the host's memory: placements may be admitted that the host cannot hold",
			"budget", api.FormatBytes(a.budget), "total", api.FormatBytes(h.Memory.Total))
	}
	if a.budget == 0 {
		a.log.Warn("host memory total unknown and no --memory-budget: every placement will be refused (MemoryCheckFailed)")
	}
	a.log.Info("agent ready to admit", "node", a.Name(), "budget", api.FormatBytes(a.budget), "total", api.FormatBytes(h.Memory.Total),
		"memory_check", a.cfg.MemoryCheckMode, "evict", a.cfg.Evict, "store", a.store.Path())
	for _, n := range h.Notes {
		a.log.Info("host probe", "note", n)
	}
}

// housekeeping refreshes engine detection and host memory, and beats the watchdog /readyz reads.
func (a *Agent) housekeeping(ctx context.Context) {
	beat := time.NewTicker(a.heartbeatEvery())
	defer beat.Stop()
	detect := time.NewTicker(a.cfg.DetectInterval)
	defer detect.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			a.mu.Lock()
			a.beat = time.Now()
			a.mu.Unlock()
		case <-detect.C:
			a.detectAll(ctx)
			if a.cfg.Reprobe != nil {
				info := a.cfg.Reprobe(ctx)
				a.mu.Lock()
				a.host.Memory.Available = info.Memory.Available
				if info.OnBattery != a.host.OnBattery {
					a.host.OnBattery = info.OnBattery
					a.log.Info("power source changed", "on_battery", info.OnBattery)
					// Published at once: intents kept off battery hosts must see it now.
					a.changedLocked()
				}
				a.mu.Unlock()
			}
		}
	}
}

func (a *Agent) heartbeatEvery() time.Duration {
	return min(a.cfg.HealthInterval, 5*time.Second)
}

// Ready reports whether the agent is serving: Run has started and its housekeeping has ticked
// recently. A stalled agent must say so rather than keep answering "ready".
func (a *Agent) Ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.running || a.runCtx == nil {
		return errors.New("starting")
	}
	if a.closed {
		return errors.New("stopping")
	}
	if stale := time.Since(a.beat); stale > 3*a.heartbeatEvery()+time.Second {
		return fmt.Errorf("housekeeping stalled for %s", stale.Round(time.Second))
	}
	return nil
}

// shutdown stops every lifecycle and the engine processes the agent owns, keeping the
// placements' recorded states for the next start.
func (a *Agent) shutdown() {
	a.mu.Lock()
	a.closed = true
	for _, pl := range a.placements {
		pl.cancel()
	}
	a.mu.Unlock()
	a.wg.Wait()
	a.tunnels.closeAll()
	// Engine processes (llama-server) are the agent's children: leaving them would orphan
	// engines nobody supervises. Daemon models (Ollama, hailo-ollama) stay loaded; the next
	// start loads them again, which the daemons answer at once.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, d := range a.drivers {
		if s, ok := d.(interface{ StopAll(context.Context) }); ok {
			s.StopAll(ctx)
		}
	}
	if err := a.save(); err != nil {
		a.log.Error("saving state at shutdown", "err", err)
	}
	a.log.Info("agent stopped")
}

// Watch returns a channel that receives (coalesced) whenever the host or a placement changes,
// and a function to stop watching. The mesh uses it to publish this host's state.
func (a *Agent) Watch() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	a.watchers[ch] = struct{}{}
	a.mu.Unlock()
	return ch, func() {
		a.mu.Lock()
		delete(a.watchers, ch)
		a.mu.Unlock()
	}
}

// changedLocked bumps the generation and wakes the watchers.
func (a *Agent) changedLocked() {
	a.gen++
	for ch := range a.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// save writes the persisted state. Placements still sizing are not kept: nothing was
// admitted for them yet.
func (a *Agent) save() error {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	s := state.State{Identity: a.identity}
	for _, pl := range a.sortedLocked() {
		if pl.p.State == api.StateSizing {
			continue
		}
		s.Placements = append(s.Placements, pl.p)
	}
	a.mu.Unlock()
	// Records of failures are the first to go when the document would not load again: the
	// placements that run must be remembered, why old ones failed need not.
	for {
		b, err := state.Encode(s)
		if err != nil || len(b) <= state.MaxSize {
			break
		}
		drop := (len(b)-state.MaxSize)/(len(b)/max(1, len(s.Placements))) + 1
		before := len(s.Placements)
		s.Placements = slices.DeleteFunc(s.Placements, func(p api.Placement) bool {
			if drop > 0 && p.State.Terminal() {
				drop--
				return true
			}
			return false
		})
		if len(s.Placements) == before {
			break // only running placements left: Save refuses, the last good file stays
		}
		a.log.Warn("state too large: the oldest failed placements' records are not saved", "dropped", before-len(s.Placements))
	}
	return a.cfg.State.Save(s)
}

// saveOrLog persists and logs a failure: losing a write must be loud, but it must not undo a
// state change that already happened in the engines.
func (a *Agent) saveOrLog() {
	if err := a.save(); err != nil {
		a.log.Error("saving state", "err", err)
	}
}

func (a *Agent) sortedLocked() []*placement {
	out := make([]*placement, 0, len(a.placements))
	for _, pl := range a.placements {
		out = append(out, pl)
	}
	slices.SortFunc(out, func(x, y *placement) int { return oldestFirst(&x.p, &y.p) })
	return out
}

// AnonymousNamespace is the namespace served without a token on listing and inference
// routes; "" when anonymous access is off (the default).
func (a *Agent) AnonymousNamespace() string { return a.cfg.AnonymousNamespace }

// Host is the agent's capacity and state, as GET /v1/host serves it.
func (a *Agent) Host() api.Host {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hostLocked()
}

func (a *Agent) hostLocked() api.Host {
	h := a.host
	mem := a.memoryLocked()
	out := api.Host{
		Name:       a.identity.NodeName,
		Hostname:   h.Hostname,
		OS:         h.OS,
		Arch:       h.Arch,
		Chip:       h.Chip,
		CPUs:       h.CPUs,
		PageSize:   h.PageSize,
		Memory:     mem,
		Namespaces: slices.Clone(a.cfg.Namespaces),
		Labels:     maps.Clone(a.cfg.Labels),
		OnBattery:  h.OnBattery,
		Anonymous:  a.cfg.AnonymousNamespace,
		LANHTTP:    a.cfg.LANHTTP,
		Offline:    a.cfg.Offline,
		APIAddr:    a.cfg.APIAddr,
		Version:    a.cfg.Version,
		StartedAt:  a.started,
		Generation: a.gen,
		Unknown:    slices.Clone(h.Unknown),
		Files:      a.files.service(),
	}
	// The Hailo-10H's model: the one answering, else the one admitted to it (loading, or
	// pulled for a device nothing runs on). A device seen free while a swap's newcomer loads
	// would be ranked "free" and a keeper would swap back the model just replaced.
	loaded, taking := "", ""
	for _, pl := range a.placements {
		if !pl.p.State.Terminal() && pl.p.State != api.StateSizing {
			out.Placements++
		}
		if pl.p.Memory.Device != api.DeviceHailo {
			continue
		}
		switch st := a.viewLocked(pl).State; {
		case st == api.StateReady:
			loaded = pl.p.Model
		case holds(st) != holdNothing && st != api.StateStopping:
			taking = pl.p.Model
		}
	}
	if loaded == "" {
		loaded = taking
	}
	for _, acc := range h.Accelerators {
		x := api.Accelerator{Kind: acc.Kind, Name: acc.Name, Device: acc.Device, Memory: acc.Memory}
		if acc.Kind == hwprobe.KindHailo {
			x.Memory = a.hailoMem
			x.Loaded = loaded
			x.LastLoadMillis = a.hailoLoad.Milliseconds()
		}
		out.Accelerators = append(out.Accelerators, x)
	}
	for _, r := range api.Runtimes {
		if e, ok := a.engines[r]; ok {
			out.Engines = append(out.Engines, e)
		}
	}
	if e, ok := a.engines[api.RuntimeRPCServer]; ok {
		out.Engines = append(out.Engines, e) // its Version is the RPC protocol splits need
	}
	return out
}

// memoryLocked is the host's memory accounting.
func (a *Agent) memoryLocked() api.Memory {
	m := a.host.Memory
	out := api.Memory{
		Total:       m.Total,
		Available:   m.Available,
		Budget:      a.budget,
		CgroupLimit: m.CgroupLimit,
		HostFigures: m.HostFigures,
	}
	for _, pl := range a.placements {
		if pl.p.Memory.Device == api.DeviceHailo {
			continue
		}
		switch holds(pl.p.State) {
		case holdCommitted:
			out.Committed += heldOf(pl.p)
		case holdReserved:
			out.Reserved += pl.p.Memory.Bytes
		}
	}
	return out
}

func (a *Agent) metricsSnapshot() metrics.Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := metrics.Snapshot{Memory: a.memoryLocked(), States: make(map[api.PlacementState]int)}
	for _, pl := range a.placements {
		s.States[a.viewLocked(pl).State]++
	}
	return s
}

// publish sends an event about a placement (a copy of its current view).
func (a *Agent) publishLocked(typ string, pl *placement, msg string, code api.Code) {
	v := a.viewLocked(pl)
	a.hub.Publish(api.Event{Type: typ, Message: msg, Code: code, Placement: &v})
}
