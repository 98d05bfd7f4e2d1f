package render

import (
	"math"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// The render functions draw what other hosts report, which may be absurd: they must be total
// (never panic) and keep their promised widths for any input.

func FuzzMemBar(f *testing.F) {
	f.Add(10, int64(3*gib), int64(0), int64(6*gib), int64(10*gib))
	f.Add(16, int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(1))
	f.Add(16, int64(math.MinInt64), int64(-1), int64(math.MaxInt64), int64(math.MaxInt64))
	st := plainStyles()
	f.Fuzz(func(t *testing.T, width int, committed, reserved, budget, total int64) {
		width = width % 500
		got := MemBar(st, width, committed, reserved, budget, total)
		if want := max(width, 0); ansi.StringWidth(got) != want {
			t.Fatalf("MemBar(%d, %d, %d, %d, %d) is %d cells wide, want %d", width, committed, reserved, budget, total, ansi.StringWidth(got), want)
		}
	})
}

func FuzzNumbers(f *testing.F) {
	f.Add(0.5, 12.0, int64(1<<30), 20)
	f.Add(math.NaN(), math.Inf(1), int64(math.MinInt64), 3)
	f.Add(math.Inf(-1), -1e308, int64(math.MaxInt64), -5)
	st := plainStyles()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, frac, rate float64, size int64, width int) {
		width = width % 300
		_ = Progress(st, width, frac)
		_ = Speed(rate)
		_ = Millis(rate)
		_ = Bytes(size)
		_ = Sum(size, size, math.MaxInt64)
		_ = Ago(now, time.Unix(0, size))
		vals := []float64{frac, rate, float64(size), math.NaN(), math.Inf(1)}
		if got := Sparkline(st, vals, frac, rate, width); width > 0 && ansi.StringWidth(got) != width {
			t.Fatalf("Sparkline is %d cells wide, want %d", ansi.StringWidth(got), width)
		}
		h := max(width%12, 0)
		rows := AreaChart(st, Downsample(vals, max(width, 0)), rate, frac, width, h)
		for _, r := range rows {
			if ansi.StringWidth(r) != width {
				t.Fatalf("AreaChart row is %d cells wide, want %d", ansi.StringWidth(r), width)
			}
		}
	})
}
