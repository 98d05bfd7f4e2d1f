package agent

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseBytes reads a size such as "12GiB", "1.5 GB", "512MiB", "800M" or "1073741824".
// Binary (KiB, MiB, GiB, TiB; K, M, G, T) and decimal (kB, MB, GB, TB) units are told apart.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (GiB, MiB, GB, MB, …)", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[strings.ToLower(unit)]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, unit)
	}
	b := v * mult
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(b), nil
}

// FormatBytes renders a size for people: "1.9 GiB", "512 MiB", "800 B".
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30 || n <= -(1<<30):
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20 || n <= -(1<<20):
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 0, 64) + " MiB"
	case n >= 1<<10 || n <= -(1<<10):
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 0, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
