package discovery

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tableResolver answers from a table; a name listed in failFirst fails that many times first,
// the way a .local name fails until its host's Wi-Fi is up.
type tableResolver struct {
	mu        sync.Mutex
	table     map[string][]string
	failFirst map[string]int
	calls     map[string]int
}

func (r *tableResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[host]++
	if r.calls[host] <= r.failFirst[host] {
		return nil, errors.New("no answer")
	}
	if a, ok := r.table[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

// collector gathers peers reported by a Source.
type collector struct {
	mu    sync.Mutex
	peers []Peer
}

func (c *collector) found(p Peer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peers = append(c.peers, p)
}

func (c *collector) addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.peers {
		out = append(out, p.Via+" "+p.GossipAddr)
	}
	slices.Sort(out)
	return out
}

func run(t *testing.T, s Source, found func(Peer)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, found) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err, "Run returns nil when its context ends")
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
}

func fast(s Source) Source {
	st := s.(*static)
	st.retryFirst, st.retryMax, st.refresh = time.Millisecond, 5*time.Millisecond, 10*time.Millisecond
	return st
}

func TestSeedsResolveRetryAndReport(t *testing.T) {
	r := &tableResolver{
		table: map[string][]string{
			"flaky.lan": {"10.0.0.9"},
			"two.lan":   {"10.0.0.1", "fd00::1"},
		},
		failFirst: map[string]int{"flaky.lan": 3},
	}
	s := fast(Seeds([]string{"10.0.0.7:7946", "nope", "flaky.lan:7946", "two.lan:1", "[fe80::1%eth0]:7946"}, r))
	var c collector
	run(t, s, c.found)

	want := []string{"seed 10.0.0.1:1", "seed 10.0.0.7:7946", "seed 10.0.0.9:7946", "seed [fd00::1]:1", "seed [fe80::1%eth0]:7946"}
	require.Eventually(t, func() bool { return slices.Equal(c.addrs(), want) }, 5*time.Second, time.Millisecond)

	// The malformed seed stays an error finding; the flaky one's warning cleared once it resolved.
	require.Eventually(t, func() bool { return len(s.Findings()) == 1 }, 5*time.Second, time.Millisecond)
	f := s.Findings()[0]
	assert.Equal(t, SeverityError, f.Severity)
	assert.Contains(t, f.Problem, `seed "nope"`)
	assert.Contains(t, f.Fix, "host:port")

	// Refreshes keep resolving but report nothing already reported.
	r.mu.Lock()
	before := r.calls["two.lan"]
	r.mu.Unlock()
	require.Eventually(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.calls["two.lan"] > before+2 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, want, c.addrs())
}

func TestSeedsUnresolvableIsAFindingWithFix(t *testing.T) {
	s := fast(Seeds([]string{"ghost.local:7946", "ghost.example:7946"}, &tableResolver{}))
	run(t, s, func(p Peer) { t.Errorf("nothing resolves, yet found %+v", p) })
	require.Eventually(t, func() bool { return len(s.Findings()) == 2 }, 5*time.Second, time.Millisecond)
	fs := s.Findings()
	assert.Contains(t, fs[0].Problem, "ghost.example:7946 does not resolve")
	assert.Contains(t, fs[1].Problem, "ghost.local:7946 does not resolve")
	assert.Contains(t, fs[1].Fix, "answers mDNS")
	for _, f := range fs {
		assert.Equal(t, SeverityWarning, f.Severity)
	}
}

func TestLastKnownSource(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "peers.json")
	require.NoError(t, SaveLastKnown(path, []string{"10.0.0.3:7946", "10.0.0.4:7946"}))
	s := LastKnown(path, &tableResolver{})
	assert.Empty(t, s.Findings())
	var c collector
	run(t, s, c.found)
	require.Eventually(t, func() bool {
		return slices.Equal(c.addrs(), []string{"last-known 10.0.0.3:7946", "last-known 10.0.0.4:7946"})
	}, 5*time.Second, time.Millisecond)

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, SaveLastKnown(bad, nil))
	require.NoError(t, os.WriteFile(bad, []byte("{garbage"), 0o600))
	s = LastKnown(bad, &tableResolver{})
	fs := s.Findings()
	require.Len(t, fs, 1)
	assert.Equal(t, SeverityWarning, fs[0].Severity)
	assert.Contains(t, fs[0].Problem, "not a last-known peers file")
}

func TestMultiSerialisesAndMergesFindings(t *testing.T) {
	r := &tableResolver{table: map[string][]string{}}
	var addrs []string
	for i := range 50 {
		addrs = append(addrs, net.JoinHostPort("10.1.0."+strconv.Itoa(i), "7946"))
	}
	m := Multi(fast(Seeds(addrs, r)), fast(Seeds([]string{"bad"}, r)))
	// count is written without a lock: if Multi let two sources call found at once, the race
	// detector would fail this test.
	var count int
	var published atomic.Int32
	run(t, m, func(Peer) {
		count++
		published.Store(int32(count))
	})
	require.Eventually(t, func() bool { return published.Load() == 50 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return len(m.Findings()) == 1 }, 5*time.Second, time.Millisecond)
}

func TestResolverPassesIPsAndUsesSystemForOtherNames(t *testing.T) {
	r := NewResolver("")
	ctx := context.Background()
	got, err := r.LookupHost(ctx, "10.0.0.7")
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.7"}, got)
	got, err = r.LookupHost(ctx, "localhost")
	require.NoError(t, err)
	assert.NotEmpty(t, got)
}

func TestIsLocalName(t *testing.T) {
	for name, want := range map[string]bool{
		"pi.local": true, "PI.LOCAL.": true, "alpha.llmkube.local": true,
		"local": false, "pi.localdomain": false, "pi.lan": false, "10.0.0.1": false,
	} {
		assert.Equal(t, want, isLocalName(name), name)
	}
}
