// Package metrics is the agent's Prometheus instrumentation. Each agent has its own registry
// (never a global one), so several agents can run in one process, as the tests do.
package metrics

import (
	"maps"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/prom"
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
	reg            *prom.Registry
	refused        *prom.CounterVec
	evictions      *prom.CounterVec
	engineRestarts *prom.CounterVec
	pullBytes      *prom.CounterVec
	healthLatency  *prom.HistogramVec
}

// New builds a registry with the agent's metrics plus the Go and process collectors (the
// latter is how the agent's own RSS and CPU are watched). snapshot is called on every scrape.
func New(snapshot func() Snapshot) *Metrics {
	m := &Metrics{
		reg: prom.NewRegistry(),
		refused: prom.NewCounterVec("llmkube_admissions_refused_total",
			"Placement requests refused, by refusal code.", "code"),
		evictions: prom.NewCounterVec("llmkube_evictions_total",
			"Placements evicted to make room, by reason (memory: host budget; swap: replaced on a one-model device).", "reason"),
		engineRestarts: prom.NewCounterVec("llmkube_engine_restarts_total",
			"Engine restarts after a crash or a failed health check, by runtime.", "runtime"),
		pullBytes: prom.NewCounterVec("llmkube_pull_bytes_total",
			"Model bytes pulled, by runtime.", "runtime"),
		healthLatency: prom.NewHistogramVec("llmkube_health_check_seconds",
			"Engine health-check latency, by runtime and result (ok or fail).",
			[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}, "runtime", "result"),
	}
	m.reg.MustRegister(m.refused, m.evictions, m.engineRestarts, m.pullBytes, m.healthLatency,
		&gauges{snapshot: snapshot}, prom.NewGoCollector(), prom.NewProcessCollector())
	return m
}

// Registry is the agent's registry, for tests and for mounting extra collectors.
func (m *Metrics) Registry() *prom.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return m.reg }

// CountGossip exports, as the llmkube_gossip_* series, what the mesh member's gossip layer did
// and saw (mesh.Mesh.GossipStats), read at scrape time.
func (m *Metrics) CountGossip(read func() api.GossipStats) {
	m.reg.MustRegister(&gossip{read: read})
}

// desc is a family the agent reads at scrape time.
type desc struct {
	name, help string
	labels     []string
}

func (d desc) family(typ prom.Type, series ...prom.Series) prom.Family {
	return prom.Family{Name: d.name, Help: d.help, Type: typ, Labels: d.labels, Series: series}
}

func names(ds ...desc) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.name
	}
	return out
}

var (
	descGossipProbes = desc{"llmkube_gossip_probes_total",
		"Failure-detector probes this member sent to other members.", nil}
	descGossipProbesAcked = desc{"llmkube_gossip_probes_acked_total",
		"Probes answered directly over UDP (their round trips are llmkube_gossip_probe_rtt_seconds).", nil}
	descGossipProbesTCPOnly = desc{"llmkube_gossip_probes_tcp_only_total",
		"Probes answered over TCP only: UDP between this member and the one probed is lost or blocked.", nil}
	descGossipProbeFailures = desc{"llmkube_gossip_probe_failures_total",
		"Probes not answered at all, neither directly, nor through other members, nor over TCP: the member probed became suspect.", nil}
	descGossipProbesDegraded = desc{"llmkube_gossip_probes_degraded_total",
		"Probes run at a stretched interval because this member's own health score was above 0.", nil}
	descGossipSuspicions = desc{"llmkube_gossip_suspicions_total",
		"Times another member became suspect in this member's view, by this member's probe or a peer's word.", nil}
	descGossipRefutations = desc{"llmkube_gossip_refutations_total",
		"Suspicions of this member, raised by a peer, that it refuted: it was slow to answer, or its packets were lost.", nil}
	descGossipBytes = desc{"llmkube_gossip_bytes_total",
		"Gossip bytes as they travel, encrypted, by protocol (udp: probes, acks and broadcasts; tcp: push/pull exchanges, large messages, TCP probes) and direction (sent, received; UDP received counts the junk later dropped too).",
		[]string{"proto", "direction"}}
	descGossipHealth = desc{"llmkube_gossip_health_score",
		"memberlist's awareness of this member's own health: 0 is healthy; higher while its probes go unanswered or it must refute suspicions, which stretches its probe interval and timeouts.", nil}
	descGossipRTT = desc{"llmkube_gossip_probe_rtt_seconds",
		"Round trip of each probe answered directly.", nil}
	descGossipDropped = desc{"llmkube_gossip_dropped_total",
		"Packets and streams dropped on the gossip port before they could be read, by reason: label (another mesh, or none), decrypt (not sealed with this mesh's key), stream (too many, too large), malformed. Each reason is logged at most once every 10 s.",
		[]string{"reason"}}
)

type gossip struct{ read func() api.GossipStats }

func (g *gossip) Names() []string {
	return names(descGossipProbes, descGossipProbesAcked, descGossipProbesTCPOnly, descGossipProbeFailures,
		descGossipProbesDegraded, descGossipSuspicions, descGossipRefutations, descGossipBytes, descGossipHealth, descGossipRTT, descGossipDropped)
}

