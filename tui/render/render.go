// Package render holds the console's pure formatting functions: a memory bar, a size, a
// duration, a cell cut to width. They take values and return strings, so they are tested with
// tables and never touch the model.
package render

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/styles"
)

// Bytes is a size for people: "1.9 GiB", "512 MiB", "—" for unknown (0).
func Bytes(b int64) string {
	if b <= 0 {
		return "—"
	}
	return api.FormatBytes(b)
}

// Cut shortens s to width display cells, ending with "…" when cut.
func Cut(s string, width int) string {
	if width <= 0 {
		return ""
	}
	if ansi.StringWidth(s) <= width {
		return s
	}
	return ansi.Truncate(s, width, "…")
}

// CutMiddle shortens s to width display cells by taking out its middle: its first head cells
// and its end stay, so a long path keeps its scheme and its file name ("file://…/x.gguf").
func CutMiddle(s string, head, width int) string {
	w := ansi.StringWidth(s)
	if w <= width {
		return s
	}
	head = min(head, width-2) // room for "…" and one cell of the end
	if head <= 0 {
		return Cut(s, width)
	}
	return ansi.Truncate(s, head, "") + "…" + ansi.TruncateLeft(s, w-(width-head-1), "")
}

// CutLines cuts each line of s to width cells, as Cut does.
func CutLines(s string, width int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Cut(l, width)
	}
	return strings.Join(lines, "\n")
}

// WrapLines wraps s at spaces to width cells over at most most lines, the last ending with "…"
// when more was left: a detail line under a list keeps its end (a reason, a split's members)
// instead of being cut at one line.
func WrapLines(s string, width, most int) string {
	lines := strings.Split(ansi.Wrap(s, max(width, 20), " "), "\n")
	if len(lines) > most {
		lines = lines[:most]
		lines[most-1] = Cut(lines[most-1]+" …", width)
	}
	return strings.Join(lines, "\n")
}

// Pad cuts or pads s to exactly width cells.
func Pad(s string, width int) string {
	s = Cut(s, width)
	if w := ansi.StringWidth(s); w < width {
		s += strings.Repeat(" ", width-w)
	}
	return s
}

// PadLeft right-aligns s in width cells.
func PadLeft(s string, width int) string {
	s = Cut(s, width)
	if w := ansi.StringWidth(s); w < width {
		s = strings.Repeat(" ", width-w) + s
	}
	return s
}

// MemBar draws a host's memory in width cells over its total: committed (█), reserved by
// in-flight admissions (▓), budget left (░), and memory outside the budget (·). An unknown total
// draws a bar of "?".
func MemBar(st *styles.Styles, width int, committed, reserved, budget, total int64) string {
	if width <= 0 {
		return ""
	}
	if total <= 0 {
		return st.Muted.Render(strings.Repeat("?", width))
	}
	// Figures come from the mesh and may be absurd (committed far above total, sums that
	// overflowed): each is clamped to [0, total] and scaled in floating point, so no product
	// overflows and every count stays within the width.
	cells := func(v int64) int {
		if v <= 0 {
			return 0
		}
		v = min(v, total)
		n := int(math.Round(float64(v) / float64(total) * float64(width)))
		return max(min(n, width), 1) // something held is never drawn as nothing
	}
	used := min(cells(committed), width)
	res := min(cells(reserved), width-used)
	inBudget := min(cells(budget), width)
	free := max(inBudget-used-res, 0)
	outside := max(width-used-res-free, 0)
	return st.BarUsed.Render(strings.Repeat("█", used)) +
		st.BarReserve.Render(strings.Repeat("▓", res)) +
		st.BarFree.Render(strings.Repeat("░", free)) +
		st.BarOutside.Render(strings.Repeat("·", outside))
}

// Progress draws a 0..1 fraction as a bar of width cells with the percentage after it.
func Progress(st *styles.Styles, width int, frac float64) string {
	if math.IsNaN(frac) {
		frac = 0
	}
	frac = max(0, min(1, frac))
	pct := fmt.Sprintf(" %3d%%", int(frac*100+0.5))
	bw := width - len(pct)
	if bw < 1 {
		return strings.TrimSpace(pct)
	}
	n := int(frac*float64(bw) + 0.5)
	return st.BarUsed.Render(strings.Repeat("█", n)) + st.Muted.Render(strings.Repeat("░", bw-n)) + pct
}

