// Package metrics is the agent's Prometheus instrumentation. Each agent has its own registry
// (never a global one), so several agents can run in one process, as the tests do.
package metrics

import (
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llmkube/mesh/agent/api"
)

// Snapshot is what the gauges read at scrape time, so a scrape never shows figures older
// than the agent's own accounting.
type Snapshot struct {
	Memory api.Memory
	// States counts placements per state; every known state is exported, zeros included, so a
	// series does not vanish when its last placement leaves it.
	States map[api.PlacementState]int
}

// Metrics holds the agent's collectors.
type Metrics struct {
	reg            *prometheus.Registry
	refused        *prometheus.CounterVec
	evictions      *prometheus.CounterVec
	engineRestarts *prometheus.CounterVec
	pullBytes      *prometheus.CounterVec
	splitBytes     *prometheus.CounterVec
	healthLatency  *prometheus.HistogramVec
}

// New builds a registry with the agent's metrics plus the Go and process collectors (the
// latter is how the agent's own RSS and CPU are watched). snapshot is called on every scrape.
func New(snapshot func() Snapshot) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmkube_admissions_refused_total",
			Help: "Placement requests refused, by refusal code."}, []string{"code"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmkube_evictions_total",
			Help: "Placements evicted to make room, by reason (memory: host budget; swap: replaced on a one-model device)."}, []string{"reason"}),
		engineRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmkube_engine_restarts_total",
			Help: "Engine restarts after a crash or a failed health check, by runtime."}, []string{"runtime"}),
		pullBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmkube_pull_bytes_total",
			Help: "Model bytes pulled, by runtime."}, []string{"runtime"}),
		splitBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmkube_split_channel_bytes_total",
			Help: "Bytes of llama.cpp RPC a split's main exchanged with a member over the sealed channel, by member and direction (sent or received)."}, []string{"member", "direction"}),
		healthLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llmkube_health_check_seconds",
			Help:    "Engine health-check latency, by runtime and result (ok or fail).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}, []string{"runtime", "result"}),
	}
	m.reg.MustRegister(m.refused, m.evictions, m.engineRestarts, m.pullBytes, m.splitBytes, m.healthLatency,
		&gauges{snapshot: snapshot}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the agent's registry, for tests and for mounting extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format. A collector that fails (the
// process's figures where the OS does not give them) leaves its series out, not the scrape.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// CountGossip exports, as the llmkube_gossip_* series, what the mesh member's gossip layer did
// and saw (mesh.Mesh.GossipStats), read at scrape time.
func (m *Metrics) CountGossip(read func() api.GossipStats) {
	m.reg.MustRegister(&gossip{read: read})
}

var (
	descGossipProbes = prometheus.NewDesc("llmkube_gossip_probes_total",
		"Failure-detector probes this member sent to other members.", nil, nil)
	descGossipProbesAcked = prometheus.NewDesc("llmkube_gossip_probes_acked_total",
		"Probes answered directly over UDP (their round trips are llmkube_gossip_probe_rtt_seconds).", nil, nil)
	descGossipProbesTCPOnly = prometheus.NewDesc("llmkube_gossip_probes_tcp_only_total",
		"Probes answered over TCP only: UDP between this member and the one probed is lost or blocked.", nil, nil)
	descGossipProbeFailures = prometheus.NewDesc("llmkube_gossip_probe_failures_total",
		"Probes not answered at all, neither directly, nor through other members, nor over TCP: the member probed became suspect.", nil, nil)
	descGossipProbesDegraded = prometheus.NewDesc("llmkube_gossip_probes_degraded_total",
		"Probes run at a stretched interval because this member's own health score was above 0.", nil, nil)
	descGossipSuspicions = prometheus.NewDesc("llmkube_gossip_suspicions_total",
		"Times another member became suspect in this member's view, by this member's probe or a peer's word.", nil, nil)
	descGossipRefutations = prometheus.NewDesc("llmkube_gossip_refutations_total",
		"Suspicions of this member, raised by a peer, that it refuted: it was slow to answer, or its packets were lost.", nil, nil)
	descGossipBytes = prometheus.NewDesc("llmkube_gossip_bytes_total",
		"Gossip bytes as they travel, encrypted, by protocol (udp: probes, acks and broadcasts; tcp: push/pull exchanges, large messages, TCP probes) and direction (sent, received; UDP received counts the junk later dropped too).",
		[]string{"proto", "direction"}, nil)
	descGossipHealth = prometheus.NewDesc("llmkube_gossip_health_score",
		"memberlist's awareness of this member's own health: 0 is healthy; higher while its probes go unanswered or it must refute suspicions, which stretches its probe interval and timeouts.", nil, nil)
	descGossipRTT = prometheus.NewDesc("llmkube_gossip_probe_rtt_seconds",
		"Round trip of each probe answered directly.", nil, nil)
	descGossipDropped = prometheus.NewDesc("llmkube_gossip_dropped_total",
		"Packets and streams dropped on the gossip port before they could be read, by reason: label (another mesh, or none), decrypt (not sealed with this mesh's key), stream (too many, too large), malformed. Each reason is logged at most once every 10 s.",
		[]string{"reason"}, nil)
)

// gossip reads the mesh member's counters at scrape time.
type gossip struct{ read func() api.GossipStats }

func (g *gossip) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGossipProbes, descGossipProbesAcked, descGossipProbesTCPOnly, descGossipProbeFailures,
		descGossipProbesDegraded, descGossipSuspicions, descGossipRefutations, descGossipBytes, descGossipHealth, descGossipRTT, descGossipDropped} {
		ch <- d
	}
}

