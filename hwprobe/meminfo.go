package hwprobe

import (
	"bufio"
	"bytes"
	"math"
	"strconv"
	"strings"
)

// parseMeminfo reads /proc/meminfo ("MemTotal:       16310012 kB") into bytes per key.
// Lines that do not parse, and values that would overflow int64 once in bytes, are left out,
// so a damaged line makes its key unknown rather than wrong. The first occurrence of a key wins.
func parseMeminfo(data []byte) map[string]int64 {
	out := make(map[string]int64)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxFileSize)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key = strings.TrimSpace(key)
		if key == "" {
			continue
		}
		if _, seen := out[key]; seen {
			continue
		}
		fields := strings.Fields(rest)
		var mult int64
		switch {
		case len(fields) == 1:
			mult = 1 // counts such as HugePages_Total carry no unit
		case len(fields) == 2 && fields[1] == "kB":
			mult = 1024
		default:
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/mult {
			continue
		}
		out[key] = n * mult
	}
	return out
}
