package prom

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrape serves r over HTTP and parses the answer as a scraper does.
func scrape(t testing.TB, r *Registry) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/plain; version=0.0.4; charset=utf-8", resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err, "%s", body)
	return fams, string(body)
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// find returns the family's series with exactly these labels.
func find(t testing.TB, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "family %s missing", name)
	for _, m := range f.GetMetric() {
		if got := labels(m); len(got) == len(want) && func() bool {
			for k, v := range want {
				if got[k] != v {
					return false
				}
			}
			return true
		}() {
			return m
		}
	}
	t.Fatalf("%s%v not found", name, want)
	return nil
}

// collectorFunc is a collector made of a name list and a function, for the tests.
type collectorFunc struct {
	names   []string
	collect func(add func(Family))
}

func (c collectorFunc) Names() []string          { return c.names }
func (c collectorFunc) Collect(add func(Family)) { c.collect(add) }

func TestExposition(t *testing.T) {
	r := NewRegistry()
	reqs := NewCounterVec("test_requests_total", "Requests, by code.\nSecond line with a \\ backslash.", "code", "route")
	queued := NewGaugeVec("test_queued", "Waiting.", "engine")
	lat := NewHistogramVec("test_latency_seconds", "Latency.", []float64{0.01, 0.1, 1}, "model")
	r.MustRegister(reqs, queued, lat, collectorFunc{
		names: []string{"test_const_seconds", "test_pauses_seconds", "test_plain"},
		collect: func(add func(Family)) {
			add(Family{Name: "test_const_seconds", Help: "A histogram read from elsewhere.", Type: TypeHistogram,
				Series: []Series{{Dist: &Dist{Count: 9, Sum: 2.5, Bounds: []float64{0.5, 1}, Cumulative: []uint64{3, 7}}}}})
			add(Family{Name: "test_pauses_seconds", Help: "A summary.", Type: TypeSummary,
				Series: []Series{{Dist: &Dist{Count: 4, Sum: 0.01, Bounds: []float64{0, 0.5, 1}, Quantiles: []float64{0.001, 0.002, 0.004}}}}})
			add(Family{Name: "test_plain", Help: "A gauge without labels.", Type: TypeGauge, Series: []Series{{Value: math.Inf(1)}}})
		},
	})

	reqs.With("200", "local").Add(3)
	reqs.With("500", "forward").Inc()
	hostile := "a\\b\"c\nd"
	reqs.With(hostile, "local").Inc()
	g := queued.With("10.0.0.1:8000")
	g.Inc()
	g.Inc()
	g.Dec()
	queued.With("idle") // made, never moved: a series at 0
	h := lat.With("llama")
	for _, v := range []float64{0.005, 0.01, 0.05, 0.5, 2, 3} {
		h.Observe(v)
	}
	lat.With("unused")

	fams, text := scrape(t, r)

	assert.Equal(t, dto.MetricType_COUNTER, fams["test_requests_total"].GetType())
	assert.Equal(t, "Requests, by code.\nSecond line with a \\ backslash.", fams["test_requests_total"].GetHelp())
	assert.Equal(t, 3.0, find(t, fams, "test_requests_total", map[string]string{"code": "200", "route": "local"}).GetCounter().GetValue())
	assert.Equal(t, 1.0, find(t, fams, "test_requests_total", map[string]string{"code": "500", "route": "forward"}).GetCounter().GetValue())
	assert.Equal(t, 1.0, find(t, fams, "test_requests_total", map[string]string{"code": hostile, "route": "local"}).GetCounter().GetValue())
	assert.Contains(t, text, `test_requests_total{code="a\\b\"c\nd",route="local"} 1`+"\n")
	assert.Contains(t, text, "# HELP test_requests_total Requests, by code.\\nSecond line with a \\\\ backslash.\n")

	assert.Equal(t, dto.MetricType_GAUGE, fams["test_queued"].GetType())
	assert.Equal(t, 1.0, find(t, fams, "test_queued", map[string]string{"engine": "10.0.0.1:8000"}).GetGauge().GetValue())
	assert.Equal(t, 0.0, find(t, fams, "test_queued", map[string]string{"engine": "idle"}).GetGauge().GetValue())
	assert.True(t, math.IsInf(find(t, fams, "test_plain", nil).GetGauge().GetValue(), 1))

	require.Equal(t, dto.MetricType_HISTOGRAM, fams["test_latency_seconds"].GetType())
	hist := find(t, fams, "test_latency_seconds", map[string]string{"model": "llama"}).GetHistogram()
	assert.Equal(t, uint64(6), hist.GetSampleCount())
	assert.InDelta(t, 5.565, hist.GetSampleSum(), 1e-9)
	var bounds []float64
	var cum []uint64
	for _, b := range hist.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		cum = append(cum, b.GetCumulativeCount())
	}
	// 0.01 falls in the bucket whose upper bound it equals.
	assert.Equal(t, []float64{0.01, 0.1, 1, math.Inf(1)}, bounds)
	assert.Equal(t, []uint64{2, 3, 4, 6}, cum)
	assert.Contains(t, text, "test_latency_seconds_bucket{model=\"llama\",le=\"+Inf\"} 6\n")
	unused := find(t, fams, "test_latency_seconds", map[string]string{"model": "unused"}).GetHistogram()
	assert.Equal(t, uint64(0), unused.GetSampleCount())
	assert.Len(t, unused.GetBucket(), 4)

	c := find(t, fams, "test_const_seconds", nil).GetHistogram()
	assert.Equal(t, uint64(9), c.GetSampleCount())
	assert.Equal(t, 2.5, c.GetSampleSum())
	assert.Equal(t, uint64(7), c.GetBucket()[1].GetCumulativeCount())
	assert.Equal(t, uint64(9), c.GetBucket()[2].GetCumulativeCount())

	require.Equal(t, dto.MetricType_SUMMARY, fams["test_pauses_seconds"].GetType())
	s := find(t, fams, "test_pauses_seconds", nil).GetSummary()
	assert.Equal(t, uint64(4), s.GetSampleCount())
	require.Len(t, s.GetQuantile(), 3)
	assert.Equal(t, 0.5, s.GetQuantile()[1].GetQuantile())
	assert.Equal(t, 0.002, s.GetQuantile()[1].GetValue())

	// Families sorted by name, series by label values: the same bytes on every scrape.
	var names []string
	for line := range strings.Lines(text) {
		if n, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names = append(names, strings.Fields(n)[0])
		}
	}
	assert.True(t, slices.IsSorted(names), "%v", names)
	assert.Less(t, strings.Index(text, `code="200"`), strings.Index(text, `code="500"`))
	assert.Less(t, strings.Index(text, `code="500"`), strings.Index(text, `code="a\\b`))
	_, again := scrape(t, r)
	assert.Equal(t, text, again)
}

