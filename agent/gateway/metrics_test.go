package gateway

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkServed is what every answered chat costs the metrics: its (model, route) series
// found once, a request counted, TTFT and duration observed, prompt and completion tokens
// added; from every CPU at once, as concurrent chats do it.
func BenchmarkServed(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.served("llama3.2:1b", routeLocal, 40*time.Millisecond, 900*time.Millisecond, 120, 256)
		}
	})
}
