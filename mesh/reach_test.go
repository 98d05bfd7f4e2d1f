package mesh

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// freeAddr returns a loopback address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUnreachableAPIAddressIsShownNotHealthy(t *testing.T) {
	api1 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // answers, even if unhealthy
	}))
	t.Cleanup(api1.Close)
	deadAddr := freeAddr(t)

	c := newCluster(t)
	member := func(name, apiAddr string, role api.Role) *Mesh {
		cfg, _ := c.config(name, role)
		cfg.DialBack = nil // the real check, by every observer: GET /healthz
		if role == api.RoleAgent {
			cfg.APIAddr = apiAddr
		}
		return c.start(cfg)
	}
	good := member("good", strings.TrimPrefix(api1.URL, "http://"), api.RoleAgent)
	bad := member("bad", deadAddr, api.RoleAgent)
	console := member("console", "", api.RoleConsole)
	events := eventsOf(t, console)
	for _, a := range []*Mesh{good, bad} {
		require.NoError(t, a.SetLocal(hostOf(0), []api.Placement{placement("p-"+a.LocalNode(), "m", api.StateReady)}))
	}

	waitFor(t, 10*time.Second, []*Mesh{console, good}, "the bad agent is unreachable, the good one verified", func(v View) bool {
		mb, _ := v.Member("bad")
		return mb.Liveness == api.Unreachable && len(mb.Placements) == 1 && len(v.Ready("", "m")) == 1
	})
	v := console.View()
	mb, _ := v.Member("bad")
	require.True(t, strings.HasPrefix(mb.Reason, fmt.Sprintf("API address %s does not answer: ", deadAddr)), mb.Reason)
	require.Equal(t, api.StateUnavailable, mb.Placements[0].State)
	require.Equal(t, "good", v.Ready("", "m")[0].Host)
	require.Eventually(t, func() bool { return hasEvent(events(), "bad", "unreachable") }, time.Second, 10*time.Millisecond)
	f, ok := findingWith(console.Doctor(context.Background()), "agent bad is unreachable")
	require.True(t, ok)
	require.Contains(t, f.Problem, deadAddr)

	// The agent's API comes up: members retry and see it recover.
	l, err := net.Listen("tcp", deadAddr)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	waitFor(t, 10*time.Second, []*Mesh{console, good}, "recovered", func(v View) bool {
		return liveness(v, "bad") == api.Alive && len(v.Ready("", "m")) == 2
	})
	require.Eventually(t, func() bool { return hasEvent(events(), "bad", "recovered") }, time.Second, 10*time.Millisecond)
}

func TestAgentWithoutAPIAddressIsUnreachable(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	cfg, _ := c.config("noapi", api.RoleAgent)
	cfg.APIAddr = ""
	c.start(cfg)
	waitFor(t, 10*time.Second, []*Mesh{a}, "unreachable", func(v View) bool {
		mb, ok := v.Member("noapi")
		return ok && mb.Liveness == api.Unreachable && mb.Reason == "advertises no API address"
	})
}

func TestSeedsAreRetriedWithBackoff(t *testing.T) {
	c := newCluster(t)
	firstCfg, firstTr := c.config("first", api.RoleAgent) // not started yet: its port does not answer
	laterCfg, _ := c.config("later", api.RoleAgent)
	laterCfg.Seeds = []string{firstTr.Addr(), "127.0.0.1:9"} // the second never exists
	later := c.start(laterCfg)

	require.Eventually(t, func() bool {
		r := later.Doctor(context.Background())
		_, silent := findingWith(r, "does not answer on the gossip port")
		_, refused := findingWith(r, "seed 127.0.0.1:9 refused the gossip port")
		return silent && refused
	}, 10*time.Second, 20*time.Millisecond)
	later.mu.Lock()
	tries := later.candidates["127.0.0.1:9"].tries
	later.mu.Unlock()
	require.Greater(t, tries, 1, "retried")

	first := c.start(firstCfg)
	waitFor(t, 10*time.Second, []*Mesh{first, later}, "joined once the seed came up", allAlive("first", "later"))
	require.Eventually(t, func() bool {
		_, silent := findingWith(later.Doctor(context.Background()), "does not answer on the gossip port")
		return !silent
	}, 5*time.Second, 20*time.Millisecond, "a joined seed is no longer a finding")
}

func TestLastKnownPeersRejoinAfterRestart(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	b := c.add("b", api.RoleAgent)
	dir := t.TempDir()
	cfg, _ := c.config("", api.RoleAgent) // name from the hostname, kept in dir
	cfg.StateDir = dir
	first := c.start(cfg)
	name := first.LocalNode()
	host, _ := os.Hostname()
	require.True(t, strings.HasPrefix(name, sanitizeHostname(host)+"-"), name)
	waitFor(t, 10*time.Second, []*Mesh{a, b, first}, "formed", allAlive("a", "b", name))

	path := filepath.Join(dir, lastKnownFile)
	require.Eventually(t, func() bool {
		peers, err := discovery.LoadLastKnown(path)
		return err == nil && len(peers) == 2
	}, 5*time.Second, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, first.Close(ctx))

	// Restarted without any seed: the same name, and the last-known peers to join.
	cfg2, _ := c.config("", api.RoleAgent)
	cfg2.StateDir, cfg2.Seeds = dir, nil
	again := c.start(cfg2)
	require.Equal(t, name, again.LocalNode(), "the name is stable across restarts")
	waitFor(t, 10*time.Second, []*Mesh{a, b, again}, "rejoined through last-known peers", allAlive("a", "b", name))
}