func TestLabelsAreWrittenSortedByName(t *testing.T) {
	r := NewRegistry()
	v := NewCounterVec("test_bytes_total", "Bytes.", "proto", "direction")
	r.MustRegister(v)
	v.With("udp", "sent").Add(1)
	v.With("tcp", "sent").Add(2)
	v.With("udp", "received").Add(3)
	_, text := scrape(t, r)
	assert.Equal(t, "# HELP test_bytes_total Bytes.\n# TYPE test_bytes_total counter\n"+
		`test_bytes_total{direction="received",proto="udp"} 3`+"\n"+
		`test_bytes_total{direction="sent",proto="tcp"} 2`+"\n"+
		`test_bytes_total{direction="sent",proto="udp"} 1`+"\n", text)
}

func TestEmptyFamiliesAreNotWritten(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(NewCounterVec("test_never_total", "Never counted.", "code"))
	_, text := scrape(t, r)
	assert.Empty(t, text)
}

func TestInvalidUTF8LabelValueIsReplaced(t *testing.T) {
	r := NewRegistry()
	v := NewCounterVec("test_models_total", "Models.", "model")
	r.MustRegister(v)
	v.With("bad\xff\xfename").Inc()
	fams, _ := scrape(t, r) // parsed with UTF-8 validation
	assert.Equal(t, 1.0, find(t, fams, "test_models_total", map[string]string{"model": "bad\uFFFD\uFFFDname"}).GetCounter().GetValue())
}