// Ago says how long ago t was, briefly: "now", "42s", "5m", "3h", "2d"; "—" for the zero time.
func Ago(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	switch {
	case d < 2*time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// Speed formats tokens/s ("8.2 tok/s"), "—" when not measured.
func Speed(tps float64) string {
	if !(tps > 0) || math.IsInf(tps, 1) {
		return "—"
	}
	if tps >= 100 {
		return fmt.Sprintf("%.0f tok/s", tps)
	}
	return fmt.Sprintf("%.1f tok/s", tps)
}

// Millis formats a latency in milliseconds ("320 ms", "1.47 s"), "—" when not measured.
func Millis(ms float64) string {
	if !(ms > 0) || math.IsInf(ms, 1) {
		return "—"
	}
	if ms >= 1000 {
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// Sum adds sizes without overflowing: a sum past the largest int64 stays there, and a negative
// figure (absurd, from some member) counts as nothing.
func Sum(vs ...int64) int64 {
	var t int64
	for _, v := range vs {
		if v > 0 {
			if t > math.MaxInt64-v {
				return math.MaxInt64
			}
			t += v
		}
	}
	return t
}

// Column is one column of a table: a title, a width, and right alignment for numbers.
type Column struct {
	Title string
	Width int
	Right bool
}

// Row lays out cells under columns, one space apart.
func Row(cols []Column, cells []string) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		cell := ""
		if i < len(cells) {
			cell = cells[i]
		}
		if c.Right {
			b.WriteString(PadLeft(cell, c.Width))
		} else {
			b.WriteString(Pad(cell, c.Width))
		}
	}
	return b.String()
}

// Head lays out the column titles.
func Head(st *styles.Styles, cols []Column) string {
	titles := make([]string, len(cols))
	for i, c := range cols {
		titles[i] = c.Title
	}
	return st.TableHead.Render(Row(cols, titles))
}

// Fit gives flexible columns (Width 0) an equal share of what is left of total after the fixed
// ones, at least min each, and returns the columns with widths set.
func Fit(cols []Column, total, minFlex int) []Column {
	out := append([]Column(nil), cols...)
	fixed, flex := 0, 0
	for _, c := range out {
		if c.Width == 0 {
			flex++
		} else {
			fixed += c.Width
		}
	}
	gaps := len(out) - 1
	if flex == 0 {
		return out
	}
	share := max((total-fixed-gaps)/flex, minFlex)
	for i := range out {
		if out[i].Width == 0 {
			out[i].Width = share
		}
	}
	return out
}

// Place puts content in a box of exactly width × height, cutting what does not fit.
func Place(content string, width, height int) string {
	lines := strings.Split(content, "\n")
	if len(lines) > height {
		lines = lines[:height]
	}
	for i, l := range lines {
		lines[i] = Pad(l, width)
	}
	for len(lines) < height {
		lines = append(lines, strings.Repeat(" ", width))
	}
	return lipgloss.JoinVertical(lipgloss.Left, lines...)
}

// Spec is a column that sizes itself to its content and the terminal.
type Spec struct {
	Title    string
	Want     int // the width its content asks for (the title's at least)
	Min      int // the least it may shrink to, its cells cut with "…"
	Max      int // the most it grows to when there is room to spare (0: Want)
	Priority int // higher stays longer and shrinks later
	Right    bool
}

// Layout fits columns in total cells, one space apart. Each starts at the width it wants;
// while the table is too wide, the lowest-priority column shrinks, down to its minimum, and
// if that is not enough it goes, before the next one is touched: the telling columns stay
// whole as long as something less telling is on screen. Room to spare grows columns up to
// their Max, highest priority first. It returns the columns kept, in their order, and for
// each its index in specs. One column is always kept.
func Layout(specs []Spec, total int) ([]Column, []int) {
	width := make([]int, len(specs))
	gone := make([]bool, len(specs))
	need := len(specs) - 1
	for i, s := range specs {
		width[i] = max(s.Want, ansi.StringWidth(s.Title), 1)
		need += width[i]
	}
	order := make([]int, len(specs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return specs[order[a]].Priority < specs[order[b]].Priority })
	for k, i := range order {
		if need <= total {
			break
		}
		d := min(width[i]-max(min(specs[i].Min, width[i]), 1), need-total)
		width[i] -= d
		need -= d
		if need > total && k < len(order)-1 {
			gone[i] = true
			need -= width[i] + 1
		}
	}
	for k := len(order) - 1; k >= 0; k-- {
		i := order[k]
		if grow := min(specs[i].Max-width[i], total-need); !gone[i] && grow > 0 {
			width[i] += grow
			need += grow
		}
	}
	var cols []Column
	var idx []int
	for i, s := range specs {
		if !gone[i] {
			cols = append(cols, Column{Title: s.Title, Width: width[i], Right: s.Right})
			idx = append(idx, i)
		}
	}
	return cols, idx
}

// Col is one column of a table of rows of type T, as a value: its title, how it sizes and the
// cell it draws for a row in a width. Tables are lists of these rather than titles matched in
// a switch, so a column is added, moved or dropped in one place.
type Col[T any] struct {
	Title    string
	Min      int // the least it shrinks to on a narrow terminal
	Max      int // the most it grows to with room to spare; 0: no more than its widest cell
	Fixed    int // the width it wants when that does not come from its cells (a bar)
	Priority int // higher stays longer and shrinks later
	Right    bool
	Cell     func(row T, width int) string
	// Want is the width a row's cell asks for when the cell drawn wide would not say it (a
	// progress bar fills any width); nil measures the cell.
	Want func(row T) int
}

// LayoutRows sizes cols for rows in total cells (see Layout): each column wants its widest
// cell, capped at its Max, or its Fixed width. It returns the columns kept with their widths,
// and the kept Cols in the same order.
func LayoutRows[T any](cols []Col[T], rows []T, total int) ([]Column, []Col[T]) {
	specs := make([]Spec, len(cols))
	for i, c := range cols {
		want, grow := c.Fixed, c.Max
		if want == 0 {
			grow = 0 // a content column never pads itself past its widest cell
			for _, r := range rows {
				if c.Want != nil {
					want = max(want, c.Want(r))
				} else {
					want = max(want, ansi.StringWidth(c.Cell(r, 1<<10)))
				}
			}
			if c.Max > 0 {
				want = min(want, c.Max)
			}
		}
		specs[i] = Spec{Title: c.Title, Want: want, Min: c.Min, Max: grow, Priority: c.Priority, Right: c.Right}
	}
	laid, idx := Layout(specs, total)
	kept := make([]Col[T], len(idx))
	for k, i := range idx {
		kept[k] = cols[i]
	}
	return laid, kept
}

// Cells draws a row's cells under the columns LayoutRows kept.
func Cells[T any](laid []Column, kept []Col[T], row T) []string {
	out := make([]string, len(kept))
	for i, c := range kept {
		out[i] = c.Cell(row, laid[i].Width)
	}
	return out
}
