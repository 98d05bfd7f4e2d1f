package prom

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The gateway's per-chat observations: a histogram child and a counter child kept for a
// (model, route) pair, observed with no lookup. Each against the client library's equivalent,
// alone and from every CPU at once.

var ttftBounds = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func BenchmarkHistogramObserve(b *testing.B) {
	h := NewHistogramVec("bench_seconds", "B.", ttftBounds, "model").With("m")
	b.Run("prom", func(b *testing.B) {
		for i := range b.N {
			h.Observe(float64(i%1000) / 100)
		}
	})
	b.Run("prom/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				h.Observe(float64(i%1000) / 100)
			}
		})
	})
	lib := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bench_seconds", Buckets: ttftBounds}, []string{"model"}).WithLabelValues("m")
	b.Run("client_golang", func(b *testing.B) {
		for i := range b.N {
			lib.Observe(float64(i%1000) / 100)
		}
	})
	b.Run("client_golang/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				lib.Observe(float64(i%1000) / 100)
			}
		})
	})
}

func BenchmarkCounterAdd(b *testing.B) {
	c := NewCounterVec("bench_total", "B.", "model").With("m")
	b.Run("prom/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Add(17)
			}
		})
	})
	lib := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_total"}, []string{"model"}).WithLabelValues("m")
	b.Run("client_golang/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lib.Add(17)
			}
		})
	})
}

// BenchmarkWith is a lookup by label values, as the gateway's error counter does per error.
func BenchmarkWith(b *testing.B) {
	v := NewCounterVec("bench_total", "B.", "code", "status")
	b.Run("prom", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			v.With("engine_unavailable", "503").Inc()
		}
	})
	lib := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_total"}, []string{"code", "status"})
	b.Run("client_golang", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			lib.WithLabelValues("engine_unavailable", "503").Inc()
		}
	})
}
