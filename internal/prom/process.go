package prom

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// processCollector writes the standard process_* series from a proc file system: the ones the
// client library's process collector writes on Linux, under the same names and help texts,
// except process_network_*_bytes_total (the counters of every interface of the network
// namespace, which say nothing of the process). Where there is no proc file system (macOS),
// it writes nothing; a series whose file cannot be read is left out.
type processCollector struct{ proc string }

// userHZ is the unit of the CPU times in /proc/<pid>/stat. It is 100 on every Linux
// architecture the agent builds for (the kernel's USER_HZ, what sysconf(_SC_CLK_TCK) says).
const userHZ = 100

// NewProcessCollector returns the collector of this process's series, read from /proc/self.
func NewProcessCollector() Collector { return processCollector{proc: "/proc"} }

func (processCollector) Names() []string {
	return []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
		"process_start_time_seconds", "process_open_fds", "process_max_fds", "process_virtual_memory_max_bytes"}
}

func (c processCollector) Collect(add func(Family)) {
	one := func(name, help string, typ Type, v float64) {
		add(Family{Name: name, Help: help, Type: typ, Series: []Series{{Value: v}}})
	}
	if st, err := c.stat(); err == nil {
		one("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", TypeCounter, st.cpu)
		one("process_resident_memory_bytes", "Resident memory size in bytes.", TypeGauge, st.rss)
		one("process_virtual_memory_bytes", "Virtual memory size in bytes.", TypeGauge, st.vsize)
		if st.start > 0 {
			one("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", TypeGauge, st.start)
		}
	}
	if fds, err := os.ReadDir(filepath.Join(c.proc, "self", "fd")); err == nil {
		// The directory read holds one descriptor of its own, which the count includes, as the
		// library's does.
		one("process_open_fds", "Number of open file descriptors.", TypeGauge, float64(len(fds)))
	}
	if limits, err := os.ReadFile(filepath.Join(c.proc, "self", "limits")); err == nil {
		if v, ok := limit(limits, "Max open files"); ok {
			one("process_max_fds", "Maximum number of open file descriptors.", TypeGauge, v)
		}
		if v, ok := limit(limits, "Max address space"); ok {
			one("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", TypeGauge, v)
		}
	}
}

type procStat struct{ cpu, rss, vsize, start float64 }

// stat reads /proc/self/stat, and the boot time from /proc/stat for the start time (0 when
// that is unknown).
func (c processCollector) stat() (procStat, error) {
	b, err := os.ReadFile(filepath.Join(c.proc, "self", "stat"))
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold spaces and parentheses: fields start after the
	// last ')'. They are then numbered from 3 (state), as proc(5) numbers them.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("prom: /proc/self/stat without a command name")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 24-2 { // through field 24, rss
		return procStat{}, errors.New("prom: /proc/self/stat too short")
	}
	field := func(n int) float64 {
		v, _ := strconv.ParseUint(f[n-3], 10, 64)
		return float64(v)
	}
	st := procStat{
		cpu:   (field(14) + field(15)) / userHZ, // utime + stime
		vsize: field(23),
		rss:   field(24) * float64(os.Getpagesize()),
	}
	if boot, err := bootTime(filepath.Join(c.proc, "stat")); err == nil {
		st.start = boot + field(22)/userHZ
	}
	return st, nil
}

func bootTime(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, errors.New("prom: no btime in " + path)
}

// limit reads a soft limit from /proc/self/limits; unlimited is the largest uint64, as the
// library writes it.
func limit(limits []byte, name string) (float64, bool) {
	for line := range strings.Lines(string(limits)) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		if f[0] == "unlimited" {
			return math.MaxUint64, true
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		return float64(v), err == nil
	}
	return 0, false
}
