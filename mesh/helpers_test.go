package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/internal/memnet"
)

var testSecret = func() []byte {
	s := make([]byte, api.SecretSize)
	for i := range s {
		s[i] = byte(i)
	}
	return s
}()

// testLog logs to stderr when MESH_TEST_LOG is set (debugging), else nowhere.
func testLog() *slog.Logger {
	if os.Getenv("MESH_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// answers is a DialBack for in-process members, whose API addresses are names, not sockets:
// every address answers except those listed.
type answers struct {
	mu   sync.Mutex
	dead map[string]bool
}

func (a *answers) dial(_ context.Context, addr string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dead[addr] {
		return fmt.Errorf("dial tcp %s: connect: connection refused", addr)
	}
	return nil
}

// cluster is a mesh of in-process members on one memnet.
type cluster struct {
	t       testing.TB
	net     memnet.Network
	seed    string
	answers answers
	profile string
}

func newCluster(t testing.TB) *cluster {
	return &cluster{t: t, profile: ProfileLocal}
}

// config is a member's config; the first member started becomes everyone's seed.
func (c *cluster) config(name string, role api.Role) (Config, *memnet.Transport) {
	tr := c.net.NewTransport()
	cfg := Config{
		MeshID: "test", Secret: testSecret, NodeName: name, Role: role, Profile: c.profile,
		Transport: tr, DialBack: c.answers.dial, Log: testLog().With("test_node", name),
	}
	if role == api.RoleAgent {
		cfg.APIAddr = name + ".test:7777"
	}
	if c.seed != "" {
		cfg.Seeds = []string{c.seed}
	}
	return cfg, tr
}

func (c *cluster) start(cfg Config) *Mesh {
	c.t.Helper()
	m, err := Start(context.Background(), cfg)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { m.Shutdown() })
	if c.seed == "" {
		c.seed = m.GossipAddr()
	}
	return m
}

func (c *cluster) add(name string, role api.Role) *Mesh {
	cfg, _ := c.config(name, role)
	return c.start(cfg)
}

// waitFor polls every member's view until cond holds for all of them.
func waitFor(t testing.TB, within time.Duration, ms []*Mesh, what string, cond func(View) bool) {
	t.Helper()
	ok := assert.Eventually(t, func() bool {
		for _, m := range ms {
			liveAgrees(t, m)
			if !cond(m.View()) {
				return false
			}
		}
		return true
	}, within, 10*time.Millisecond, what)
	if !ok {
		for _, m := range ms {
			v := m.View()
			var b strings.Builder
			for _, mb := range v.Members {
				fmt.Fprintf(&b, " %s=%s(%s)", mb.Name, mb.Liveness, mb.Reason)
			}
			t.Logf("view of %s:%s", v.Self, b.String())
		}
		t.FailNow()
	}
}

// liveAgrees checks that the mesh's own Ready, Member and Placements (which answer without
// building a view) say what a view built at the same moment says: every test that waits on a
// view checks it, in whatever state the test has brought the mesh to.
func liveAgrees(t testing.TB, m *Mesh) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	alone := m.aloneLocked(now)
	v := m.viewAsLocked(now, alone)
	assert.Equal(t, v.Placements(), m.placementsLocked(alone), "%s: Placements", m.name)
	models := map[string]bool{"not-served": true}
	namespaces := map[string]bool{"": true, "default": true}
	for _, p := range v.Placements() {
		models[p.Model], namespaces[p.Namespace] = true, true
	}
	for model := range models {
		for ns := range namespaces {
			assert.Equal(t, v.Ready(ns, model), m.readyLocked(ns, model, alone), "%s: Ready(%q, %q)", m.name, ns, model)
		}
	}
	for name := range m.members {
		want, wok := v.Member(name)
		got, gok := m.memberNamedLocked(name, alone)
		assert.Equal(t, wok, gok, "%s: Member(%q) found", m.name, name)
		assert.Equal(t, want, got, "%s: Member(%q)", m.name, name)
	}
	_, found := m.memberNamedLocked("not-a-member", alone)
	assert.False(t, found, "%s: Member of a name never seen", m.name)
}

func liveness(v View, name string) api.Liveness {
	mb, ok := v.Member(name)
	if !ok {
		return ""
	}
	return mb.Liveness
}

func allAlive(names ...string) func(View) bool {
	return func(v View) bool {
		for _, n := range names {
			if liveness(v, n) != api.Alive {
				return false
			}
		}
		return true
	}
}

// hostOf builds an agent's host with the given committed memory.
func hostOf(committed int64) api.Host {
	return api.Host{
		OS: "linux", Arch: "arm64", Chip: "BCM2712", CPUs: 4, Version: api.Version,
		Memory:       api.Memory{Total: 8 << 30, Budget: 5 << 30, Committed: committed, Available: 6 << 30},
		Accelerators: []api.Accelerator{{Kind: "hailo", Name: "Hailo-10H", Memory: 8 << 30}},
		Engines:      []api.Engine{{Runtime: api.RuntimeHailoOllama, Present: true, Healthy: true}},
	}
}

func placement(id, model string, state api.PlacementState) api.Placement {
	return api.Placement{
		ID: id, Model: model, Source: "ollama://" + model, Runtime: api.RuntimeOllama, Namespace: "default",
		Context: 2048, Priority: api.PriorityNormal, State: state, Memory: api.SizeEstimate{Bytes: 1 << 30, Method: api.SizeRegistry},
	}
}

// history records every liveness of one member seen in m's views (each change once).
func history(t testing.TB, m *Mesh, name string) func() []api.Liveness {
	ch, cancel := m.Subscribe()
	t.Cleanup(cancel)
	return collect(ch, func(seen []api.Liveness, v View) []api.Liveness {
		if l := liveness(v, name); len(seen) == 0 || seen[len(seen)-1] != l {
			seen = append(seen, l)
		}
		return seen
	})
}

// eventsOf collects m's mesh events.
func eventsOf(t testing.TB, m *Mesh) func() []api.Event {
	ch, cancel := m.SubscribeEvents()
	t.Cleanup(cancel)
	return collect(ch, func(got []api.Event, e api.Event) []api.Event { return append(got, e) })
}

// collect folds what ch delivers into a list with add, until ch closes; the function it
// returns is a copy of the list so far.
func collect[T, L any](ch <-chan T, add func([]L, T) []L) func() []L {
	var mu sync.Mutex
	var list []L
	go func() {
		for v := range ch {
			mu.Lock()
			list = add(list, v)
			mu.Unlock()
		}
	}()
	return func() []L {
		mu.Lock()
		defer mu.Unlock()
		return append([]L(nil), list...)
	}
}

func hasEvent(events []api.Event, member, kind string) bool {
	for _, e := range events {
		if e.Member == member && string(e.Kind) == kind {
			return true
		}
	}
	return false
}
