package prom

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// goCollector writes the go_* series the client library's Go collector writes by default,
// under the same names and help texts, so dashboards built on them keep working. The memstats
// figures come from runtime/metrics (no stop-the-world), combined as the library combines them.
type goCollector struct{}

// NewGoCollector returns the collector of the Go runtime's series: go_goroutines, go_threads,
// go_info, go_gc_duration_seconds, go_memstats_*, go_gc_gogc_percent, go_gc_gomemlimit_bytes
// and go_sched_gomaxprocs_threads.
func NewGoCollector() Collector { return goCollector{} }

// goSeries are the series computed from runtime/metrics samples.
var goSeries = []struct {
	name, help string
	typ        Type
	sum        []string // runtime/metrics names whose values add up to the series' value
}{
	{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", TypeGauge,
		[]string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", TypeCounter,
		[]string{"/gc/heap/allocs:bytes"}},
	{"go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", TypeGauge,
		[]string{"/memory/classes/profiling/buckets:bytes"}},
	{"go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", TypeCounter,
		[]string{"/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", TypeGauge,
		[]string{"/memory/classes/metadata/other:bytes"}},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", TypeGauge,
		[]string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", TypeGauge,
		[]string{"/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", TypeGauge,
		[]string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}},
	{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", TypeGauge,
		[]string{"/gc/heap/objects:objects"}},
	{"go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", TypeGauge,
		[]string{"/memory/classes/heap/released:bytes"}},
	{"go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", TypeGauge,
		[]string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", TypeCounter,
		[]string{"/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", TypeGauge,
		[]string{"/memory/classes/metadata/mcache/inuse:bytes"}},
	{"go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", TypeGauge,
		[]string{"/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes"}},
	{"go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", TypeGauge,
		[]string{"/memory/classes/metadata/mspan/inuse:bytes"}},
	{"go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", TypeGauge,
		[]string{"/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes"}},
	{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", TypeGauge,
		[]string{"/gc/heap/goal:bytes"}},
	{"go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", TypeGauge,
		[]string{"/memory/classes/other:bytes"}},
	{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", TypeGauge,
		[]string{"/memory/classes/heap/stacks:bytes"}},
	{"go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", TypeGauge,
		[]string{"/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes"}},
	{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", TypeGauge,
		[]string{"/memory/classes/total:bytes"}},
	{"go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", TypeGauge,
		[]string{"/gc/gogc:percent"}},
	{"go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", TypeGauge,
		[]string{"/gc/gomemlimit:bytes"}},
	{"go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", TypeGauge,
		[]string{"/sched/gomaxprocs:threads"}},
}

// goSamples lists each runtime/metrics name goSeries reads, once.
var goSamples = func() []string {
	var names []string
	seen := map[string]bool{}
	for _, s := range goSeries {
		for _, n := range s.sum {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names
}()

func (goCollector) Names() []string {
	names := []string{"go_goroutines", "go_threads", "go_info", "go_gc_duration_seconds", "go_memstats_last_gc_time_seconds"}
	for _, s := range goSeries {
		names = append(names, s.name)
	}
	return names
}

func (goCollector) Collect(add func(Family)) {
	one := func(name, help string, typ Type, v float64) {
		add(Family{Name: name, Help: help, Type: typ, Series: []Series{{Value: v}}})
	}
	one("go_goroutines", "Number of goroutines that currently exist.", TypeGauge, float64(runtime.NumGoroutine()))
	threads, _ := runtime.ThreadCreateProfile(nil)
	one("go_threads", "Number of OS threads created.", TypeGauge, float64(threads))
	add(Family{Name: "go_info", Help: "Information about the Go environment.", Type: TypeGauge,
		Labels: []string{"version"}, Series: []Series{{Values: []string{runtime.Version()}, Value: 1}}})

	stats := debug.GCStats{PauseQuantiles: make([]time.Duration, 5)} // min, 25%, 50%, 75%, max
	debug.ReadGCStats(&stats)
	q := make([]float64, len(stats.PauseQuantiles))
	for i, p := range stats.PauseQuantiles {
		q[i] = p.Seconds()
	}
	add(Family{Name: "go_gc_duration_seconds", Help: "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.",
		Type: TypeSummary, Series: []Series{{Dist: &Dist{Count: uint64(stats.NumGC), Sum: stats.PauseTotal.Seconds(),
			Bounds: []float64{0, 0.25, 0.5, 0.75, 1}, Quantiles: q}}}})
	// Before the first collection LastGC is the Unix epoch: 0, as the library writes it.
	one("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", TypeGauge,
		float64(stats.LastGC.UnixNano())/1e9)

	samples := make([]metrics.Sample, len(goSamples))
	for i, n := range goSamples {
		samples[i].Name = n
	}
	metrics.Read(samples)
	value := make(map[string]uint64, len(samples))
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 { // a name this Go does not have reads as zero
			value[s.Name] = s.Value.Uint64()
		}
	}
	for _, s := range goSeries {
		var v uint64
		for _, n := range s.sum {
			v += value[n]
		}
		one(s.name, s.help, s.typ, float64(v))
	}
}
