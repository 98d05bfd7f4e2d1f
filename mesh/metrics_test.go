package mesh

import (
	"context"
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// TestGossipCountersOnRealSockets: two members on loopback count what their memberlists do —
// probes, acks and their round trips, bytes both ways on UDP and TCP — each its own: a lone
// member in the same process, whose memberlist sends nothing, counts nothing, although every
// memberlist reports to go-metrics' one global sink.
func TestGossipCountersOnRealSockets(t *testing.T) {
	lone := startReal(t, "lone", api.RoleAgent)
	a := startReal(t, "a", api.RoleAgent)
	b := startReal(t, "b", api.RoleAgent, a.GossipAddr())
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "formed", allAlive("a", "b"))

	for _, m := range []*Mesh{a, b} {
		if !assert.Eventually(t, func() bool {
			s := m.GossipStats()
			return s.Probes > 0 && s.ProbesAcked > 0 && s.RTT.Count == s.ProbesAcked &&
				s.UDPSentBytes > 0 && s.UDPReceivedBytes > 0 && s.TCPSentBytes > 0 && s.TCPReceivedBytes > 0
		}, 10*time.Second, 20*time.Millisecond) {
			t.Fatalf("%s does not count its gossip: %+v", m.LocalNode(), m.GossipStats())
		}
	}
	// Each side receives at least what the other sent on streams, both those it opened and those
	// it accepted (the sender counts no label header), once no stream is in flight.
	require.Eventually(t, func() bool {
		sa, sb := a.GossipStats(), b.GossipStats()
		return sb.TCPReceivedBytes >= sa.TCPSentBytes && sa.TCPReceivedBytes >= sb.TCPSentBytes
	}, 10*time.Second, 5*time.Millisecond, "TCP bytes received fall short of those sent")
	s := a.GossipStats()
	require.LessOrEqual(t, s.ProbesAcked, s.Probes+1, "acks beyond the probes sent (one may be counted before its probe ends)")
	prev := uint64(0)
	for _, b := range rttBuckets {
		require.GreaterOrEqual(t, s.RTT.Buckets[b], prev, "the histogram is cumulative: %v", s.RTT.Buckets)
		prev = s.RTT.Buckets[b]
	}
	require.LessOrEqual(t, prev, s.RTT.Count)
	require.Positive(t, s.RTT.Sum)

	ls := lone.GossipStats()
	require.Zero(t, ls.Probes+ls.ProbesAcked+ls.UDPSentBytes+ls.UDPReceivedBytes+ls.TCPSentBytes+ls.TCPReceivedBytes,
		"another member's figures reached the lone member: %+v", ls)
	require.Equal(t, map[string]uint64{dropLabel: 0, dropDecrypt: 0, dropStream: 0, dropMalformed: 0}, ls.Dropped)
}

// TestKilledMemberCountsSuspicions: a member that stops answering is suspected by every
// watcher, and at least one watcher's own probe of it failed (memberlist's "no acks" line:
// the only place it names the member its probe failed).
func TestKilledMemberCountsSuspicions(t *testing.T) {
	c := newCluster(t)
	watchers := []*Mesh{c.add("n0", api.RoleAgent), c.add("n1", api.RoleAgent)}
	victim := c.add("n2", api.RoleAgent)
	waitFor(t, 10*time.Second, append([]*Mesh{victim}, watchers...), "formed", allAlive("n0", "n1", "n2"))
	before := map[*Mesh]api.GossipStats{}
	for _, w := range watchers {
		before[w] = w.GossipStats()
	}
	require.NoError(t, victim.Shutdown()) // a crash: no leave
	waitFor(t, 10*time.Second, watchers, "victim dead", func(v View) bool { return liveness(v, "n2") == api.Dead })

	failed := uint64(0)
	for _, w := range watchers {
		s := w.GossipStats()
		require.Greater(t, s.Suspicions, before[w].Suspicions, "%s counted no suspicion of the victim", w.LocalNode())
		failed += s.ProbesFailed - before[w].ProbesFailed
	}
	require.NotZero(t, failed, "no watcher counted its failed probe of the victim")
}

