package metrics

import (
	"errors"
	"math"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmkube/mesh/agent/api"
)

func TestExpositionParses(t *testing.T) {
	m := New(func() Snapshot {
		return Snapshot{
			Memory: api.Memory{Total: 16 << 30, Budget: 10 << 30, Committed: 3 << 30, Reserved: 1 << 30},
			States: map[api.PlacementState]int{api.StateReady: 2, api.StatePulling: 1},
		}
	})
	m.Refused(api.CodeInsufficientMemory)
	m.Refused(api.CodeInsufficientMemory)
	m.Evicted("memory")
	m.EngineRestarted(api.RuntimeLlamaServer)
	m.Pulled(api.RuntimeOllama, 1234)
	m.HealthChecked(api.RuntimeHailoOllama, 3*time.Millisecond, nil)
	m.HealthChecked(api.RuntimeHailoOllama, time.Second, errors.New("down"))
	m.CountGossip(func() api.GossipStats {
		return api.GossipStats{
			Probes: 40, ProbesAcked: 37, ProbesTCPOnly: 1, ProbesFailed: 2, Suspicions: 3, Refutations: 1,
			UDPSentBytes: 5000, UDPReceivedBytes: 4000, TCPSentBytes: 700, TCPReceivedBytes: 600, HealthScore: 2,
			RTT:     api.Histogram{Count: 37, Sum: 0.05, Buckets: map[float64]uint64{.001: 30, .01: 36, 1: 37}},
			Dropped: map[string]uint64{"label": 300, "decrypt": 0},
		}
	})

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The text format 0.0.4, which every scraper reads (client_golang adds its escaping scheme).
	if mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != "text/plain" || params["version"] != "0.0.4" {
		t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
	val := func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := fams[name]
		if !ok {
			t.Fatalf("missing %s", name)
		}
	next:
		for _, mt := range f.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			switch {
			case mt.Gauge != nil:
				return mt.GetGauge().GetValue()
			case mt.Counter != nil:
				return mt.GetCounter().GetValue()
			case mt.Histogram != nil:
				return float64(mt.GetHistogram().GetSampleCount())
			}
		}
		t.Fatalf("%s%v not found", name, labels)
		return 0
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"llmkube_memory_budget_bytes", nil, 10 << 30},
		{"llmkube_memory_available_bytes", nil, 6 << 30},
		{"llmkube_memory_reserved_bytes", nil, 1 << 30},
		{"llmkube_placements", map[string]string{"state": "ready"}, 2},
		{"llmkube_placements", map[string]string{"state": "failed"}, 0},
		{"llmkube_admissions_refused_total", map[string]string{"code": "InsufficientMemory"}, 2},
		{"llmkube_evictions_total", map[string]string{"reason": "memory"}, 1},
		{"llmkube_engine_restarts_total", map[string]string{"runtime": "llama-server"}, 1},
		{"llmkube_pull_bytes_total", map[string]string{"runtime": "ollama"}, 1234},
		{"llmkube_health_check_seconds", map[string]string{"runtime": "hailo-ollama", "result": "fail"}, 1},
		{"llmkube_gossip_dropped_total", map[string]string{"reason": "label"}, 300},
		{"llmkube_gossip_dropped_total", map[string]string{"reason": "decrypt"}, 0},
		{"llmkube_gossip_probes_total", nil, 40},
		{"llmkube_gossip_probes_acked_total", nil, 37},
		{"llmkube_gossip_probes_tcp_only_total", nil, 1},
		{"llmkube_gossip_probe_failures_total", nil, 2},
		{"llmkube_gossip_probes_degraded_total", nil, 0},
		{"llmkube_gossip_suspicions_total", nil, 3},
		{"llmkube_gossip_refutations_total", nil, 1},
		{"llmkube_gossip_bytes_total", map[string]string{"proto": "udp", "direction": "sent"}, 5000},
		{"llmkube_gossip_bytes_total", map[string]string{"proto": "udp", "direction": "received"}, 4000},
		{"llmkube_gossip_bytes_total", map[string]string{"proto": "tcp", "direction": "sent"}, 700},
		{"llmkube_gossip_bytes_total", map[string]string{"proto": "tcp", "direction": "received"}, 600},
		{"llmkube_gossip_health_score", nil, 2},
		{"llmkube_gossip_probe_rtt_seconds", nil, 37},
	}
	for _, c := range checks {
		if got := val(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for name, f := range fams {
		if strings.HasSuffix(name, "_total") != (f.GetType() == dto.MetricType_COUNTER) {
			t.Errorf("%s is a %v: counters, and only they, end in _total", name, f.GetType())
		}
	}
	types := map[string]dto.MetricType{
		"llmkube_memory_budget_bytes": dto.MetricType_GAUGE, "llmkube_placements": dto.MetricType_GAUGE,
		"llmkube_gossip_health_score": dto.MetricType_GAUGE, "llmkube_health_check_seconds": dto.MetricType_HISTOGRAM,
		"llmkube_gossip_probe_rtt_seconds": dto.MetricType_HISTOGRAM, "go_gc_duration_seconds": dto.MetricType_SUMMARY,
	}
	for name, want := range types {
		if got := fams[name].GetType(); got != want {
			t.Errorf("%s is a %v, want %v", name, got, want)
		}
	}
	// The agent's own RSS and CPU, and the runtime's figures, are what dashboards watch.
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
		"process_open_fds", "process_max_fds", "process_start_time_seconds", "go_goroutines", "go_threads",
		"go_memstats_heap_alloc_bytes", "go_memstats_sys_bytes", "go_gc_duration_seconds", "go_info"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	buckets := func(name string, labels map[string]string) (les []float64, counts []uint64) {
		t.Helper()
		for _, mt := range fams[name].GetMetric() {
			if len(labels) > 0 && mt.GetLabel()[0].GetValue() != labels[mt.GetLabel()[0].GetName()] ||
				len(labels) > 1 && mt.GetLabel()[1].GetValue() != labels[mt.GetLabel()[1].GetName()] {
				continue
			}
			for _, b := range mt.GetHistogram().GetBucket() {
				les = append(les, b.GetUpperBound())
				counts = append(counts, b.GetCumulativeCount())
			}
		}
		return les, counts
	}
	les, counts := buckets("llmkube_gossip_probe_rtt_seconds", nil)
	if !slices.Equal(les, []float64{.001, .01, 1, math.Inf(1)}) || !slices.Equal(counts, []uint64{30, 36, 37, 37}) {
		t.Errorf("rtt buckets %v %v", les, counts)
	}
	// 3 ms: in every bucket from 5 ms on.
	les, counts = buckets("llmkube_health_check_seconds", map[string]string{"runtime": "hailo-ollama", "result": "ok"})
	if len(les) != 13 || counts[1] != 0 || counts[2] != 1 || counts[12] != 1 {
		t.Errorf("health check buckets %v %v", les, counts)
	}
}

func TestRegistriesAreIndependent(t *testing.T) {
	snap := func() Snapshot { return Snapshot{} }
	a, b := New(snap), New(snap)
	a.Refused(api.CodeNotFound)
	refused := func(m *Metrics) bool {
		fams, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(fams, func(f *dto.MetricFamily) bool { return f.GetName() == "llmkube_admissions_refused_total" })
	}
	if refused(b) {
		t.Fatal("a refusal counted on one agent shows on another")
	}
	if !refused(a) {
		t.Fatal("the refusal is not counted on its own agent")
	}
}
