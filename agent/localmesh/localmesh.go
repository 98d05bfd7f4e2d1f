// Package localmesh runs a whole mesh on one machine: real agents (agent/node, the code
// `llmkube-agent run` runs) with their API, gateway and memberlist on loopback, each on a
// recorded host (an hwprobe root) with simulated engines from sim/. The demo and the end-to-end
// tests of the console and the headless commands stand on it. No mDNS: hosts join by seeds.
package localmesh

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/node"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/assets"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/hailo"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/hwprobe"
	"github.com/llmkube/mesh/mesh"
	"github.com/llmkube/mesh/sim/gguf"
	hailosim "github.com/llmkube/mesh/sim/hailo"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// HostSpec is one simulated host.
type HostSpec struct {
	Name string
	// Demo names an embedded demo host (assets.DemoHosts) whose hwprobe root it runs on; Root
	// names any other root folder instead.
	Demo     string
	Root     string
	OS, Arch string
	// Runtimes are the engines simulated on the host.
	Runtimes []api.Runtime
	// Budget overrides the memory budget in bytes (0: the agent's default for the host).
	Budget     int64
	Namespaces []string
	// Advertise, when set, is given the API listener's address and returns the address the host
	// announces to the mesh instead: a proxy in front of it (sim/cable), for tests of faults.
	Advertise func(apiAddr string) string
	// Ollama, when set, is a real Ollama daemon on loopback the host runs instead of the
	// simulator, OllamaModels its models folder: the agent serves its models to the peers and
	// pulls theirs through its registry mirror, the origin registry being OllamaRegistry.
	Ollama, OllamaModels, OllamaRegistry string
}

// Options shape the mesh.
type Options struct {
	// Dir holds every host's state, models and engine data; a temporary folder when empty
	// (removed by Close).
	Dir    string
	MeshID string // "local" when empty
	// Hosts default to DemoHosts().
	Hosts []HostSpec
	// RPCServer, when set, is the ggml-rpc-server hosts running llama-server also run, for
	// split placements; a host may also run it alone (api.RuntimeRPCServer in its Runtimes), a
	// worker of splits.
	RPCServer string
	// Models are GGUF files written on every llama-server host beside the sim/gguf presets.
	Models []gguf.Spec
	// LlamaServer is the llama-server program for hosts that run it (a build of
	// cmd/llama-server-sim, or anything that takes llama-server's command line). Required when a
	// host runs llama-server.
	LlamaServer string
	// Fast makes every simulated engine answer at once (tests); otherwise they keep the real
	// engines' published pace (the demo).
	Fast bool
	// Profile is the mesh's timing profile; "" = mesh.ProfileLocal (fast gossip). A test of
	// what a real LAN's gossip pace shows gives mesh.ProfileLAN.
	Profile string
	// OnDemand turns on-demand placement on for these namespaces on every host (node.Config).
	OnDemand []string
	// ScaleAfter and ScaleIdle time an intent's scaling on every host (node.Config).
	ScaleAfter, ScaleIdle time.Duration
	// DetectInterval is how often every agent probes its engines and reads its host root again
	// (free memory, on battery: agent.Config); zero: the agent's default, 30 s.
	DetectInterval time.Duration
	Log            *slog.Logger
}

// DemoHosts are the demo's three hosts: a Raspberry Pi 5 with a Hailo-10H running hailo-ollama,
// a Mac mini with llama-server, and a Linux GPU server with Ollama.
func DemoHosts() []HostSpec {
	return []HostSpec{
		{Name: "pi5-hailo", Demo: "pi5-hailo", OS: "linux", Arch: "arm64", Runtimes: []api.Runtime{api.RuntimeHailoOllama}},
		{Name: "mac-mini", Demo: "mac-mini", OS: "darwin", Arch: "arm64", Runtimes: []api.Runtime{api.RuntimeLlamaServer}},
		{Name: "gpu-server", Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama}},
	}
}

// Host is one running host of the mesh.
type Host struct {
	Spec HostSpec
	Node *node.Node
	// URL is the agent API's base URL.
	URL string
	// Hailo and Ollama are the host's simulated daemons (nil when it has none).
	Hailo  *hailosim.Server
	Ollama *ollamasim.Server
	// Models is a folder of GGUF files made for the host (llama-server hosts), one per
	// sim/gguf preset, to place as file:// sources.
	Models string

	state *state.Dir
}

// Mesh is a running local mesh.
type Mesh struct {
	Join  api.Join
	Hosts []*Host

	dir     string
	ownDir  bool
	opts    Options // as started: AddHost starts hosts alike
	closers []func() error
	once    sync.Once
}