func (g *gossip) Collect(add func(prom.Family)) {
	s := g.read()
	counter := func(d desc, v uint64) { add(d.family(prom.TypeCounter, prom.Series{Value: float64(v)})) }
	counter(descGossipProbes, s.Probes)
	counter(descGossipProbesAcked, s.ProbesAcked)
	counter(descGossipProbesTCPOnly, s.ProbesTCPOnly)
	counter(descGossipProbeFailures, s.ProbesFailed)
	counter(descGossipProbesDegraded, s.ProbesDegraded)
	counter(descGossipSuspicions, s.Suspicions)
	counter(descGossipRefutations, s.Refutations)
	bytes := func(proto, direction string, v uint64) prom.Series {
		return prom.Series{Values: []string{proto, direction}, Value: float64(v)}
	}
	add(descGossipBytes.family(prom.TypeCounter, bytes("udp", "sent", s.UDPSentBytes), bytes("udp", "received", s.UDPReceivedBytes),
		bytes("tcp", "sent", s.TCPSentBytes), bytes("tcp", "received", s.TCPReceivedBytes)))
	add(descGossipHealth.family(prom.TypeGauge, prom.Series{Value: float64(s.HealthScore)}))
	rtt := &prom.Dist{Count: s.RTT.Count, Sum: s.RTT.Sum}
	for _, b := range slices.Sorted(maps.Keys(s.RTT.Buckets)) {
		if !math.IsInf(b, 1) { // the +Inf bucket is Count, written anyway
			rtt.Bounds = append(rtt.Bounds, b)
			rtt.Cumulative = append(rtt.Cumulative, s.RTT.Buckets[b])
		}
	}
	add(descGossipRTT.family(prom.TypeHistogram, prom.Series{Dist: rtt}))
	dropped := descGossipDropped.family(prom.TypeCounter)
	for reason, n := range s.Dropped {
		dropped.Series = append(dropped.Series, prom.Series{Values: []string{reason}, Value: float64(n)})
	}
	add(dropped)
}

// Refused counts one refused admission.
func (m *Metrics) Refused(code api.Code) { m.refused.With(string(code)).Inc() }

// Evicted counts one eviction.
func (m *Metrics) Evicted(reason string) { m.evictions.With(reason).Inc() }

// EngineRestarted counts one engine restart.
func (m *Metrics) EngineRestarted(r api.Runtime) { m.engineRestarts.With(string(r)).Inc() }

// Pulled adds n pulled bytes.
func (m *Metrics) Pulled(r api.Runtime, n int64) {
	if n > 0 {
		m.pullBytes.With(string(r)).Add(uint64(n))
	}
}

// HealthChecked records one health check.
func (m *Metrics) HealthChecked(r api.Runtime, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "fail"
	}
	m.healthLatency.With(string(r), result).Observe(took.Seconds())
}

var allStates = []api.PlacementState{
	api.StateSizing, api.StatePulling, api.StateLoading, api.StateReady, api.StateRestarting,
	api.StateStopping, api.StateFailed, api.StateEvicted,
}

var (
	descBudget = desc{"llmkube_memory_budget_bytes",
		"Memory budget for models on this host (host-wide: shared by every namespace and runtime; fraction of the cgroup-aware total, or the operator's override).", nil}
	descTotal = desc{"llmkube_memory_total_bytes",
		"Host memory the budget is taken from: min(MemTotal, cgroup v2 memory.max).", nil}
	descCommitted = desc{"llmkube_memory_committed_bytes",
		"Host memory held by placements loading, ready or restarting.", nil}
	descReserved = desc{"llmkube_memory_reserved_bytes",
		"Host memory reserved by admitted placements still pulling.", nil}
	descAvailable = desc{"llmkube_memory_available_bytes",
		"Budget left for new placements: budget - committed - reserved.", nil}
	descPlacements = desc{"llmkube_placements",
		"Placements on this host, by state.", []string{"state"}}
)

// gauges reads the agent's accounting at scrape time.
type gauges struct{ snapshot func() Snapshot }

func (g *gauges) Names() []string {
	return names(descBudget, descTotal, descCommitted, descReserved, descAvailable, descPlacements)
}

func (g *gauges) Collect(add func(prom.Family)) {
	s := g.snapshot()
	gauge := func(d desc, v int64) { add(d.family(prom.TypeGauge, prom.Series{Value: float64(v)})) }
	gauge(descBudget, s.Memory.Budget)
	gauge(descTotal, s.Memory.Total)
	gauge(descCommitted, s.Memory.Committed)
	gauge(descReserved, s.Memory.Reserved)
	gauge(descAvailable, s.Memory.Free())
	placements := descPlacements.family(prom.TypeGauge)
	for _, st := range allStates {
		placements.Series = append(placements.Series, prom.Series{Values: []string{string(st)}, Value: float64(s.States[st])})
	}
	add(placements)
}
