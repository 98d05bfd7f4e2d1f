package discovery

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/netnslab"
)

// Real multicast runs only here, between network namespaces this test creates
// (internal/netnslab: a hub namespace holding a bridge, and one namespace per member wired to it
// by a veth pair). Nothing is added to, or sent on, the machine's own interfaces. Go code runs inside a namespace by re-executing
// this test binary through `ip netns exec` (setns on one thread would not cover the goroutines
// zeroconf starts on others).

const (
	roleEnv   = "LLMKUBE_NETNS_ROLE" // mdns | resolve
	meshEnv   = "LLMKUBE_NETNS_MESH"
	nodeEnv   = "LLMKUBE_NETNS_NODE"
	portsEnv  = "LLMKUBE_NETNS_PORTS" // gossip,api
	targetEnv = "LLMKUBE_NETNS_TARGET"
)

// lab is the namespaces of one test (internal/netnslab), and t, for starting children in them.
type lab struct {
	*netnslab.Lab
	t *testing.T
}

func newNetnsLab(t *testing.T, n int) lab { return lab{netnslab.New(t, n), t} }

// child is this test binary running one role inside a member namespace; its stdout lines are
// "PEER <json>", "FINDINGS <json>", "RESOLVED <json>" or "ERROR <text>".
type child struct {
	mu     sync.Mutex
	all    []string
	exited bool
	more   chan struct{} // signalled on every new line and at exit
}

func (l lab) start(i int, env ...string) *child {
	t := l.t
	t.Helper()
	cmd := l.Command(i, os.Args[0], "-test.run=^TestNetnsHelper$", "-test.count=1", "-test.timeout=2m")
	// The race detector sleeps a second at exit unless told not to.
	cmd.Env = append(os.Environ(), append(env, strings.TrimSpace("GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0"))...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // the child stops when this closes, even if we crash
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{more: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.mu.Lock()
			c.all = append(c.all, sc.Text())
			c.mu.Unlock()
			c.signal()
		}
		c.mu.Lock()
		c.exited = true
		c.mu.Unlock()
		c.signal()
	}()
	t.Cleanup(func() {
		stdin.Close()
		exited := make(chan error, 1)
		go func() { <-done; exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			// A data race or a panic in the child fails the test here.
			assert.NoError(t, err, "child %d in %s: see its stderr above", i, l.NS(i))
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("child %d did not stop within 10s of its stdin closing", i)
		}
	})
	return c
}

func (c *child) signal() {
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// wait returns the payload of the first line, printed so far or later, with prefix for which ok
// holds.
func (c *child) wait(t *testing.T, prefix string, ok func(payload string) bool) string {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		lines, exited := c.all, c.exited
		c.mu.Unlock()
		for _, line := range lines {
			if p, found := strings.CutPrefix(line, prefix+" "); found && ok(p) {
				return p
			}
		}
		if exited {
			t.Fatalf("child exited before printing the expected %s line; it printed:\n%s", prefix, c.output())
		}
		select {
		case <-c.more:
		case <-deadline:
			t.Fatalf("no matching %s line within 20s; the child printed:\n%s", prefix, c.output())
		}
	}
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.all, "\n")
}

func mdnsEnv(mesh, node string, gossip, apiPort int) []string {
	return []string{roleEnv + "=mdns", meshEnv + "=" + mesh, nodeEnv + "=" + node,
		fmt.Sprintf("%s=%d,%d", portsEnv, gossip, apiPort)}
}

func TestMDNSBetweenNamespaces(t *testing.T) {
	lab := newNetnsLab(t, 4)

	alpha := lab.start(1, mdnsEnv("home", "alpha", 7946, 7947)...)
	beta := lab.start(2, mdnsEnv("home", "beta", 8946, 8947)...)
	lab.start(3, mdnsEnv("work", "gamma", 9946, 9947)...)

	// beta finds alpha with everything alpha announced, and alpha finds beta.
	var p Peer
	require.NoError(t, json.Unmarshal([]byte(beta.wait(t, "PEER", func(s string) bool { return strings.Contains(s, `"alpha"`) })), &p))
	assert.Equal(t, Peer{
		Node: "alpha", MeshHash: api.MeshIDHash("home"), Via: ViaMDNS,
		GossipAddr: lab.Addr(1) + ":7946", APIAddr: lab.Addr(1) + ":7947", OnLink: true,
	}, p)
	alpha.wait(t, "PEER", func(s string) bool { return strings.Contains(s, `"gossip_addr":"`+lab.Addr(2)+`:8946"`) })

	// gamma, of another mesh, is never reported, but beta's doctor counts it.
	beta.wait(t, "FINDINGS", func(s string) bool {
		return strings.Contains(s, "mDNS answers from 1 host(s) of another mesh: gamma") && strings.Contains(s, "check the join string")
	})
	for _, c := range []*child{alpha, beta} {
		assert.NotContains(t, c.output(), `"node":"gamma"`)
	}

	// Several rounds later, each with a fresh resolver that hears alpha again, alpha has still
	// been reported once: the seen-set holds across rounds.
	beta.wait(t, "LOG", func(s string) bool {
		return strings.Contains(s, "mdns: browse round") && strings.Contains(s, "known=1")
	})
	beta.wait(t, "LOG", func(s string) bool { return strings.Count(beta.output(), "mdns: browse round") >= 4 })
	assert.Equal(t, 1, strings.Count(beta.output(), `PEER {"node":"alpha"`), beta.output())
	assert.Equal(t, 1, strings.Count(beta.output(), "PEER "), "beta reports only alpha")

	// A .local seed resolves across namespaces through our own mDNS query, answered by alpha's
	// host-name responder; no Avahi anywhere.
	got := lab.start(4, roleEnv+"=resolve", targetEnv+"="+MDNSHostName("alpha")).wait(t, "RESOLVED", func(string) bool { return true })
	assert.JSONEq(t, `{"addrs":["`+lab.Addr(1)+`"],"peer":{"gossip_addr":"`+lab.Addr(1)+`:7946","via":"seed"}}`, got)

	// A name nobody answers fails with a reason, within the lookup timeout.
	got = lab.start(4, roleEnv+"=resolve", targetEnv+"=nobody.llmkube.local").wait(t, "ERROR", func(string) bool { return true })
	assert.Contains(t, got, "no answer")
}

