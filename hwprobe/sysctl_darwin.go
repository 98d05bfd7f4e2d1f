//go:build darwin

package hwprobe

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// kernelSysctl reads sysctl values from the running kernel, without cgo.
type kernelSysctl struct{}

// liveSysctl returns the running kernel's sysctl values.
func liveSysctl() (Sysctl, error) { return kernelSysctl{}, nil }

// Uint64 reads a numeric sysctl of either width: hw.memsize is 64 bits, the vm.page_*_count
// counters are 32, and unix.SysctlUint64 refuses anything but 8 bytes. Both Mac architectures
// are little-endian.
func (kernelSysctl) Uint64(name string) (uint64, error) {
	b, err := unix.SysctlRaw(name)
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %w", name, err)
	}
	switch len(b) {
	case 8:
		return binary.LittleEndian.Uint64(b), nil
	case 4:
		return uint64(binary.LittleEndian.Uint32(b)), nil
	}
	return 0, fmt.Errorf("sysctl %s: %d bytes is not a number", name, len(b))
}

// String implements Sysctl.
func (kernelSysctl) String(name string) (string, error) {
	s, err := unix.Sysctl(name)
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", name, err)
	}
	return s, nil
}
