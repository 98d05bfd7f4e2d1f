package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

const (
	miB = int64(1) << 20
	giB = int64(1) << 30
)

func giBs(f float64) int64 { return int64(f * float64(giB)) }

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"12GiB": 12 << 30, "1.5 GB": 1_500_000_000, "512MiB": 512 << 20, "800M": 800 << 20, "1073741824": 1 << 30, "2g": 2 << 30,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "GiB", "12 parsecs", "-1GiB", "1e400"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
	if got := FormatBytes(3 << 29); got != "1.5 GiB" {
		t.Errorf("FormatBytes = %q", got)
	}
}

func TestFormatBytes(t *testing.T) {
	cases := map[int64]string{
		0:                          "0 B",
		1023:                       "1023 B",
		1024:                       "1 KiB",
		1024*1024 - 1:              "1 MiB",
		512 * miB:                  "512 MiB",
		1023 * miB:                 "1023 MiB",
		giB - 1:                    "1.0 GiB",
		giB:                        "1.0 GiB",
		giBs(1.9):                  "1.9 GiB",
		giBs(5.25) + 1:             "5.3 GiB",
		8 * giB:                    "8.0 GiB",
		123 * giB:                  "123.0 GiB",
		-2 * giB:                   "-2.0 GiB",
		-1 << 63:                   "-8589934592.0 GiB",
		1<<63 - 1:                  "8589934592.0 GiB",
		1024*1024 - 1024/2 - 1:     "1023 KiB",
		1024*1024*1024 - miB/2:     "1.0 GiB",
		1024*1024*1024 - miB/2 - 1: "1023 MiB",
	}
	for b, want := range cases {
		assert.Equal(t, want, FormatBytes(b), "%d", b)
	}
}

// TestFormatBytesJustUnderAGiB pins what the agent's old formatter and the ranking's disagreed
// on: a size that rounds to 1024 MiB is shown as a GiB, in the agent's logs and in the console.
func TestFormatBytesJustUnderAGiB(t *testing.T) {
	assert.Equal(t, "1.0 GiB", FormatBytes(giB-1))
	assert.Equal(t, "1.0 GiB", FormatBytes(1023*miB+miB/2))
	assert.Equal(t, "1023 MiB", FormatBytes(1023*miB+miB/2-1))
	assert.Equal(t, "needs 1.0 GiB", string(AppendBytes([]byte("needs "), giB-1)))
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"12GiB", "1.5 GB", "0", "", "9e99", "1..2G", "-3", "7 tib", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
	})
}
