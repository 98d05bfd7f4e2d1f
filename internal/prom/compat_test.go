package prom

import (
	"bytes"
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dropped are the client library's default go_* and process_* series this package does not
// write (see processCollector).
var dropped = []string{"process_network_receive_bytes_total", "process_network_transmit_bytes_total"}

// TestRuntimeSeriesMatchTheClientLibrary compares, on this process, the go_* and process_*
// families with those the client library's default Go and process collectors write: the same
// names, types, help texts and label names, but for the ones dropped. Dashboards built on the
// library's series keep working.
func TestRuntimeSeriesMatchTheClientLibrary(t *testing.T) {
	lib := prometheus.NewRegistry()
	lib.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	libFams, err := lib.Gather()
	require.NoError(t, err)

	r := NewRegistry()
	r.MustRegister(NewGoCollector(), NewProcessCollector())
	var text []byte
	for _, f := range r.Gather() {
		text = AppendText(text, f)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	ours, err := p.TextToMetricFamilies(bytes.NewReader(text))
	require.NoError(t, err)

	var libNames []string
	for _, lf := range libFams {
		name := lf.GetName()
		libNames = append(libNames, name)
		if slices.Contains(dropped, name) {
			assert.NotContains(t, ours, name)
			continue
		}
		of, ok := ours[name]
		if !assert.True(t, ok, "%s missing", name) {
			continue
		}
		assert.Equal(t, lf.GetType(), of.GetType(), name)
		assert.Equal(t, lf.GetHelp(), of.GetHelp(), name)
		var libLabels, ourLabels []string
		for _, l := range lf.GetMetric()[0].GetLabel() {
			libLabels = append(libLabels, l.GetName())
		}
		for _, l := range of.GetMetric()[0].GetLabel() {
			ourLabels = append(ourLabels, l.GetName())
		}
		assert.Equal(t, libLabels, ourLabels, name)
	}
	for _, name := range slices.Sorted(maps.Keys(ours)) {
		assert.Contains(t, libNames, name, "a series the library does not write")
	}
}
