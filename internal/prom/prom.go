// Package prom serves metrics in the Prometheus text exposition format 0.0.4: counters,
// gauges and histograms, each with a fixed set of label names, in registries that are plain
// values (never a global one), plus the Go runtime's and the process's standard series.
//
// It is the agent's own because the client library pulled protobuf, procfs and their friends
// into the agent's binary (2.4 MB of text out of 18.4 MB), and the pages of an idle agent's
// binary are most of its resident memory. Only what the agent uses is here: no summaries of
// its own (the Go collector's GC pause summary is written from the runtime's quantiles), no
// protobuf or OpenMetrics negotiation, no compression.
package prom

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// ContentType is the media type of the text exposition format written here.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Type is a family's metric type, as its TYPE line says it.
type Type string

// The types a family can have.
const (
	TypeCounter   Type = "counter"
	TypeGauge     Type = "gauge"
	TypeHistogram Type = "histogram"
	TypeSummary   Type = "summary"
)

// Family is one metric name's series at one scrape.
type Family struct {
	Name, Help string
	Type       Type
	Labels     []string // label names, in the order each Series gives its values
	Series     []Series
}

// Series is one label set's sample.
type Series struct {
	Values []string // label values, one per Family.Labels
	Value  float64  // counter or gauge
	Dist   *Dist    // histogram or summary
}

// Dist is a histogram's or a summary's sample.
type Dist struct {
	Count uint64
	Sum   float64
	// Bounds are a histogram's bucket upper bounds, ascending (the +Inf bucket is Count and is
	// not listed), or a summary's quantiles.
	Bounds []float64
	// Cumulative is, for a histogram, how many observations were <= each bound.
	Cumulative []uint64
	// Quantiles is, for a summary, each quantile's value.
	Quantiles []float64
}

// Collector adds families at scrape time.
type Collector interface {
	// Names lists every family name Collect may add, so a registry can refuse a second owner of
	// a name; a family Collect adds under another name is not written.
	Names() []string
	// Collect adds the collector's families; it is called concurrently by concurrent scrapes.
	Collect(add func(Family))
}

// ErrAlreadyRegistered is returned (wrapped) by Register for a name another collector owns.
var ErrAlreadyRegistered = errors.New("metric already registered")

// Registerer takes collectors: a Registry, or anything that forwards to one.
type Registerer interface {
	Register(Collector) error
}

// Registry is a set of collectors with distinct family names, served over HTTP.
type Registry struct {
	mu         sync.Mutex
	owner      map[string]int // family name -> index in collectors
	collectors []Collector
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{owner: map[string]int{}} }

// Register adds c, unless one of its names is invalid or already registered.
func (r *Registry) Register(c Collector) error {
	names := c.Names()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, n := range names {
		if !validMetricName(n) {
			return fmt.Errorf("prom: invalid metric name %q", n)
		}
		if _, ok := r.owner[n]; ok || slices.Contains(names[:i], n) {
			return fmt.Errorf("prom: %s: %w", n, ErrAlreadyRegistered)
		}
	}
	for _, n := range names {
		r.owner[n] = len(r.collectors)
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers each collector and panics on an error: for collectors built into the
// program, whose names are known to be valid and distinct.
func (r *Registry) MustRegister(cs ...Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Gather collects every family with at least one series, sorted by name, with its label names
// sorted and its series sorted by their label values in that order: the order the client
// library writes, which some readers compare label lists in.
func (r *Registry) Gather() []Family {
	r.mu.Lock()
	cs, owner := slices.Clone(r.collectors), maps.Clone(r.owner)
	r.mu.Unlock()
	var fams []Family
	seen := map[string]bool{}
	for i, c := range cs {
		c.Collect(func(f Family) {
			o, owned := owner[f.Name]
			owned = owned && o == i
			// A family outside the collector's names, or added twice, would make the exposition
			// invalid for every scraper: it is left out rather than breaking the whole scrape.
			if !owned || seen[f.Name] || len(f.Series) == 0 {
				return
			}
			seen[f.Name] = true
			fams = append(fams, sortLabels(f))
		})
	}
	slices.SortFunc(fams, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return fams
}

// sortLabels returns f with its label names sorted, each series' values to match, and its
// series sorted by those values; f's slices are left as they were.
func sortLabels(f Family) Family {
	series := slices.Clone(f.Series)
	if !slices.IsSorted(f.Labels) {
		order := make([]int, len(f.Labels))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(f.Labels[a], f.Labels[b]) })
		labels := make([]string, len(order))
		for i, o := range order {
			labels[i] = f.Labels[o]
		}
		f.Labels = labels
		for i, s := range series {
			values := make([]string, len(order))
			for j, o := range order {
				values[j] = s.Values[o]
			}
			series[i].Values = values
		}
	}
	slices.SortFunc(series, func(a, b Series) int { return slices.Compare(a.Values, b.Values) })
	f.Series = series
	return f
}

// ServeHTTP writes the registry in the text format.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	var b []byte
	for _, f := range r.Gather() {
		b = AppendText(b, f)
	}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b) // a scraper that left has nothing to be told
}

