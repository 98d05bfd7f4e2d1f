// Package node assembles a whole mesh host from its parts: the agent, its HTTP API, the
// gateway, and its membership in the gossip mesh (with mDNS discovery when asked), all run
// under one errgroup and stopped together. `llmkube-agent run` and the in-process local mesh
// (tests, the demo) build hosts the same way through it, so what the tests run is what ships.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/gateway"
	"github.com/llmkube/mesh/agent/keeper"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh"
	"github.com/llmkube/mesh/mesh/discovery"
	"github.com/llmkube/mesh/mesh/intent"
)

// MeshConfig is how the host joins the gossip mesh.
type MeshConfig struct {
	Bind          string   // gossip bind address; "" = every interface
	Advertise     string   // gossip address peers reach us at; "" = the one memberlist picks
	Port          int      // gossip port, UDP and TCP; 0 = any free port (not with MDNS)
	Seeds         []string // added to the join string's seeds
	MDNS          bool
	MDNSInterface string
	Profile       string // mesh.ProfileLAN (default), ProfileWAN, ProfileLocal
}

// Config is a host, its parts already chosen (the caller parsed flags, probed the host, opened
// the state folder and built the drivers).
type Config struct {
	Join  api.Join
	Agent agent.Config
	// Listener serves the API; APIAddr is how peers reach it (Agent.APIAddr is set from it).
	Listener net.Listener
	APIAddr  string
	// Mesh joins the gossip mesh; nil runs a single host without gossip.
	Mesh        *MeshConfig
	OpenMetrics bool
	// LANHTTP serves plain HTTP to other hosts as well (--lan-http), limited to the gateway's
	// routes; without it the LAN is served over the sealed channel only (internal/seal), and
	// loopback in plain always.
	LANHTTP bool
	// FetchImages lets the gateway fetch images chats name by URL (gateway.Config.FetchImages).
	FetchImages *download.Options
	// Peers, when set, is told how to find the mesh's agents that hold a file (the drivers'
	// downloads ask them first); nil without a mesh.
	Peers *download.Peers
	// OnDemand are the namespaces whose requests for a model no host runs place it ("*": all;
	// empty: off), see agent/keeper.
	OnDemand []string
	// ScaleAfter and ScaleIdle time an intent's scaling (keeper.Config); zero: its defaults.
	ScaleAfter, ScaleIdle time.Duration
	Log                   *slog.Logger
}

// Node is a running host.
type Node struct {
	Agent *agent.Agent
	// Mesh is the host's membership; nil without a mesh.
	Mesh    *mesh.Mesh
	apiAddr string
	g       *errgroup.Group
	stop    context.CancelFunc
}

// publishRefresh republishes now and then even without a change: available memory moves, and
// a placement whose health checks stalled must stop being shown ready.
const publishRefresh = 10 * time.Second

// leaveTimeout bounds the graceful leave at shutdown.
const leaveTimeout = 5 * time.Second

// Start builds the host and starts every part; it returns once the API listens and the member
// joined memberlist (peers may still be arriving). The host runs until ctx ends or Close.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Listener == nil {
		return nil, errors.New("node: no API listener")
	}
	cfg.Agent.APIAddr = cfg.APIAddr
	cfg.Agent.LANHTTP = cfg.LANHTTP
	a, err := agent.New(cfg.Agent)
	if err != nil {
		return nil, err
	}
	id, err := Identity(cfg.Join, a.Name(), seal.RoleAgent, cfg.Agent.State.Path(), cfg.APIAddr)
	if err != nil {
		return nil, err
	}
	sealed := seal.Listen(cfg.Listener, seal.ListenConfig{TLS: id.ServerConfig(), LANPlain: cfg.LANHTTP, Log: cfg.Log.With("part", "seal")})
	ctx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	n := &Node{Agent: a, apiAddr: cfg.APIAddr, g: g, stop: stop}
	// The API and the engines run until the member has left (runCtx), not merely until the
	// host is told to stop (gctx): stopped together, a peer could find the API closed before the
	// leave reached it — and show a graceful leave as an unreachable host, or send it a chat.
	runCtx, stopRun := gctx, context.CancelFunc(func() {})

	sc := agent.ServerConfig{Agent: a, Secret: cfg.Join.Secret, MeshID: cfg.Join.MeshID, OpenMetrics: cfg.OpenMetrics, Log: cfg.Log.With("part", "api"),
		Seal: id, Findings: func() []api.Finding { return refusals(sealed, a.Name(), time.Now()) }}
	gc := gateway.Config{Agent: a, Version: cfg.Agent.Version, Seal: id, FetchImages: cfg.FetchImages, Log: cfg.Log.With("part", "gateway")}
	var keep *keeper.Keeper
	if cfg.Mesh != nil {
		intents, err := intent.Open(cfg.Agent.State.Path(), a.Name())
		if err != nil {
			stop()
			sealed.Close()
			return nil, err
		}
		m, err := startMesh(ctx, cfg, a, id, intents)
		if err != nil {
			stop()
			sealed.Close()
			return nil, err
		}
		n.Mesh = m
		keep = keeper.New(keeper.Config{Agent: a, Store: intents, Mesh: m, OnDemand: cfg.OnDemand,
			ScaleAfter: cfg.ScaleAfter, ScaleIdle: cfg.ScaleIdle, Log: cfg.Log.With("part", "keeper")})
		gc.OnDemand = keep.Demand
		sc.Intents = keep
		sc.Findings = func() []api.Finding { return append(refusals(sealed, a.Name(), time.Now()), keep.Findings()...) }
		g.Go(func() error { return keep.Run(gctx) })
		a.Metrics().CountGossip(m.GossipStats)
		sc.Mesh = func() api.MeshView { return m.View().MeshView }
		a.JoinMesh(sc.Mesh, id)
		sc.Doctor = m.Doctor
		gc.View = func() gateway.View { return m }
		gc.Liveness = m.Liveness
		g.Go(func() error { return publish(gctx, a, m, cfg.Log) })
		if cfg.Peers != nil {
			cfg.Peers.Use(holders(m, a.Name(), id))
			cfg.Peers.UseManifests(manifestHolders(m, a.Name(), id))
			cfg.Peers.UseAgents(everyAgent(m, a.Name(), id))
		}
		runCtx, stopRun = context.WithCancel(context.WithoutCancel(gctx))
		g.Go(func() error {
			// Leave first, so peers stop routing here before the API and the engines go.
			<-gctx.Done()
			defer stopRun()
			lctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
			defer cancel()
			if err := m.Close(lctx); err != nil {
				cfg.Log.Warn("leaving the mesh", "err", err)
			}
			return nil
		})
	}
	srv := agent.NewServer(sc)
	gw, err := gateway.New(gc)
	if err != nil {
		stop()
		stopRun()
		sealed.Close()
		return nil, err
	}
	gw.Register(srv.Mount)
	if keep != nil {
		keep.Register(srv.Handle)
	}
	g.Go(func() error { return a.Run(runCtx) })
	g.Go(func() error { return srv.Serve(runCtx, sealed) })
	cfg.Log.Info("API listening", "addr", cfg.Listener.Addr().String(), "advertise", cfg.APIAddr, "mesh", cfg.Join.MeshID, "node", a.Name(), "metrics_open", cfg.OpenMetrics, "lan_http", cfg.LANHTTP)
	return n, nil
}