func TestDiscoveredPeersAreJoinedAndForeignMeshesReported(t *testing.T) {
	c := newCluster(t)
	a := c.add("a", api.RoleAgent)
	cfg, tr := c.config("b", api.RoleAgent)
	cfg.Seeds = nil
	var gotNode string
	var gotPort int
	cfg.NewDiscovery = func(node string, gossipPort int) (discovery.Source, error) {
		gotNode, gotPort = node, gossipPort
		return &fakeMDNS{peers: []discovery.Peer{
			{Node: "x", MeshHash: api.MeshIDHash("elsewhere"), GossipAddr: "10.9.9.9:7946", Via: discovery.ViaMDNS},
			{Node: "a", MeshHash: api.MeshIDHash("test"), GossipAddr: a.GossipAddr(), Via: discovery.ViaMDNS},
		}, finding: discovery.Finding{Severity: api.SeverityWarning, Problem: "no multicast-capable interface", Fix: "use --join"}}, nil
	}
	b := c.start(cfg)
	require.Equal(t, "b", gotNode, "discovery announces the member's name")
	require.Equal(t, tr.Addr(), fmt.Sprintf("127.0.0.1:%d", gotPort), "and its gossip port")
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "joined through discovery", allAlive("a", "b"))
	r := b.Doctor(context.Background())
	f, ok := findingWith(r, "announces another mesh")
	require.True(t, ok)
	require.Contains(t, f.Problem, "10.9.9.9:7946")
	_, ok = findingWith(r, "no multicast-capable interface")
	require.True(t, ok, "discovery's findings are in the report")
}

// fakeMDNS is a discovery.Source that reports a fixed set of peers, as mDNS would.
type fakeMDNS struct {
	peers   []discovery.Peer
	finding discovery.Finding
}

func (f *fakeMDNS) Run(ctx context.Context, found func(discovery.Peer)) error {
	for _, p := range f.peers {
		found(p)
	}
	<-ctx.Done()
	return nil
}

func (f *fakeMDNS) Findings() []discovery.Finding { return []discovery.Finding{f.finding} }

func TestJoinErrorKeepsTheCause(t *testing.T) {
	err := fmt.Errorf("1 error occurred:\n\t* Failed to join 10.0.0.5:7946: dial tcp 10.0.0.5:7946: connect: connection refused\n\n")
	require.Equal(t, "dial tcp 10.0.0.5:7946: connect: connection refused", joinError(err).Error())
	err = fmt.Errorf("1 error occurred:\n\t* failed to join 10.0.0.5:7946: EOF\n\n")
	require.Equal(t, "EOF", joinError(err).Error())
	require.Equal(t, "odd", joinError(fmt.Errorf("odd")).Error())
}

// An agent that advertises an address where another agent answers (a loopback advertisement
// sends every checker to its own agent) is unreachable, and the doctor says who answered.
func TestAdvertisedAddressOfAnotherAgentIsUnreachable(t *testing.T) {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.NodeHeader, "good")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(good.Close)
	addr := strings.TrimPrefix(good.URL, "http://")

	c := newCluster(t)
	member := func(name, apiAddr string, role api.Role) *Mesh {
		cfg, _ := c.config(name, role)
		cfg.DialBack = nil // the real check: GET /healthz, and who answered
		if role == api.RoleAgent {
			cfg.APIAddr = apiAddr
		}
		return c.start(cfg)
	}
	member("good", addr, api.RoleAgent)
	member("liar", addr, api.RoleAgent)
	console := member("console", "", api.RoleConsole)
	waitFor(t, 10*time.Second, []*Mesh{console}, "the liar is unreachable, the good one verified", func(v View) bool {
		return liveness(v, "liar") == api.Unreachable && liveness(v, "good") == api.Alive
	})
	f, ok := findingWith(console.Doctor(context.Background()), "agent liar is unreachable")
	require.True(t, ok)
	require.Contains(t, f.Problem, `it is agent "good" that answers there, not liar`)
	require.Contains(t, f.Fix, "--advertise")
}

// A member alone stops its housekeeping rounds (nothing is due), and the first other member
// to join wakes them: its API address is dialed back within a round, not after the wait
// (saveEvery, 30 s on the LAN profile, where a lone member's rounds would otherwise stop).
func TestLoneMemberWakesForTheFirstPeer(t *testing.T) {
	c := newCluster(t)
	c.profile = ProfileLAN
	cfg, _ := c.config("a", api.RoleAgent)
	dialed := make(chan string, 16)
	cfg.DialBack = func(_ context.Context, addr string) error {
		select {
		case dialed <- addr:
		default:
		}
		return nil
	}
	a := c.start(cfg)
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return time.Since(a.lastKeep) > 10*a.t.tick
	}, 10*time.Second, 10*time.Millisecond, "a's rounds stop while it is alone")

	c.add("b", api.RoleAgent)
	select {
	case addr := <-dialed:
		require.Equal(t, "b.test:7777", addr)
	case <-time.After(a.t.saveEvery / 2):
		t.Fatal("a did not dial b back: its rounds did not wake")
	}
	waitFor(t, 10*time.Second, []*Mesh{a}, "b alive", allAlive("b"))
}
