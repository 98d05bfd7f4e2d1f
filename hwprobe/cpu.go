package hwprobe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxCPUs bounds a CPU list: Linux's NR_CPUS tops out at 8192; anything past this is garbage.
const maxCPUs = 1 << 16

// parseCPUList reads a kernel CPU list such as /sys/devices/system/cpu/online ("0-3,5,7-8")
// and returns how many CPUs it names.
func parseCPUList(data []byte) (int, error) {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return 0, errors.New("empty CPU list")
	}
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= maxCPUs {
			return 0, fmt.Errorf("bad CPU number %q", clip(lo))
		}
		b := a
		if isRange {
			b, err = strconv.Atoi(hi)
			if err != nil || b < a || b >= maxCPUs {
				return 0, fmt.Errorf("bad CPU range %q", clip(part))
			}
		}
		n += b - a + 1
		if n > maxCPUs {
			return 0, fmt.Errorf("CPU list names more than %d CPUs", maxCPUs)
		}
	}
	return n, nil
}

// atPagesz is the auxiliary vector entry holding the page size (<elf.h>).
const atPagesz = 6

// auxvLayout gives the word size and byte order of /proc/self/auxv for a GOARCH: the vector is
// an array of (type, value) pairs of native unsigned longs. ok is false for an architecture
// whose layout we do not know.
func auxvLayout(arch string) (size int, order binary.ByteOrder, ok bool) {
	switch arch {
	case "amd64", "arm64", "riscv64", "loong64", "ppc64le", "mips64le":
		return 8, binary.LittleEndian, true
	case "ppc64", "mips64", "s390x":
		return 8, binary.BigEndian, true
	case "386", "arm", "mipsle":
		return 4, binary.LittleEndian, true
	case "mips":
		return 4, binary.BigEndian, true
	}
	return 0, nil, false
}

// parseAuxvPageSize finds AT_PAGESZ in an auxiliary vector (/proc/self/auxv) laid out for arch.
// The page size must be a power of two of at least 4 KiB; the Pi 5's kernel uses 16 KiB.
func parseAuxvPageSize(data []byte, arch string) (int, error) {
	size, order, ok := auxvLayout(arch)
	if !ok {
		return 0, fmt.Errorf("auxv layout of %q is unknown", clip(arch))
	}
	word := func(b []byte) uint64 {
		if size == 8 {
			return order.Uint64(b)
		}
		return uint64(order.Uint32(b))
	}
	for i := 0; i+2*size <= len(data); i += 2 * size {
		typ, val := word(data[i:]), word(data[i+size:])
		switch typ {
		case 0: // AT_NULL ends the vector
			return 0, errors.New("no AT_PAGESZ in auxv")
		case atPagesz:
			if val < 4096 || val > 1<<30 || val&(val-1) != 0 {
				return 0, fmt.Errorf("AT_PAGESZ %d is not a page size", val)
			}
			return int(val), nil
		}
	}
	return 0, errors.New("no AT_PAGESZ in auxv")
}
