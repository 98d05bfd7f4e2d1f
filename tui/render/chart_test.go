package render

import (
	"testing"

	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/assert"
)

func TestDownsample(t *testing.T) {
	cases := []struct {
		name   string
		values []float64
		width  int
		want   []float64
	}{
		{"fits as is", []float64{1, 2, 3}, 5, []float64{1, 2, 3}},
		{"buckets keep the peak", []float64{1, 9, 2, 2, 3, 1}, 3, []float64{9, 2, 3}},
		{"uneven buckets", []float64{1, 2, 3, 4, 5}, 2, []float64{2, 5}},
		{"no width", []float64{1}, 0, nil},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Downsample(c.values, c.width), c.name)
	}
}

func TestAreaChart(t *testing.T) {
	st := plainStyles()
	cases := []struct {
		name          string
		values        []float64
		top, marker   float64
		width, height int
		want          []string
	}{
		{
			name: "empty and full", values: []float64{0, 8}, top: 8, width: 2, height: 1,
			want: []string{" █"},
		},
		{
			name: "eighths in one row", values: []float64{1, 2, 3, 4, 5, 6, 7, 8}, top: 8, width: 8, height: 1,
			want: []string{"▁▂▃▄▅▆▇█"},
		},
		{
			name: "two rows split the height", values: []float64{2, 4, 6, 8}, top: 8, width: 4, height: 2,
			want: []string{"  ▄█", "▄███"},
		},
		{
			name: "newest on the right, blank before history", values: []float64{8}, top: 8, width: 3, height: 1,
			want: []string{"  █"},
		},
		{
			name: "older values past the width are dropped", values: []float64{8, 0, 8}, top: 8, width: 2, height: 1,
			want: []string{" █"},
		},
		{
			name: "a sliver is never nothing", values: []float64{0.001}, top: 8, width: 1, height: 2,
			want: []string{" ", "▁"},
		},
		{
			name: "marker where the area does not reach", values: []float64{1, 8, 0}, top: 8, marker: 6, width: 3, height: 4,
			want: []string{" █ ", "┄█┄", " █ ", "▄█ "},
		},
		{
			name: "over the top is clipped", values: []float64{20}, top: 8, width: 1, height: 2,
			want: []string{"█", "█"},
		},
		{
			name: "unknown top draws nothing", values: []float64{3}, top: 0, width: 2, height: 1,
			want: []string{"  "},
		},
	}
	for _, c := range cases {
		got := AreaChart(st, c.values, c.top, c.marker, c.width, c.height)
		assert.Equal(t, c.want, got, c.name)
		for _, l := range got {
			assert.Equal(t, c.width, ansi.StringWidth(l), c.name)
		}
	}
	assert.Nil(t, AreaChart(st, []float64{1}, 1, 0, 0, 3))
}

func TestSparkline(t *testing.T) {
	st := plainStyles()
	assert.Equal(t, "  ▁▅█", Sparkline(st, []float64{0, 4, 8}, 0, 8, 5))
	assert.Equal(t, "▅█", Sparkline(st, []float64{0, 4, 8}, 0, 8, 2), "the newest values are kept")
	assert.Equal(t, "▁▁", Sparkline(st, []float64{5, 5}, 5, 5, 2), "a flat series is a line")
	assert.Equal(t, "", Sparkline(st, []float64{1}, 0, 1, 0))
}