func TestLabelSetsNeverShareAChild(t *testing.T) {
	v := NewCounterVec("test_pairs_total", "Pairs.", "a", "b")
	// Joined with any separator these two would be one key.
	v.With("x\xff", "y").Inc()
	v.With("x", "\xffy").Add(5)
	assert.Same(t, v.With("x\xff", "y"), v.With("x\xff", "y"))
	assert.NotSame(t, v.With("x\xff", "y"), v.With("x", "\xffy"))
	assert.Equal(t, uint64(1), v.With("x\xff", "y").n.Load())
}

func TestRegister(t *testing.T) {
	r := NewRegistry()
	require.NoError(t, r.Register(NewCounterVec("test_a_total", "A.", "x")))
	err := r.Register(NewGaugeVec("test_a_total", "Again."))
	assert.ErrorIs(t, err, ErrAlreadyRegistered)
	err = r.Register(collectorFunc{names: []string{"test_b", "test_b"}, collect: func(func(Family)) {}})
	assert.ErrorIs(t, err, ErrAlreadyRegistered, "one collector naming a family twice")
	assert.Error(t, r.Register(collectorFunc{names: []string{"9lives"}, collect: func(func(Family)) {}}))
	// A refused collector leaves no name behind.
	assert.NoError(t, r.Register(NewGaugeVec("test_b", "B.")))
	// Two registries are independent.
	assert.NoError(t, NewRegistry().Register(NewCounterVec("test_a_total", "A.", "x")))
}

func TestUndeclaredOrRepeatedFamiliesAreLeftOut(t *testing.T) {
	r := NewRegistry()
	own := NewGaugeVec("test_owned", "Owned.")
	own.With().Inc()
	r.MustRegister(own, collectorFunc{names: []string{"test_mine"}, collect: func(add func(Family)) {
		one := Series{Value: 1}
		add(Family{Name: "test_mine", Type: TypeGauge, Series: []Series{one}})
		add(Family{Name: "test_mine", Type: TypeGauge, Series: []Series{one}})
		add(Family{Name: "test_owned", Type: TypeGauge, Series: []Series{one}}) // another's
		add(Family{Name: "test_undeclared", Type: TypeGauge, Series: []Series{one}})
	}})
	fams, text := scrape(t, r)
	assert.Len(t, fams, 2)
	assert.Equal(t, 1, strings.Count(text, "# TYPE test_mine "))
	assert.Equal(t, 1, strings.Count(text, "# TYPE test_owned "))
}

func TestBadDefinitionsPanic(t *testing.T) {
	for name, f := range map[string]func(){
		"counter without _total": func() { NewCounterVec("test_requests", "R.") },
		"invalid metric name":    func() { NewGaugeVec("test-dash", "D.") },
		"invalid label name":     func() { NewGaugeVec("test_g", "G.", "a-b") },
		"reserved label name":    func() { NewGaugeVec("test_g", "G.", "__name__") },
		"repeated label":         func() { NewGaugeVec("test_g", "G.", "a", "a") },
		"le on a histogram":      func() { NewHistogramVec("test_h", "H.", []float64{1}, "le") },
		"descending bounds":      func() { NewHistogramVec("test_h", "H.", []float64{1, 0.5}) },
		"infinite bound":         func() { NewHistogramVec("test_h", "H.", []float64{1, math.Inf(1)}) },
		"label count":            func() { NewGaugeVec("test_g", "G.", "a").With("x", "y") },
	} {
		assert.Panics(t, f, name)
	}
}

