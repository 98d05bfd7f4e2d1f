package hwprobe

import (
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxTextLen bounds a name read from a device file (chip, hostname, GPU model).
const maxTextLen = 128

// printablePrefix keeps the longest prefix of b made of printable UTF-8 and at most maxTextLen
// bytes, trimmed of surrounding spaces: device files can hold anything, and what we keep is
// shown in tables and sent in node metadata. Trailing NULs and line ends (a device-tree string's
// terminator, a sysfs newline) are dropped first; clean says whether nothing else was cut.
func printablePrefix(b []byte) (s string, clean bool) {
	b = bytes.TrimRight(b, "\x00\n\r\t ")
	n := 0
	for n < len(b) {
		r, size := utf8.DecodeRune(b[n:])
		if r == utf8.RuneError || !unicode.IsPrint(r) || n+size > maxTextLen {
			break
		}
		n += size
	}
	return strings.TrimSpace(string(b[:n])), n == len(b)
}

// cpuinfoModel returns the first "model name" (x86, most arm64 kernels with a known part) or
// "Model" (Raspberry Pi kernels) value in /proc/cpuinfo that has printable text.
func cpuinfoModel(data []byte) (string, bool) {
	for _, line := range strings.Split(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if k := strings.TrimSpace(key); k == "model name" || k == "Model" {
			if s, _ := printablePrefix([]byte(strings.TrimSpace(val))); s != "" {
				return s, true
			}
		}
	}
	return "", false
}

// cpuinfoProcessors counts the "processor" entries of /proc/cpuinfo.
func cpuinfoProcessors(data []byte) int {
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if key, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(key) == "processor" {
			n++
		}
	}
	return n
}