// Start runs every host and returns once all of them have joined and see each other. ctx
// bounds the start only: the mesh runs until Close.
func Start(ctx context.Context, opts Options) (*Mesh, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.MeshID == "" {
		opts.MeshID = "local"
	}
	if len(opts.Hosts) == 0 {
		opts.Hosts = DemoHosts()
	}
	secret, err := api.NewSecret()
	if err != nil {
		return nil, err
	}
	m := &Mesh{Join: api.Join{MeshID: opts.MeshID, Secret: secret}, dir: opts.Dir, opts: opts}
	if m.dir == "" {
		if m.dir, err = os.MkdirTemp("", "llmkube-localmesh-"); err != nil {
			return nil, err
		}
		m.ownDir = true
	}
	life := context.WithoutCancel(ctx)
	for _, spec := range opts.Hosts {
		h, err := m.startHost(life, spec, opts)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("host %s: %w", spec.Name, err)
		}
		m.Hosts = append(m.Hosts, h)
		// Later hosts join through the first: one seed is all memberlist needs.
		if len(m.Join.Seeds) == 0 && h.Node.GossipAddr() != "" {
			m.Join.Seeds = []string{h.Node.GossipAddr()}
		}
	}
	if err := m.WaitConverged(ctx, time.Minute); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// AddHost starts one more host, which joins the running mesh (through its first host), as
// Start's hosts were started; it returns once the host runs, not once the others see it. For
// tests of what a host joining late shows, called from the goroutine that reads m.Hosts. ctx
// bounds the start only; Close stops the host.
func (m *Mesh) AddHost(ctx context.Context, spec HostSpec) (*Host, error) {
	h, err := m.startHost(context.WithoutCancel(ctx), spec, m.opts)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", spec.Name, err)
	}
	m.Hosts = append(m.Hosts, h)
	return h, nil
}

// JoinString is the mesh's join string (with the first host as seed), for consoles.
func (m *Mesh) JoinString() string { return m.Join.String() }

// AdminToken is the mesh's admin API token.
func (m *Mesh) AdminToken() string { return api.AdminToken(m.Join.Secret) }

// Host finds a host by name.
func (m *Mesh) Host(name string) *Host {
	for _, h := range m.Hosts {
		if h.Spec.Name == name {
			return h
		}
	}
	return nil
}

// Client is an admin client of a host's API.
func (m *Mesh) Client(name string) *apiclient.Client {
	h := m.Host(name)
	if h == nil {
		return nil
	}
	return apiclient.New(h.URL, m.AdminToken())
}