// TestRefutationIsCounted: a bare memberlist node holding the key advertises an address where
// nothing answers, so the member's acks never reach it, and it pings over UDP only: it
// suspects the member, which hears the suspicion and refutes it.
func TestRefutationIsCounted(t *testing.T) {
	m := startReal(t, "m", api.RoleAgent)
	sink, err := net.ListenPacket("udp", "127.0.0.1:0") // bound, never read: acks vanish here
	require.NoError(t, err)
	t.Cleanup(func() { sink.Close() })
	_, port, _ := net.SplitHostPort(sink.LocalAddr().String())

	accuser := bareNode(t, "accuser", api.GossipKey(testSecret), func(c *memberlist.Config) {
		c.AdvertiseAddr = "127.0.0.1"
		c.AdvertisePort, _ = strconv.Atoi(port)
		c.DisableTcpPings = true
		c.ProbeInterval, c.ProbeTimeout = 100*time.Millisecond, 50*time.Millisecond
	})
	_, err = accuser.Join([]string{m.GossipAddr()})
	require.NoError(t, err)

	// Refuting costs memberlist's health score, as do the member's own probes of the accuser:
	// they go to the advertised address, where nothing answers.
	if !assert.Eventually(t, func() bool { s := m.GossipStats(); return s.Refutations > 0 && s.HealthScore > 0 }, 10*time.Second, 20*time.Millisecond) {
		t.Fatalf("the member never refuted, or its health did not suffer: %+v", m.GossipStats())
	}
}

// TestUndecryptableGossipIsCountedAndFound: a memberlist node with the mesh's label but
// another key tries to join. What it sends cannot be decrypted: memberlist says so only in
// its log, with the sender's address; the member counts the drop and its doctor names the host.
func TestUndecryptableGossipIsCountedAndFound(t *testing.T) {
	m := startReal(t, "m", api.RoleAgent)
	stranger := bareNode(t, "stranger", make([]byte, 32), nil) // another key
	_, err := stranger.Join([]string{m.GossipAddr()})
	require.Error(t, err, "a node with another key joined")

	var f api.Finding
	if !assert.Eventually(t, func() bool {
		var ok bool
		f, ok = findingWith(m.Doctor(context.Background()), "gossip from 127.0.0.1 could not be decrypted")
		return ok && m.GossipStats().Dropped[dropDecrypt] > 0
	}, 10*time.Second, 20*time.Millisecond) {
		t.Fatalf("no decrypt finding, or not counted: %+v %v", m.Doctor(context.Background()).Findings, m.GossipStats().Dropped)
	}
	require.Equal(t, api.SeverityError, f.Severity)
	require.Contains(t, f.Fix, "restart the host at 127.0.0.1")
	require.Equal(t, 1, m.Members())
}

// bareNode is a plain memberlist node on loopback, outside any mesh, with the mesh's label and
// the given key; tweak, if set, changes its config last.
func bareNode(t *testing.T, name string, key []byte, tweak func(*memberlist.Config)) *memberlist.Memberlist {
	t.Helper()
	c := memberlist.DefaultLocalConfig()
	c.Name = name
	c.Logger = log.New(io.Discard, "", 0)
	// Its own sockets: given none, memberlist would advertise the port it bound, whatever the
	// config says.
	tr, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, Logger: c.Logger})
	require.NoError(t, err)
	c.Transport = tr
	c.SecretKey = key
	c.Label = api.GossipLabel("test", testSecret)
	if tweak != nil {
		tweak(c)
	}
	ml, err := memberlist.Create(c)
	require.NoError(t, err)
	t.Cleanup(func() { ml.Shutdown() })
	return ml
}

// TestRoutingAMetricAllocatesNothing: memberlist emits a few metrics on every probe and gossip
// round, for as long as an agent runs; routing one to its member's counters (and stripping the
// member's label for the next sink) allocates nothing, and still counts.
func TestRoutingAMetricAllocatesNothing(t *testing.T) {
	var c gossipCounters
	labels, stop := routeMetrics(&c)
	t.Cleanup(stop)
	sink := &routeSink{next: &gometrics.BlackholeSink{}}
	key := []string{"memberlist", "udp", "sent"}
	allocs := testing.AllocsPerRun(100, func() {
		sink.IncrCounterWithLabels(key, 10, labels)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, uint64(101*10), c.udpSent.Load(), "AllocsPerRun calls it once more to warm up")
}