// TestConcurrentUpdatesAndScrapes updates from many goroutines while scraping: every scrape
// parses, each histogram's buckets are cumulative up to its count, and the final figures are
// exact. Run under -race, it is also the package's data-race test.
func TestConcurrentUpdatesAndScrapes(t *testing.T) {
	r := NewRegistry()
	c := NewCounterVec("test_ops_total", "Ops.", "worker")
	h := NewHistogramVec("test_op_seconds", "Op time.", []float64{0.25, 0.5, 0.75}, "kind")
	g := NewGaugeVec("test_busy", "Busy.")
	r.MustRegister(c, h, g)
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			// Every worker makes its children concurrently with the others, by name each time.
			for i := range each {
				g.With().Inc()
				c.With(string(rune('a' + w%4))).Inc()
				h.With("op").Observe(float64(i%4) / 4)
				g.With().Dec()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	check := func() map[string]*dto.MetricFamily {
		fams, _ := scrape(t, r)
		if f, ok := fams["test_op_seconds"]; ok {
			hist := f.GetMetric()[0].GetHistogram()
			b := hist.GetBucket()
			for i := 1; i < len(b); i++ {
				require.LessOrEqual(t, b[i-1].GetCumulativeCount(), b[i].GetCumulativeCount())
			}
			require.Equal(t, hist.GetSampleCount(), b[len(b)-1].GetCumulativeCount())
		}
		return fams
	}
	for scraping := true; scraping; {
		select {
		case <-done:
			scraping = false
		default:
			check()
		}
	}
	fams := check()
	total := 0.0
	for _, m := range fams["test_ops_total"].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	assert.Equal(t, float64(workers*each), total)
	hist := find(t, fams, "test_op_seconds", map[string]string{"kind": "op"}).GetHistogram()
	assert.Equal(t, uint64(workers*each), hist.GetSampleCount())
	assert.Equal(t, float64(workers*each)*1.5/4, hist.GetSampleSum()) // sums of quarters are exact
	assert.Equal(t, uint64(workers*each/2), hist.GetBucket()[0].GetCumulativeCount())
	assert.Equal(t, 0.0, find(t, fams, "test_busy", nil).GetGauge().GetValue())
}

func TestProcessCollectorReadsAProcTree(t *testing.T) {
	root := t.TempDir()
	self := filepath.Join(root, "self")
	require.NoError(t, os.MkdirAll(filepath.Join(self, "fd"), 0o755))
	for _, fd := range []string{"0", "1", "2", "7"} {
		require.NoError(t, os.WriteFile(filepath.Join(self, "fd", fd), nil, 0o644))
	}
	// A command name with a space and a parenthesis, as a process can name itself.
	stat := "4242 (llm kube) agent) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 12345 1500000000 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	require.NoError(t, os.WriteFile(filepath.Join(self, "stat"), []byte(stat), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "stat"), []byte("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"), 0o644))
	limits := "Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max open files            1024                 524288               files     \n" +
		"Max address space         unlimited            unlimited            bytes     \n"
	require.NoError(t, os.WriteFile(filepath.Join(self, "limits"), []byte(limits), 0o644))

	r := NewRegistry()
	r.MustRegister(processCollector{proc: root})
	fams, _ := scrape(t, r)
	for name, want := range map[string]float64{
		"process_cpu_seconds_total":        3,
		"process_virtual_memory_bytes":     1.5e9,
		"process_resident_memory_bytes":    float64(2048 * os.Getpagesize()),
		"process_start_time_seconds":       1700000000 + 123.45,
		"process_open_fds":                 4,
		"process_max_fds":                  1024,
		"process_virtual_memory_max_bytes": math.MaxUint64,
	} {
		m := find(t, fams, name, nil)
		got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		assert.InDelta(t, want, got, 1e-6, name)
	}
	assert.Equal(t, dto.MetricType_COUNTER, fams["process_cpu_seconds_total"].GetType())

	// Where there is no proc file system nothing is written, and the scrape still serves.
	r = NewRegistry()
	r.MustRegister(processCollector{proc: filepath.Join(root, "absent")})
	fams, _ = scrape(t, r)
	assert.Empty(t, fams)
}

func TestRuntimeCollectorsOnThisProcess(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(NewGoCollector(), NewProcessCollector())
	fams, _ := scrape(t, r)
	for _, n := range (goCollector{}).Names() {
		assert.Contains(t, fams, n)
	}
	positive := func(name string) {
		m := find(t, fams, name, nil)
		assert.Positive(t, m.GetGauge().GetValue()+m.GetCounter().GetValue(), name)
	}
	for _, n := range []string{"go_goroutines", "go_threads", "go_memstats_heap_alloc_bytes", "go_memstats_sys_bytes",
		"go_memstats_alloc_bytes_total", "go_sched_gomaxprocs_threads", "go_gc_gogc_percent"} {
		positive(n)
	}
	assert.Equal(t, dto.MetricType_SUMMARY, fams["go_gc_duration_seconds"].GetType())
	assert.Len(t, find(t, fams, "go_gc_duration_seconds", nil).GetSummary().GetQuantile(), 5)
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		for _, n := range (processCollector{}).Names() {
			if n != "process_cpu_seconds_total" { // a test process may not have run for a tick (10 ms) yet
				positive(n)
			}
		}
	}
}
