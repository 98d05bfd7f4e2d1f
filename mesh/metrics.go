package mesh

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gometrics "github.com/hashicorp/go-metrics"

	"github.com/llmkube/mesh/agent/api"
)

// A member's gossip counters come from four places, each the one memberlist offers for the fact:
//
//   - memberlist's own metrics (fromMemberlist below): probes, degraded probes, suspicions, bytes
//     sent by UDP and TCP and received by UDP;
//   - its delegates: acked probes and their round trip (pings, the PingDelegate), name conflicts
//     (the ConflictDelegate, see events.NotifyConflict), failed probes and our refutations (the
//     fork's SuspicionDelegate, see suspicions);
//   - the stream guard, which sees every gossip stream, whichever side opened it: bytes
//     received by TCP;
//   - its log lines, only for what it says nowhere else: probes answered over TCP only, and
//     what was dropped (see diagnostics.go).
//
// memberlist v0.7.0 reports its metrics only to go-metrics' process-wide sink (the package-level
// IncrCounterWithLabels and the like), adding Config.MetricLabels to each: it has no sink per
// instance. Several members run in one process (the tests run dozens at once; a console beside
// an agent), so the first member to start installs one global sink that routes each metric to
// its member by the memberLabel it carries, and hands every metric on, without that label, to
// the sink installed before, so that a program's own go-metrics setup keeps working. A program
// that installs another global sink after a member started cuts the route: memberlist's figures
// then stop growing; the others keep counting.
const memberLabel = "llmkube_member"

var (
	routeOnce sync.Once
	routes    sync.Map // member id (string) → *gossipCounters
	memberIDs atomic.Uint64
)

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

// routeMetrics registers c under a new member id and returns the labels that route
// memberlist's metrics to it, and the function that stops the route.
func routeMetrics(c *gossipCounters) ([]gometrics.Label, func()) {
	routeOnce.Do(func() {
		conf := gometrics.DefaultConfig("")
		conf.EnableHostname, conf.EnableRuntimeMetrics = false, false
		_, _ = gometrics.NewGlobal(conf, &routeSink{next: gometrics.Default()}) // New never fails
	})
	id := strconv.FormatUint(memberIDs.Add(1), 10)
	routes.Store(id, c)
	return []gometrics.Label{{Name: memberLabel, Value: id}}, func() { routes.Delete(id) }
}

// routeSink is the process-wide go-metrics sink (see above).
type routeSink struct{ next gometrics.MetricSink }

// add counts one of memberlist's metrics for the member its labels name, and strips that
// label for the next sink.
func (s *routeSink) add(key []string, val float32, labels []gometrics.Label) []gometrics.Label {
	i := -1
	for j, l := range labels {
		if l.Name == memberLabel {
			i = j
			break
		}
	}
	if i < 0 {
		return labels
	}
	if c, ok := routes.Load(labels[i].Value); ok && val > 0 {
		// The name is joined in a buffer on the stack and looked up without making it a string
		// (the compiler's m[string(b)]): memberlist emits a few metrics per probe and gossip
		// round for as long as the agent runs, and an idle agent's garbage collections are a
		// good part of its CPU (BENCHMARKS.md, the idle footprint).
		var buf [64]byte
		name := buf[:0]
		for j, part := range key {
			if j > 0 {
				name = append(name, '.')
			}
			name = append(name, part...)
		}
		if counter := fromMemberlist[string(name)]; counter != nil {
			counter(c.(*gossipCounters)).Add(uint64(val))
		}
	}
	return append(labels[:i:i], labels[i+1:]...)
}

func (s *routeSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.next.IncrCounterWithLabels(key, val, s.add(key, val, labels))
}

func (s *routeSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.next.AddSampleWithLabels(key, val, s.add(key, 1, labels))
}

func (s *routeSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.next.SetGaugeWithLabels(key, val, s.add(key, 0, labels))
}

func (s *routeSink) SetPrecisionGaugeWithLabels(key []string, val float64, labels []gometrics.Label) {
	if next, ok := s.next.(gometrics.PrecisionGaugeMetricSink); ok {
		next.SetPrecisionGaugeWithLabels(key, val, s.add(key, 0, labels))
	}
}

func (s *routeSink) SetPrecisionGauge(key []string, val float64) {
	if next, ok := s.next.(gometrics.PrecisionGaugeMetricSink); ok {
		next.SetPrecisionGauge(key, val)
	}
}

func (s *routeSink) SetGauge(key []string, val float32)    { s.next.SetGauge(key, val) }
func (s *routeSink) EmitKey(key []string, val float32)     { s.next.EmitKey(key, val) }
func (s *routeSink) IncrCounter(key []string, val float32) { s.next.IncrCounter(key, val) }
func (s *routeSink) AddSample(key []string, val float32)   { s.next.AddSample(key, val) }

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