// AppendText appends f in the text format: its HELP and TYPE lines, then one line per sample
// (a histogram's cumulative buckets with +Inf last, then _sum and _count).
func AppendText(b []byte, f Family) []byte {
	b = append(b, "# HELP "...)
	b = append(b, f.Name...)
	b = append(b, ' ')
	b = appendEscaped(b, f.Help, false)
	b = append(b, "\n# TYPE "...)
	b = append(b, f.Name...)
	b = append(b, ' ')
	b = append(b, f.Type...)
	b = append(b, '\n')
	for _, s := range f.Series {
		switch {
		case s.Dist != nil && f.Type == TypeHistogram:
			d := s.Dist
			for i, le := range d.Bounds {
				b = appendSample(b, f.Name, "_bucket", f.Labels, s.Values, "le", le)
				b = strconv.AppendUint(b, d.Cumulative[i], 10)
				b = append(b, '\n')
			}
			b = appendSample(b, f.Name, "_bucket", f.Labels, s.Values, "le", math.Inf(1))
			b = strconv.AppendUint(b, d.Count, 10)
			b = append(b, '\n')
			b = appendSums(b, f, s)
		case s.Dist != nil && f.Type == TypeSummary:
			for i, q := range s.Dist.Bounds {
				b = appendSample(b, f.Name, "", f.Labels, s.Values, "quantile", q)
				b = appendFloat(b, s.Dist.Quantiles[i])
				b = append(b, '\n')
			}
			b = appendSums(b, f, s)
		default:
			b = appendSample(b, f.Name, "", f.Labels, s.Values, "", 0)
			b = appendFloat(b, s.Value)
			b = append(b, '\n')
		}
	}
	return b
}

func appendSums(b []byte, f Family, s Series) []byte {
	b = appendSample(b, f.Name, "_sum", f.Labels, s.Values, "", 0)
	b = appendFloat(b, s.Dist.Sum)
	b = append(b, '\n')
	b = appendSample(b, f.Name, "_count", f.Labels, s.Values, "", 0)
	b = strconv.AppendUint(b, s.Dist.Count, 10)
	return append(b, '\n')
}

// appendSample appends a sample line up to its value: name, suffix, the labels and, when
// extra is set, one more label (le, quantile) with a number for its value.
func appendSample(b []byte, name, suffix string, labels, values []string, extra string, extraValue float64) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	if len(labels) > 0 || extra != "" {
		b = append(b, '{')
		for i, l := range labels {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, l...)
			b = append(b, `="`...)
			b = appendEscaped(b, values[i], true)
			b = append(b, '"')
		}
		if extra != "" {
			if len(labels) > 0 {
				b = append(b, ',')
			}
			b = append(b, extra...)
			b = append(b, `="`...)
			b = appendFloat(b, extraValue)
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	return append(b, ' ')
}

// appendEscaped escapes backslash and newline (and, in a label value, the double quote) as
// the format wants. Label values come from remote peers and engines: invalid UTF-8 is
// replaced, since a scraper refuses the whole exposition over it.
func appendEscaped(b []byte, s string, quote bool) []byte {
	for _, r := range s {
		switch {
		case r == '\\':
			b = append(b, `\\`...)
		case r == '\n':
			b = append(b, `\n`...)
		case r == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = utf8.AppendRune(b, r) // an invalid byte arrives as utf8.RuneError
		}
	}
	return b
}

func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func validMetricName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r == ':' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9') {
			return false
		}
	}
	return s != ""
}

func validLabelName(s string) bool {
	return validMetricName(s) && !strings.Contains(s, ":") && !strings.HasPrefix(s, "__")
}