// APIAddr is the host:port peers reach the API at.
func (n *Node) APIAddr() string { return n.apiAddr }

// GossipAddr is the gossip address ("" without a mesh).
func (n *Node) GossipAddr() string {
	if n.Mesh == nil {
		return ""
	}
	return n.Mesh.GossipAddr()
}

// Wait blocks until the host has stopped and returns the first failure of any part.
func (n *Node) Wait() error { return n.g.Wait() }

// Close stops the host (leaving the mesh first) and waits for it.
func (n *Node) Close() error {
	n.stop()
	return n.Wait()
}

func startMesh(ctx context.Context, cfg Config, a *agent.Agent, id *seal.Identity, intents *intent.Store) (*mesh.Mesh, error) {
	mc := cfg.Mesh
	log := cfg.Log
	var disc discovery.Source
	if mc.MDNS {
		_, p, _ := net.SplitHostPort(cfg.APIAddr)
		apiPort, _ := strconv.Atoi(p)
		d, err := discovery.NewMDNS(discovery.MDNSConfig{
			MeshID: cfg.Join.MeshID, Node: a.Name(), GossipPort: mc.Port, APIPort: apiPort,
			Interface: mc.MDNSInterface, Log: log.With("part", "mdns"),
		})
		if err != nil {
			return nil, err
		}
		disc = d
	}
	m, err := mesh.Start(context.WithoutCancel(ctx), mesh.Config{
		MeshID:        cfg.Join.MeshID,
		Secret:        cfg.Join.Secret,
		NodeName:      a.Name(),
		Role:          api.RoleAgent,
		BindAddr:      mc.Bind,
		AdvertiseAddr: mc.Advertise,
		BindPort:      mc.Port,
		APIAddr:       cfg.APIAddr,
		Seeds:         append(slices.Clone(cfg.Join.Seeds), mc.Seeds...),
		StateDir:      cfg.Agent.State.Path(),
		Discovery:     disc,
		Profile:       mc.Profile,
		Seal:          id,
		Shared:        intents,
		Log:           log.With("part", "mesh"),
	})
	if err != nil {
		return nil, fmt.Errorf("joining mesh %s: %w", cfg.Join.MeshID, err)
	}
	log.Info("mesh member started", "mesh", cfg.Join.MeshID, "gossip", m.GossipAddr(), "mdns", mc.MDNS, "seeds", len(cfg.Join.Seeds)+len(mc.Seeds))
	return m, nil
}

// publish sends this host's state to the mesh on every change, and forwards mesh events to the
// agent's event stream (so consoles following an agent see members come and go).
func publish(ctx context.Context, a *agent.Agent, m *mesh.Mesh, log *slog.Logger) error {
	changes, stopWatch := a.Watch()
	defer stopWatch()
	evs, stopEvents := m.SubscribeEvents()
	defer stopEvents()
	send := func() {
		if err := m.SetLocal(a.Host(), a.Placements()); err != nil {
			log.Warn("publishing host state to the mesh", "err", err)
		}
	}
	send()
	tick := time.NewTicker(publishRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
			send()
		case <-tick.C:
			send()
		case ev, ok := <-evs:
			if !ok {
				evs = nil // the member shut down
				continue
			}
			a.Events().Publish(ev)
		}
	}
}