// WaitConverged waits until every host's view shows every host alive with its state and its
// engines detected.
func (m *Mesh) WaitConverged(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if m.converged() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the local mesh did not converge: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (m *Mesh) converged() bool {
	for _, h := range m.Hosts {
		if h.Node.Mesh == nil {
			continue
		}
		v := h.Node.Mesh.View()
		for _, other := range m.Hosts {
			mb, ok := v.Member(other.Node.Agent.Name())
			if !ok || mb.Liveness != api.Alive || mb.Host == nil {
				return false
			}
			// Its engines too: a console joining right after must not see "not installed".
			for _, r := range other.Spec.Runtimes {
				if !enginePresent(mb.Host.Engines, r) {
					return false
				}
			}
		}
	}
	return true
}

func enginePresent(es []api.Engine, r api.Runtime) bool {
	for _, e := range es {
		if e.Runtime == r && e.Present {
			return true
		}
	}
	return false
}

// Close stops every host (each leaves the mesh gracefully) and its engines, and removes the
// folder when Start made it.
func (m *Mesh) Close() error {
	var errs []error
	m.once.Do(func() {
		for i := len(m.closers) - 1; i >= 0; i-- {
			if err := m.closers[i](); err != nil {
				errs = append(errs, err)
			}
		}
		if m.ownDir {
			errs = append(errs, os.RemoveAll(m.dir))
		}
	})
	return errors.Join(errs...)
}

func (m *Mesh) startHost(ctx context.Context, spec HostSpec, opts Options) (*Host, error) {
	dir := filepath.Join(m.dir, spec.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	root := spec.Root
	if spec.Demo != "" {
		r, err := assets.ExtractDemoHost(spec.Demo, filepath.Join(dir, "hw"))
		if err != nil {
			return nil, err
		}
		root = r
	}
	if root == "" {
		return nil, errors.New("no hwprobe root: give Demo or Root")
	}
	log := opts.Log.With("host", spec.Name)
	h := &Host{Spec: spec}
	// Every engine, registry and library of a local mesh is on loopback, and nothing else is
	// reached: an hf:// or https:// source naming an internet host is refused before any
	// connection, with the allowlist in its message, so the demo is offline by construction.
	peers := &download.Peers{}
	guard := download.Options{AllowPrivate: true, AllowHosts: loopbackHosts, AllowHostsWhy: offlineWhy, Peers: peers, Log: log.With("part", "download")}
	if opts.Fast {
		guard.RetryBackoff = 20 * time.Millisecond
	}
	sizer := &sizing.Sizer{Guard: guard, Log: log.With("part", "sizing")}
	drivers, ollamaReal, err := m.startEngines(ctx, spec, opts, dir, h, sizer, guard, log)
	if err != nil {
		return nil, err
	}

	sd, err := state.Open(filepath.Join(dir, "state"))
	if err != nil {
		return nil, err
	}
	h.state = sd
	m.closers = append(m.closers, sd.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	info := hwprobe.Probe(ctx, hwprobe.Options{Root: root, OS: spec.OS, Arch: spec.Arch})
	acfg := agent.Config{
		State:          sd,
		ModelsDir:      filepath.Join(dir, "models"),
		AllowTempStore: true,
		NodeName:       spec.Name,
		Host:           info,
		// The root is read again as a real host's is: a test changes a file there (a battery
		// unplugged), and the agent sees it at its next round.
		Reprobe: func(ctx context.Context) hwprobe.Info {
			return hwprobe.ProbeLive(ctx, hwprobe.Options{Root: root, OS: spec.OS, Arch: spec.Arch})
		},
		DetectInterval: opts.DetectInterval,
		Drivers:        drivers,
		Sizer:          sizer,
		Budget:         spec.Budget,
		Namespaces:     spec.Namespaces,
		AllowHTTP:      true,
		GGUFDirs:       nonEmpty(h.Models),
		Offline:        true, // guard's allowlist: loopback only
		Version:        "local",
		Log:            log.With("part", "agent"),
	}
	if ollamaReal != nil {
		acfg.OllamaMirror = &agent.OllamaMirror{Models: spec.OllamaModels, Registry: spec.OllamaRegistry, Download: guard}
		acfg.OllamaMirror.Attach(ollamaReal, ln.Addr().String(), acfg.ModelsDir, log)
	}
	if opts.Fast {
		acfg.HealthInterval = 250 * time.Millisecond
		acfg.RestartBackoff = 50 * time.Millisecond
	}
	apiAddr := ln.Addr().String()
	if spec.Advertise != nil {
		apiAddr = spec.Advertise(apiAddr)
	}
	n, err := node.Start(ctx, node.Config{
		Join:       m.Join,
		Agent:      acfg,
		Listener:   ln,
		APIAddr:    apiAddr,
		Mesh:       &node.MeshConfig{Bind: "127.0.0.1", Port: 0, Profile: cmp.Or(opts.Profile, mesh.ProfileLocal)},
		Peers:      peers,
		OnDemand:   opts.OnDemand,
		ScaleAfter: opts.ScaleAfter,
		ScaleIdle:  opts.ScaleIdle,
		Log:        log,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	m.closers = append(m.closers, n.Close)
	h.Node = n
	h.URL = "http://" + ln.Addr().String() // the agent itself, not what it announces
	return h, nil
}

// startEngines starts the simulated engines a host runs and makes a driver for each of its
// runtimes, telling sizer where each sizes its models from. ollamaReal is the driver of a real
// Ollama daemon (HostSpec.Ollama), nil without one: the agent mirrors its models to the peers.
func (m *Mesh) startEngines(ctx context.Context, spec HostSpec, opts Options, dir string, h *Host, sizer *sizing.Sizer, guard download.Options, log *slog.Logger) (drivers []engines.Driver, ollamaReal *ollama.Driver, err error) {
	for _, r := range spec.Runtimes {
		switch r {
		case api.RuntimeHailoOllama:
			d, err := m.startHailoSim(ctx, opts, dir, h, sizer, log)
			if err != nil {
				return nil, nil, err
			}
			drivers = append(drivers, d)
		case api.RuntimeOllama:
			if spec.Ollama != "" {
				sizer.OllamaRegistry, sizer.OllamaDaemon = spec.OllamaRegistry, spec.Ollama
				d, err := ollama.New(ollama.Config{URL: spec.Ollama}, log.With("part", "engine"))
				if err != nil {
					return nil, nil, err
				}
				drivers = append(drivers, d)
				ollamaReal = d
				break
			}
			d, err := m.startOllamaSim(ctx, opts, dir, h, sizer, log)
			if err != nil {
				return nil, nil, err
			}
			drivers = append(drivers, d)
		case api.RuntimeLlamaServer:
			ds, err := llamaServerDrivers(spec, opts, dir, h, guard, log)
			if err != nil {
				return nil, nil, err
			}
			drivers = append(drivers, ds...)
		case api.RuntimeRPCServer:
			rd, err := rpcDriver(dir, opts, log)
			if err != nil {
				return nil, nil, err
			}
			drivers = append(drivers, rd)
		default:
			return nil, nil, fmt.Errorf("unknown runtime %q", r)
		}
	}
	return drivers, ollamaReal, nil
}

// startHailoSim starts a host's hailo-ollama simulator, closed with the mesh, and its driver.
func (m *Mesh) startHailoSim(ctx context.Context, opts Options, dir string, h *Host, sizer *sizing.Sizer, log *slog.Logger) (*hailo.Driver, error) {
	cfg := hailosim.DefaultConfig()
	if opts.Fast {
		cfg = hailosim.FastConfig("")
	}
	cfg.DataDir = filepath.Join(dir, "hailo-ollama")
	// The zoo's models size as the real ones (the library reports their HEFs' sizes), so the
	// mesh's numbers are a real Hailo-10H's, from small fake files.
	cfg.RealSizes = true
	srv, err := hailosim.Start(ctx, cfg, log.With("part", "hailo-sim"))
	if err != nil {
		return nil, err
	}
	m.closers = append(m.closers, srv.Close)
	h.Hailo = srv
	sizer.HailoManifestsDir = filepath.Join(cfg.DataDir, "models", "manifests")
	sizer.HailoLibraryURL = srv.LibraryURL()
	return hailo.New(hailo.Config{URL: srv.URL()}, log.With("part", "engine"))
}

// startOllamaSim starts a host's Ollama simulator, closed with the mesh, and its driver.
func (m *Mesh) startOllamaSim(ctx context.Context, opts Options, dir string, h *Host, sizer *sizing.Sizer, log *slog.Logger) (*ollama.Driver, error) {
	cfg := ollamasim.DefaultConfig()
	// The daemon's blobs on disk, as Ollama keeps them: a model sizes from its blob's
	// header once pulled, as it did from the registry before.
	cfg.ModelsDir = filepath.Join(dir, "ollama")
	if !opts.Fast {
		cfg.PullBytesPerSec = 400 << 20
		cfg.LoadDelay = 1500 * time.Millisecond
		cfg.TokensPerSec = 30
		cfg.TTFT = 150 * time.Millisecond
	}
	srv, err := ollamasim.Start(ctx, cfg, log.With("part", "ollama-sim"))
	if err != nil {
		return nil, err
	}
	m.closers = append(m.closers, srv.Close)
	h.Ollama = srv
	sizer.OllamaRegistry = srv.RegistryURL()
	sizer.OllamaDaemon = srv.URL()
	return ollama.New(ollama.Config{URL: srv.URL()}, log.With("part", "engine"))
}

// llamaServerDrivers writes a llama-server host's GGUF files and makes its driver, with a
// ggml-rpc-server driver beside it when Options.RPCServer is set and the host does not run
// rpc-server on its own (that runtime brings its driver itself).
func llamaServerDrivers(spec HostSpec, opts Options, dir string, h *Host, guard download.Options, log *slog.Logger) ([]engines.Driver, error) {
	if opts.LlamaServer == "" {
		return nil, errors.New("runs llama-server, but Options.LlamaServer names no program")
	}
	h.Models = filepath.Join(dir, "gguf")
	if err := writeModels(h.Models, append(gguf.Presets(), opts.Models...)); err != nil {
		return nil, err
	}
	env := []string{"LLAMA_SIM_LOAD_DELAY=1s", "LLAMA_SIM_TOKENS_PER_SEC=40", "LLAMA_SIM_TTFT=120ms"}
	if opts.Fast {
		env = []string{"LLAMA_SIM_LOAD_DELAY=0s", "LLAMA_SIM_TOKENS_PER_SEC=0", "LLAMA_SIM_TTFT=0s"}
	}
	d, err := llamaserver.New(llamaserver.Config{
		Binary:    opts.LlamaServer,
		ModelsDir: filepath.Join(dir, "models"),
		LogDir:    filepath.Join(dir, "state", "logs"),
		GGUFDirs:  []string{h.Models, filepath.Join(dir, "models")},
		Env:       env,
		Download:  guard,
	}, log.With("part", "engine"))
	if err != nil {
		return nil, err
	}
	drivers := []engines.Driver{d}
	if opts.RPCServer != "" && !spec.runs(api.RuntimeRPCServer) {
		rd, err := rpcDriver(dir, opts, log)
		if err != nil {
			return nil, err
		}
		drivers = append(drivers, rd)
	}
	return drivers, nil
}

// rpcDriver is a host's ggml-rpc-server driver: Options.RPCServer, for its shares of splits.
func rpcDriver(dir string, opts Options, log *slog.Logger) (*llamaserver.RPCDriver, error) {
	if opts.RPCServer == "" {
		return nil, errors.New("runs rpc-server, but Options.RPCServer names no program")
	}
	return llamaserver.NewRPC(llamaserver.RPCConfig{Binary: opts.RPCServer, LogDir: filepath.Join(dir, "state", "logs"),
		CacheDir: filepath.Join(dir, "rpc-cache"), Threads: 1}, log.With("part", "engine"))
}

// writeModels makes one sparse GGUF file per spec (the sim/gguf presets): valid headers that
// size like the real models, and no gigabytes on disk.
func writeModels(dir string, specs []gguf.Spec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range specs {
		path := filepath.Join(dir, p.Name+".gguf")
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := gguf.Write(path, p); err != nil {
			return err
		}
	}
	return nil
}

// ModelPath is the GGUF file of a sim/gguf preset on a llama-server host ("sim-1b").
func (h *Host) ModelPath(preset string) string {
	return filepath.Join(h.Models, preset+".gguf")
}

// Runs reports whether the host simulates a runtime.
func (h *Host) Runs(r api.Runtime) bool { return h.Spec.runs(r) }

func (s HostSpec) runs(r api.Runtime) bool { return slices.Contains(s.Runtimes, r) }

// Placed is an initial placement: a request on one host.
type Placed struct {
	Host    string
	Request api.PlacementRequest
}

// Place makes placements and waits until each is ready.
func (m *Mesh) Place(ctx context.Context, ps ...Placed) ([]api.Placement, error) {
	var out []api.Placement
	for _, p := range ps {
		c := m.Client(p.Host)
		if c == nil {
			return out, fmt.Errorf("no host %q", p.Host)
		}
		pl, err := c.Place(ctx, p.Request)
		if err != nil {
			return out, fmt.Errorf("placing %s on %s: %w", p.Request.Source, p.Host, err)
		}
		pl, err = c.WaitPlacement(ctx, pl.ID, 50*time.Millisecond, nil)
		if err != nil {
			return out, fmt.Errorf("waiting for %s on %s: %w", p.Request.Source, p.Host, err)
		}
		if pl.State == api.StateReady {
			// Ready on its host is not yet ready in the others' views: gossip carries it within a
			// round or two. Until then another host's gateway answers "not ready".
			if err := m.waitSeenReady(ctx, pl); err != nil {
				return out, err
			}
		}
		out = append(out, pl)
	}
	return out, nil
}

// waitSeenReady waits until every host's view shows placement pl ready.
func (m *Mesh) waitSeenReady(ctx context.Context, pl api.Placement) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if m.seenReady(pl) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is ready on %s, but not every host's view shows it: %w", pl.Model, pl.Host, ctx.Err())
		case <-t.C:
		}
	}
}

func (m *Mesh) seenReady(pl api.Placement) bool {
	for _, h := range m.Hosts {
		if h.Node.Mesh == nil {
			continue
		}
		mb, ok := h.Node.Mesh.View().Member(pl.Host)
		if !ok {
			return false
		}
		seen := false
		for _, p := range mb.Placements {
			seen = seen || p.ID == pl.ID && p.State == api.StateReady
		}
		if !seen {
			return false
		}
	}
	return true
}

// loopbackHosts are the only hosts a local mesh downloads or sizes from.
var loopbackHosts = []string{"127.0.0.1", "::1", "localhost"}

// offlineWhy follows a refused download: what a local mesh places instead.
const offlineWhy = "this local mesh is offline: place a GGUF file on its llama-server host (file://…), or an ollama:// or hailo:// model its simulators serve"

// FileSource is a file:// source for a path.
func FileSource(path string) string {
	return "file://" + filepath.ToSlash(strings.TrimPrefix(path, "file://"))
}

// nonEmpty is []string{s}, or nil for "".
func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