func (g *gossip) Collect(ch chan<- prometheus.Metric) {
	s := g.read()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descGossipProbes, s.Probes)
	counter(descGossipProbesAcked, s.ProbesAcked)
	counter(descGossipProbesTCPOnly, s.ProbesTCPOnly)
	counter(descGossipProbeFailures, s.ProbesFailed)
	counter(descGossipProbesDegraded, s.ProbesDegraded)
	counter(descGossipSuspicions, s.Suspicions)
	counter(descGossipRefutations, s.Refutations)
	counter(descGossipBytes, s.UDPSentBytes, "udp", "sent")
	counter(descGossipBytes, s.UDPReceivedBytes, "udp", "received")
	counter(descGossipBytes, s.TCPSentBytes, "tcp", "sent")
	counter(descGossipBytes, s.TCPReceivedBytes, "tcp", "received")
	ch <- prometheus.MustNewConstMetric(descGossipHealth, prometheus.GaugeValue, float64(s.HealthScore))
	buckets := make(map[float64]uint64, len(s.RTT.Buckets))
	for b, n := range s.RTT.Buckets {
		if !math.IsInf(b, 1) { // the +Inf bucket is the count, written anyway
			buckets[b] = n
		}
	}
	ch <- prometheus.MustNewConstHistogram(descGossipRTT, s.RTT.Count, s.RTT.Sum, buckets)
	for reason, n := range s.Dropped {
		counter(descGossipDropped, n, reason)
	}
}

// Refused counts one refused admission.
func (m *Metrics) Refused(code api.Code) { m.refused.WithLabelValues(string(code)).Inc() }

// Evicted counts one eviction.
func (m *Metrics) Evicted(reason string) { m.evictions.WithLabelValues(reason).Inc() }

// EngineRestarted counts one engine restart.
func (m *Metrics) EngineRestarted(r api.Runtime) { m.engineRestarts.WithLabelValues(string(r)).Inc() }

// Pulled adds n pulled bytes.
func (m *Metrics) Pulled(r api.Runtime, n int64) {
	if n > 0 {
		m.pullBytes.WithLabelValues(string(r)).Add(float64(n))
	}
}

// SplitChannel is the counters of a split's channel to member: bytes sent to it and received
// from it.
func (m *Metrics) SplitChannel(member string) (sent, received prometheus.Counter) {
	return m.splitBytes.WithLabelValues(member, "sent"), m.splitBytes.WithLabelValues(member, "received")
}

// HealthChecked records one health check.
func (m *Metrics) HealthChecked(r api.Runtime, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "fail"
	}
	m.healthLatency.WithLabelValues(string(r), result).Observe(took.Seconds())
}

var allStates = []api.PlacementState{
	api.StateSizing, api.StatePulling, api.StateLoading, api.StateReady, api.StateRestarting,
	api.StateStopping, api.StateFailed, api.StateEvicted,
}

var (
	descBudget = prometheus.NewDesc("llmkube_memory_budget_bytes",
		"Memory budget for models on this host (host-wide: shared by every namespace and runtime; fraction of the cgroup-aware total, or the operator's override).", nil, nil)
	descTotal = prometheus.NewDesc("llmkube_memory_total_bytes",
		"Host memory the budget is taken from: min(MemTotal, cgroup v2 memory.max).", nil, nil)
	descCommitted = prometheus.NewDesc("llmkube_memory_committed_bytes",
		"Host memory held by placements loading, ready or restarting.", nil, nil)
	descReserved = prometheus.NewDesc("llmkube_memory_reserved_bytes",
		"Host memory reserved by admitted placements still pulling.", nil, nil)
	descAvailable = prometheus.NewDesc("llmkube_memory_available_bytes",
		"Budget left for new placements: budget - committed - reserved.", nil, nil)
	descPlacements = prometheus.NewDesc("llmkube_placements",
		"Placements on this host, by state.", []string{"state"}, nil)
)

// gauges reads the agent's accounting at scrape time.
type gauges struct{ snapshot func() Snapshot }

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBudget, descTotal, descCommitted, descReserved, descAvailable, descPlacements} {
		ch <- d
	}
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	s := g.snapshot()
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(descBudget, s.Memory.Budget)
	gauge(descTotal, s.Memory.Total)
	gauge(descCommitted, s.Memory.Committed)
	gauge(descReserved, s.Memory.Reserved)
	gauge(descAvailable, s.Memory.Free())
	for _, st := range allStates {
		gauge(descPlacements, int64(s.States[st]), string(st))
	}
}
