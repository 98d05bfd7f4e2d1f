package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Sizes are part of the contract: a budget given as "12GiB" on the command line, a refusal that
// says "needs 5.2 GiB" in a mesh ranking and the console's memory column must read alike, so
// there is one parser and one formatter.

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

// FormatBytes is a size for people: GiB with one decimal from 1 GiB up, whole MiB below, and
// KiB or bytes for small values ("5.2 GiB", "512 MiB").
func FormatBytes(b int64) string {
	var buf [32]byte
	return string(AppendBytes(buf[:0], b))
}

// AppendBytes appends FormatBytes(b) to dst, for callers that build a message without allocating.
func AppendBytes(dst []byte, b int64) []byte {
	if b < 0 {
		// +1: -math.MinInt64 overflows; one byte never shows.
		return AppendBytes(append(dst, '-'), -(b + 1))
	}
	const kib, mib, gib = 1 << 10, 1 << 20, 1 << 30
	switch {
	case b < kib:
		return append(strconv.AppendInt(dst, b, 10), " B"...)
	case roundDiv(b, kib) < 1024:
		return append(strconv.AppendInt(dst, roundDiv(b, kib), 10), " KiB"...)
	case roundDiv(b, mib) < 1024:
		return append(strconv.AppendInt(dst, roundDiv(b, mib), 10), " MiB"...)
	}
	return append(strconv.AppendFloat(dst, float64(b)/gib, 'f', 1, 64), " GiB"...)
}

// roundDiv is b/d rounded half up, without the overflow of (b+d/2)/d near math.MaxInt64.
func roundDiv(b, d int64) int64 {
	q := b / d
	if b%d >= d/2 {
		q++
	}
	return q
}
