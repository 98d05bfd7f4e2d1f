package hwprobe

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Sysctl reads macOS sysctl values by name. The live implementation (darwin only) asks the
// kernel through golang.org/x/sys/unix; SysctlValues replays values recorded from a Mac, so the
// macOS probe is tested on every OS.
type Sysctl interface {
	// Uint64 returns a numeric value (the kernel stores some as 32 bits, some as 64).
	Uint64(name string) (uint64, error)
	// String returns a text value such as machdep.cpu.brand_string.
	String(name string) (string, error)
}

// SysctlValues is a set of recorded sysctl values.
type SysctlValues map[string]string

// ParseSysctlValues reads recorded values in the form `sysctl name…` prints them: one
// "name: value" per line. Blank lines and lines starting with '#' are skipped; a line of any
// other shape, or a name given twice, is an error naming the line.
func ParseSysctlValues(data []byte) (SysctlValues, error) {
	v := make(SysctlValues)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxFileSize)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, val, ok := strings.Cut(text, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("line %d: want \"name: value\", got %q", line, clip(text))
		}
		if _, dup := v[name]; dup {
			return nil, fmt.Errorf("line %d: %s given twice", line, clip(name))
		}
		v[name] = strings.TrimSpace(val)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return v, nil
}

// Uint64 implements Sysctl.
func (v SysctlValues) Uint64(name string) (uint64, error) {
	s, ok := v[name]
	if !ok {
		return 0, fmt.Errorf("sysctl %s: not recorded", name)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %q is not a number", name, clip(s))
	}
	return n, nil
}

// String implements Sysctl.
func (v SysctlValues) String(name string) (string, error) {
	s, ok := v[name]
	if !ok {
		return "", fmt.Errorf("sysctl %s: not recorded", name)
	}
	return s, nil
}
