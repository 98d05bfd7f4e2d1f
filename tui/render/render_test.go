package render

import (
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/tui/styles"
)

func plainStyles() *styles.Styles {
	r := lipgloss.NewRenderer(nil)
	r.SetColorProfile(termenv.Ascii)
	return styles.New(r)
}

const gib = int64(1) << 30

func TestMemBar(t *testing.T) {
	st := plainStyles()
	cases := []struct {
		name                               string
		width                              int
		committed, reserved, budget, total int64
		want                               string
	}{
		{"empty host", 10, 0, 0, 6 * gib, 10 * gib, "░░░░░░····"},
		{"half used", 10, 3 * gib, 0, 6 * gib, 10 * gib, "███░░░····"},
		{"reserved shows", 10, 2 * gib, 1 * gib, 6 * gib, 10 * gib, "██▓░░░····"},
		{"a sliver is never nothing", 10, 1, 0, 6 * gib, 10 * gib, "█░░░░░····"},
		{"over budget fills", 10, 9 * gib, 0, 6 * gib, 10 * gib, "█████████·"},
		{"everything", 4, 10 * gib, 10 * gib, 10 * gib, 10 * gib, "████"},
		{"unknown total", 5, 1, 1, 1, 0, "?????"},
		{"no width", 0, 1, 1, 1, 1, ""},
	}
	for _, c := range cases {
		got := MemBar(st, c.width, c.committed, c.reserved, c.budget, c.total)
		assert.Equal(t, c.want, got, c.name)
		assert.Equal(t, c.width, ansi.StringWidth(got), c.name)
	}
}

func TestFormatting(t *testing.T) {
	assert.Equal(t, "—", Bytes(0))
	assert.Equal(t, "1.5 GiB", Bytes(3*gib/2))
	assert.Equal(t, "—", Speed(0))
	assert.Equal(t, "8.2 tok/s", Speed(8.2))
	assert.Equal(t, "412 tok/s", Speed(412.4))
	assert.Equal(t, "—", Millis(0))
	assert.Equal(t, "320 ms", Millis(320))
	assert.Equal(t, "1.47 s", Millis(1470))

	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{0: "now", 42 * time.Second: "42s", 5 * time.Minute: "5m", 3 * time.Hour: "3h", 72 * time.Hour: "3d"} {
		assert.Equal(t, want, Ago(now, now.Add(-d)))
	}
	assert.Equal(t, "—", Ago(now, time.Time{}))
}

func TestCutPadRow(t *testing.T) {
	assert.Equal(t, "raspb…", Cut("raspberrypi", 6))
	assert.Equal(t, "pi    ", Pad("pi", 6))
	assert.Equal(t, "    pi", PadLeft("pi", 6))
	assert.Equal(t, "", Cut("x", 0))
	assert.Equal(t, "file://…/gguf/tiny.gguf", CutMiddle("file:///tmp/llmkube-localmesh-1/mac-mini/gguf/tiny.gguf", 7, 23))
	assert.Equal(t, "file:///x.gguf", CutMiddle("file:///x.gguf", 7, 23), "what fits stays whole")
	assert.Equal(t, "f…", CutMiddle("file:///x.gguf", 7, 2), "no room for the tail: cut as Cut does")
	cols := []Column{{Title: "A", Width: 3}, {Title: "B", Width: 4, Right: true}}
	assert.Equal(t, "ab…    1", Row(cols, []string{"abcd", "1"}))
	fit := Fit([]Column{{Width: 10}, {}, {}}, 40, 5)
	assert.Equal(t, []int{10, 14, 14}, []int{fit[0].Width, fit[1].Width, fit[2].Width})
	fit = Fit([]Column{{Width: 30}, {}}, 20, 5)
	assert.Equal(t, 5, fit[1].Width, "flexible columns keep their minimum")
}

func TestProgress(t *testing.T) {
	st := plainStyles()
	assert.Equal(t, "█████░░░░░  50%", Progress(st, 15, 0.5))
	assert.Equal(t, "░░░░░░░░░░   0%", Progress(st, 15, -1))
	assert.Equal(t, "100%", Progress(st, 4, 1))
}

func TestPlace(t *testing.T) {
	got := Place("ab\ncdef\nxyz", 3, 2)
	assert.Equal(t, "ab \ncd…", got)
}

func TestLayout(t *testing.T) {
	specs := []Spec{
		{Title: "NAME", Want: 12, Min: 6, Priority: 90},
		{Title: "STATE", Want: 7, Min: 7, Priority: 80},
		{Title: "CHIP", Want: 20, Min: 8, Priority: 10},
		{Title: "MEMORY", Want: 16, Min: 8, Max: 24, Priority: 70},
		{Title: "FREE", Want: 8, Min: 8, Priority: 60, Right: true},
	}
	widths := func(total int) (map[string]int, int) {
		cols, idx := Layout(specs, total)
		out := map[string]int{}
		sum := len(cols) - 1
		for k, c := range cols {
			assert.Equal(t, specs[idx[k]].Title, c.Title)
			out[c.Title] = c.Width
			sum += c.Width
		}
		return out, sum
	}
	w, sum := widths(80)
	assert.Equal(t, map[string]int{"NAME": 12, "STATE": 7, "CHIP": 20, "MEMORY": 24, "FREE": 8}, w, "room to spare grows the memory bar")
	assert.Equal(t, 75, sum)

	w, _ = widths(60)
	assert.Equal(t, map[string]int{"NAME": 12, "STATE": 7, "CHIP": 13, "MEMORY": 16, "FREE": 8}, w, "the least telling column shrinks first")

	w, sum = widths(48)
	assert.Equal(t, map[string]int{"NAME": 12, "STATE": 7, "MEMORY": 18, "FREE": 8}, w, "then it goes, names stay whole; what it frees grows the bar")
	assert.Equal(t, 48, sum)

	w, sum = widths(30)
	assert.Equal(t, 12, w["NAME"])
	assert.LessOrEqual(t, sum, 30)
	_, ok := w["FREE"]
	assert.True(t, ok || sum <= 30)

	cols, _ := Layout(specs, 3)
	assert.Len(t, cols, 1, "one column is always left")
}

func TestWrapLines(t *testing.T) {
	assert.Equal(t, "short", WrapLines("short", 30, 3))
	assert.Equal(t, "one two three four five six\nseven", WrapLines("one two three four five six seven", 30, 3))
	long := strings.Repeat("word ", 40)
	got := strings.Split(WrapLines(long, 20, 3), "\n")
	assert.Len(t, got, 3, "at most 3 lines")
	assert.True(t, strings.HasSuffix(got[2], "…"), "the last says more was left: %q", got[2])
	for _, l := range got {
		assert.LessOrEqual(t, ansi.StringWidth(l), 20)
	}
}
