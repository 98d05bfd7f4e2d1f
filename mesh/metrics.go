package mesh

import (
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics"

	"github.com/llmkube/mesh/agent/api"
)

// A member's gossip counters come from three places, each the one memberlist offers for the fact:
//
//   - memberlist's own metrics (fromMemberlist below): probes, degraded probes, suspicions, bytes
//     sent by UDP and TCP and received by UDP;
//   - its delegates: acked probes and their round trip (pings, the PingDelegate), name conflicts
//     (the ConflictDelegate, see events.NotifyConflict);
//   - the stream guard, which sees every gossip stream, whichever side opened it: bytes
//     received by TCP;
//   - its log lines, only for what it says nowhere else (see diagnostics.go).
//
// memberlist v0.7.0 reports its metrics to go-metrics' process-wide sink; the fork in
// third_party/memberlist (LLMKUBE.md) also takes a sink per member (Config.MetricSink, and its
// transport's): each member hands its own counterSink, so several members in one process (the
// tests run dozens at once; a console beside an agent) count each its own, nothing reaches
// go-metrics' global sink, and a metric costs a name lookup and an atomic add. (Before, one
// global sink routed each metric to its member by a label, through go-metrics' filters: a few
// metrics a probe and gossip round, for as long as an agent runs, were a visible part of an
// idle agent's CPU, BENCHMARKS.md.)

// gossipCounters are one member's counters; see api.GossipStats for what each counts.
type gossipCounters struct {
	probes, probesAcked, probesTCPOnly, probesFailed, probesDegraded atomic.Uint64
	suspicions, refutations                                          atomic.Uint64
	udpSent, udpReceived, tcpSent, tcpReceived                       atomic.Uint64
	rtt                                                              rttHistogram
}

// fromMemberlist maps the metrics memberlist v0.7.0 emits (names as in its source) to the
// counters they feed. A counter adds its value (bytes, or 1); a sample counts once: the
// probe's duration says nothing we use, that it was measured says a probe ran. The others are
// not needed: memberlist.health.score is read from memberlist when asked (GetHealthScore), and
// the member table says more than memberlist.node.instances or memberlist.msg.alive.
var fromMemberlist = map[string]func(*gossipCounters) *atomic.Uint64{
	"memberlist.probeNode":      func(c *gossipCounters) *atomic.Uint64 { return &c.probes },
	"memberlist.degraded.probe": func(c *gossipCounters) *atomic.Uint64 { return &c.probesDegraded },
	"memberlist.msg.suspect":    func(c *gossipCounters) *atomic.Uint64 { return &c.suspicions },
	"memberlist.udp.sent":       func(c *gossipCounters) *atomic.Uint64 { return &c.udpSent },
	"memberlist.udp.received":   func(c *gossipCounters) *atomic.Uint64 { return &c.udpReceived },
	"memberlist.tcp.sent":       func(c *gossipCounters) *atomic.Uint64 { return &c.tcpSent },
}

// counterSink is one member's go-metrics sink: it feeds the member's counters and drops the rest.
type counterSink struct{ c *gossipCounters }

var _ gometrics.MetricSink = counterSink{}

// add counts one of memberlist's metrics.
func (s counterSink) add(key []string, val float32) {
	if val <= 0 {
		return
	}
	// The name is joined in a buffer on the stack and looked up without making it a string
	// (the compiler's m[string(b)]): an idle agent's garbage collections are a good part of its
	// CPU (BENCHMARKS.md, the idle footprint).
	var buf [64]byte
	name := buf[:0]
	for j, part := range key {
		if j > 0 {
			name = append(name, '.')
		}
		name = append(name, part...)
	}
	if counter := fromMemberlist[string(name)]; counter != nil {
		counter(s.c).Add(uint64(val))
	}
}

func (s counterSink) IncrCounterWithLabels(key []string, val float32, _ []gometrics.Label) {
	s.add(key, val)
}

func (s counterSink) AddSampleWithLabels(key []string, _ float32, _ []gometrics.Label) {
	s.add(key, 1)
}

func (s counterSink) IncrCounter(key []string, val float32) { s.add(key, val) }
func (s counterSink) AddSample(key []string, _ float32)     { s.add(key, 1) }

func (counterSink) SetGaugeWithLabels([]string, float32, []gometrics.Label) {}
func (counterSink) SetGauge([]string, float32)                              {}
func (counterSink) EmitKey([]string, float32)                               {}

// rttBuckets are the upper bounds of the probe round-trip histogram, in seconds: from a LAN's
// fraction of a millisecond to the probe timeouts of the WAN profile.
var rttBuckets = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

type rttHistogram struct {
	counts [len(rttBuckets) + 1]atomic.Uint64 // per bucket of rttBuckets, the last for above all of them
	sumNs  atomic.Int64
}

func (h *rttHistogram) observe(d time.Duration) {
	d = max(d, 0) // memberlist measures it locally, but a clock step could make it negative
	i := 0
	for i < len(rttBuckets) && d.Seconds() > rttBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

func (h *rttHistogram) snapshot() api.Histogram {
	out := api.Histogram{Buckets: make(map[float64]uint64, len(rttBuckets))}
	for i, b := range rttBuckets {
		out.Count += h.counts[i].Load()
		out.Buckets[b] = out.Count
	}
	out.Count += h.counts[len(rttBuckets)].Load()
	out.Sum = time.Duration(h.sumNs.Load()).Seconds()
	return out
}

// GossipStats counts what this member's gossip layer did and saw since it started.
func (m *Mesh) GossipStats() api.GossipStats {
	c := m.stats
	return api.GossipStats{
		Probes: c.probes.Load(), ProbesAcked: c.probesAcked.Load(), ProbesTCPOnly: c.probesTCPOnly.Load(),
		ProbesFailed: c.probesFailed.Load(), ProbesDegraded: c.probesDegraded.Load(),
		Suspicions: c.suspicions.Load(), Refutations: c.refutations.Load(),
		UDPSentBytes: c.udpSent.Load(), UDPReceivedBytes: c.udpReceived.Load(),
		TCPSentBytes: c.tcpSent.Load(), TCPReceivedBytes: c.tcpReceived.Load(),
		HealthScore: m.ml.GetHealthScore(),
		RTT:         c.rtt.snapshot(),
		Dropped:     m.diag.droppedCounts(),
	}
}
