package memberlist

import (
	"time"

	"github.com/hashicorp/go-metrics"
)

// metricSink sends a member's metrics to the sink its config names (Config.MetricSink,
// NetTransportConfig.MetricSink) or, when it names none, to go-metrics' process-wide sink, as
// upstream always does. (llmkube patch, see LLMKUBE.md: a process running several members,
// each counting its own, had to route every metric through the one global sink by a label.)
type metricSink struct{ sink metrics.MetricSink }

func (s metricSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	if s.sink == nil {
		metrics.IncrCounterWithLabels(key, val, labels)
		return
	}
	s.sink.IncrCounterWithLabels(key, val, labels)
}

func (s metricSink) AddSampleWithLabels(key []string, val float32, labels []metrics.Label) {
	if s.sink == nil {
		metrics.AddSampleWithLabels(key, val, labels)
		return
	}
	s.sink.AddSampleWithLabels(key, val, labels)
}

func (s metricSink) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	if s.sink == nil {
		metrics.SetGaugeWithLabels(key, val, labels)
		return
	}
	s.sink.SetGaugeWithLabels(key, val, labels)
}

// MeasureSinceWithLabels adds the time since start as a sample in milliseconds, go-metrics'
// default timer granularity.
func (s metricSink) MeasureSinceWithLabels(key []string, start time.Time, labels []metrics.Label) {
	if s.sink == nil {
		metrics.MeasureSinceWithLabels(key, start, labels)
		return
	}
	s.sink.AddSampleWithLabels(key, float32(time.Since(start).Nanoseconds())/float32(time.Millisecond), labels)
}