func TestMDNSWithoutMulticastInterface(t *testing.T) {
	lab := newNetnsLab(t, 0)
	lab.Bare(1)
	lonely := lab.start(1, mdnsEnv("home", "lonely", 7946, 7947)...)
	got := lonely.wait(t, "FINDINGS", func(s string) bool { return s != "[]" })
	var fs []Finding
	require.NoError(t, json.Unmarshal([]byte(got), &fs))
	require.Len(t, fs, 1)
	assert.Equal(t, Finding{
		Severity: SeverityError,
		Problem:  "mDNS: no multicast-capable interface: lo is loopback, which never carries mDNS",
		Fix:      "connect this host to the LAN, name the LAN interface with --mdns-interface, or join by --join host:port seeds (mDNS resumes by itself when an interface comes up)",
	}, fs[0])

	got = lab.start(1, roleEnv+"=resolve", targetEnv+"=alpha.local").wait(t, "ERROR", func(string) bool { return true })
	assert.Equal(t, "resolving alpha.local over mDNS: no multicast-capable interface: lo is loopback, which never carries mDNS", got)
}

// prefixWriter marks each log line (slog writes one line per Write) for the parent.
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// TestNetnsHelper is the child side of TestMDNSBetweenNamespaces; run directly it skips.
func TestNetnsHelper(t *testing.T) {
	role := os.Getenv(roleEnv)
	if role == "" {
		t.Skip("child process of TestMDNSBetweenNamespaces only")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the parent closes stdin to stop us
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	emit := func(kind string, v any) {
		b, _ := json.Marshal(v)
		fmt.Printf("%s %s\n", kind, b)
	}
	switch role {
	case "mdns":
		gossip, apiPort, _ := strings.Cut(os.Getenv(portsEnv), ",")
		g, _ := strconv.Atoi(gossip)
		a, _ := strconv.Atoi(apiPort)
		// Short rounds, so a test sees several fresh resolvers; the log goes to the parent.
		log := slog.New(slog.NewTextHandler(prefixWriter{"LOG ", os.Stdout}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		src, err := NewMDNS(MDNSConfig{
			MeshID: os.Getenv(meshEnv), Node: os.Getenv(nodeEnv), GossipPort: g, APIPort: a,
			BrowseEvery: 400 * time.Millisecond, Log: log,
		})
		if err != nil {
			fmt.Println("ERROR", err)
			return
		}
		var mu sync.Mutex
		go func() {
			last := ""
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				b, _ := json.Marshal(src.Findings())
				if string(b) != last {
					last = string(b)
					mu.Lock()
					fmt.Printf("FINDINGS %s\n", b)
					mu.Unlock()
				}
			}
		}()
		_ = src.Run(ctx, func(p Peer) {
			mu.Lock()
			defer mu.Unlock()
			emit("PEER", p)
		})
	case "resolve":
		target := os.Getenv(targetEnv)
		lctx, lcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer lcancel()
		addrs, err := NewResolver("").LookupHost(lctx, target)
		if err != nil {
			fmt.Println("ERROR", err)
			return
		}
		// The same name as a --join seed reaches the mesh core as a dialable address.
		peers := make(chan Peer, 1)
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		go func() {
			_ = Seeds([]string{target + ":7946"}, NewResolver("")).Run(sctx, func(p Peer) {
				select {
				case peers <- p:
				default:
				}
			})
		}()
		select {
		case p := <-peers:
			emit("RESOLVED", map[string]any{"addrs": addrs, "peer": p})
		case <-time.After(10 * time.Second):
			fmt.Println("ERROR the seed source reported nothing")
		}
	default:
		t.Fatalf("unknown role %q", role)
	}
}
