package render

import (
	"math"
	"strings"

	"github.com/llmkube/mesh/tui/styles"
)

// eighths are the block glyphs from empty to full, one eighth of a cell apart.
var eighths = []rune(" ▁▂▃▄▅▆▇█")

// Downsample fits values into width columns: the newest values are kept as they are when they
// fit, otherwise consecutive values are grouped into width buckets of the maximum (a memory
// peak must not vanish because the chart is narrow). The result has at most width values.
func Downsample(values []float64, width int) []float64 {
	if width <= 0 {
		return nil
	}
	if len(values) <= width {
		return values
	}
	out := make([]float64, width)
	for i := range out {
		lo := i * len(values) / width
		hi := (i + 1) * len(values) / width
		m := values[lo]
		for _, v := range values[lo+1 : hi] {
			m = max(m, v)
		}
		out[i] = m
	}
	return out
}

// level is v on a scale of steps over [0, top], rounded, clamped; a positive value is never 0.
func level(v, top float64, steps int) int {
	if !(top > 0) || !(v > 0) || steps <= 0 {
		return 0 // NaN fails every comparison
	}
	f := math.Round(v / top * float64(steps))
	if !(f < float64(steps)) { // also +Inf and NaN (Inf/Inf): converting them to int is undefined
		return steps
	}
	return max(int(f), 1)
}

// AreaChart draws values as a filled area of width × height cells over [0, top], oldest on the
// left and the newest in the rightmost column (values should already fit: see Downsample);
// columns without a value stay blank. A marker above zero (a budget) is drawn as a dotted line
// "┄" where the area does not cover it. It returns height lines of exactly width cells.
func AreaChart(st *styles.Styles, values []float64, top, marker float64, width, height int) []string {
	if width <= 0 || height <= 0 {
		return nil
	}
	if len(values) > width {
		values = values[len(values)-width:]
	}
	pad := width - len(values)
	markRow := -1 // row index from the top
	if marker > 0 && top > 0 && marker <= top {
		markRow = height - level(marker, top, height)
	}
	lines := make([]string, height)
	var area, dots strings.Builder
	for row := range height {
		var b strings.Builder
		floor := (height - 1 - row) * 8 // eighths below this row
		// Runs of one kind are styled together: one escape sequence per run, not per cell.
		flush := func() {
			if area.Len() > 0 {
				b.WriteString(st.BarUsed.Render(area.String()))
				area.Reset()
			}
			if dots.Len() > 0 {
				b.WriteString(st.Muted.Render(dots.String()))
				dots.Reset()
			}
		}
		for col := range width {
			fill := 0
			if col >= pad {
				fill = max(0, min(8, level(values[col-pad], top, height*8)-floor))
			}
			switch {
			case fill > 0:
				if dots.Len() > 0 {
					flush()
				}
				area.WriteRune(eighths[fill])
			case row == markRow:
				if area.Len() > 0 {
					flush()
				}
				dots.WriteRune('┄')
			default:
				flush()
				b.WriteByte(' ')
			}
		}
		flush()
		lines[row] = b.String()
	}
	return lines
}

// Sparkline draws values in one row of width cells over [lo, hi], newest on the right, blank
// where there is no value yet.
func Sparkline(st *styles.Styles, values []float64, lo, hi float64, width int) string {
	if width <= 0 {
		return ""
	}
	if len(values) > width {
		values = values[len(values)-width:]
	}
	var b strings.Builder
	b.WriteString(strings.Repeat(" ", width-len(values)))
	var run strings.Builder
	for _, v := range values {
		// The lowest value still draws the lowest bar: a sparkline of zeros is a line, not nothing.
		n := 1 + level(v-lo, hi-lo, 7)
		run.WriteRune(eighths[min(n, 8)])
	}
	b.WriteString(st.BarFree.Render(run.String()))
	return b.String()
}
