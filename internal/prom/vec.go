package prom

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Counter counts up. Every counter the agent keeps counts whole things (requests, bytes,
// tokens), so it is an integer: an atomic add, where a float counter needs a compare-and-swap
// loop that spins under contention.
type Counter struct{ n atomic.Uint64 }

// Inc adds one.
func (c *Counter) Inc() { c.n.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.n.Add(n) }

// Gauge is a whole number that goes up and down.
type Gauge struct{ n atomic.Int64 }

// Inc adds one.
func (g *Gauge) Inc() { g.n.Add(1) }

// Dec takes one away.
func (g *Gauge) Dec() { g.n.Add(-1) }

// Histogram counts observations into buckets with fixed upper bounds.
type Histogram struct {
	bounds []float64       // ascending, shared by a vector's children
	counts []atomic.Uint64 // per bucket, not cumulative; the last is the +Inf bucket
	sum    atomic.Uint64   // float64 bits
}

// Observe records one observation.
func (h *Histogram) Observe(v float64) {
	// A linear scan: the agent's histograms have at most 15 buckets, where it beats a binary
	// search. A NaN lands in the +Inf bucket.
	i := 0
	for i < len(h.bounds) && !(v <= h.bounds[i]) {
		i++
	}
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// dist reads the histogram. The count is the buckets' total, so the buckets are cumulative up
// to _count whatever runs meanwhile; _sum is read last and may hold an observation the buckets
// do not, which no rate over a scrape interval can notice.
func (h *Histogram) dist() *Dist {
	d := &Dist{Bounds: h.bounds, Cumulative: make([]uint64, len(h.bounds))}
	for i := range h.counts {
		d.Count += h.counts[i].Load()
		if i < len(h.bounds) {
			d.Cumulative[i] = d.Count
		}
	}
	d.Sum = math.Float64frombits(h.sum.Load())
	return d
}

// vec is a family of children of one kind, one per label-value set, made on first use.
type vec[T any] struct {
	name, help string
	labels     []string
	newChild   func() *T

	mu       sync.RWMutex
	children map[string]*child[T] // by key(values)
}

type child[T any] struct {
	values []string
	m      *T
}

func newVec[T any](name, help string, labels []string, reserved string, newChild func() *T) vec[T] {
	if !validMetricName(name) {
		panic(fmt.Sprintf("prom: invalid metric name %q", name))
	}
	for i, l := range labels {
		if !validLabelName(l) || l == reserved || slices.Contains(labels[:i], l) {
			panic(fmt.Sprintf("prom: %s: invalid or repeated label name %q", name, l))
		}
	}
	return vec[T]{name: name, help: help, labels: slices.Clone(labels), newChild: newChild, children: map[string]*child[T]{}}
}

// with returns the child for values, making it the first time. Callers on a hot path keep the
// child rather than calling this per observation.
func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("prom: %s takes %d label values, got %d", v.name, len(v.labels), len(values)))
	}
	var buf [128]byte
	k := key(buf[:0], values)
	v.mu.RLock()
	c := v.children[string(k)] // no allocation for the lookup
	v.mu.RUnlock()
	if c != nil {
		return c.m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c := v.children[string(k)]; c != nil {
		return c.m
	}
	c = &child[T]{values: slices.Clone(values), m: v.newChild()}
	v.children[string(k)] = c
	return c.m
}

// key encodes label values unambiguously: each is prefixed with its length, so no value, remote
// or not, can make two label sets share a child.
func key(b []byte, values []string) []byte {
	for _, s := range values {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func (v *vec[T]) family(typ Type, read func(*T, *Series)) Family {
	v.mu.RLock()
	defer v.mu.RUnlock()
	f := Family{Name: v.name, Help: v.help, Type: typ, Labels: v.labels, Series: make([]Series, 0, len(v.children))}
	for _, c := range v.children {
		s := Series{Values: c.values}
		read(c.m, &s)
		f.Series = append(f.Series, s)
	}
	return f
}

// CounterVec is a family of counters.
type CounterVec struct{ v vec[Counter] }

// NewCounterVec returns a family of counters; its name must end in _total.
func NewCounterVec(name, help string, labels ...string) *CounterVec {
	if !strings.HasSuffix(name, "_total") {
		panic(fmt.Sprintf("prom: counter %s does not end in _total", name))
	}
	return &CounterVec{newVec(name, help, labels, "", func() *Counter { return new(Counter) })}
}

// With returns the counter for the label values, in the order of the vector's label names.
func (c *CounterVec) With(values ...string) *Counter { return c.v.with(values) }

// Names implements Collector.
func (c *CounterVec) Names() []string { return []string{c.v.name} }

// Collect implements Collector.
func (c *CounterVec) Collect(add func(Family)) {
	add(c.v.family(TypeCounter, func(m *Counter, s *Series) { s.Value = float64(m.n.Load()) }))
}

// GaugeVec is a family of gauges.
type GaugeVec struct{ v vec[Gauge] }

// NewGaugeVec returns a family of gauges.
func NewGaugeVec(name, help string, labels ...string) *GaugeVec {
	return &GaugeVec{newVec(name, help, labels, "", func() *Gauge { return new(Gauge) })}
}

// With returns the gauge for the label values.
func (g *GaugeVec) With(values ...string) *Gauge { return g.v.with(values) }

// Names implements Collector.
func (g *GaugeVec) Names() []string { return []string{g.v.name} }

// Collect implements Collector.
func (g *GaugeVec) Collect(add func(Family)) {
	add(g.v.family(TypeGauge, func(m *Gauge, s *Series) { s.Value = float64(m.n.Load()) }))
}

// HistogramVec is a family of histograms sharing bucket bounds.
type HistogramVec struct{ v vec[Histogram] }

// NewHistogramVec returns a family of histograms with the given bucket upper bounds (finite,
// strictly ascending; the +Inf bucket is implicit).
func NewHistogramVec(name, help string, bounds []float64, labels ...string) *HistogramVec {
	for i, b := range bounds {
		if math.IsInf(b, 0) || math.IsNaN(b) || i > 0 && b <= bounds[i-1] {
			panic(fmt.Sprintf("prom: %s: bucket bounds must be finite and strictly ascending: %v", name, bounds))
		}
	}
	bounds = slices.Clone(bounds)
	return &HistogramVec{newVec(name, help, labels, "le", func() *Histogram {
		return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
	})}
}

// With returns the histogram for the label values.
func (h *HistogramVec) With(values ...string) *Histogram { return h.v.with(values) }

// Names implements Collector.
func (h *HistogramVec) Names() []string { return []string{h.v.name} }

// Collect implements Collector.
func (h *HistogramVec) Collect(add func(Family)) {
	add(h.v.family(TypeHistogram, func(m *Histogram, s *Series) { s.Dist = m.dist() }))
}
