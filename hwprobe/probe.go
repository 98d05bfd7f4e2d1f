// Package hwprobe finds out what a host has: OS, architecture, chip, CPUs, page size, memory as
// the agent may use it (cgroup-aware on Linux), accelerators (a Hailo NPU, Apple Metal, NVIDIA
// GPUs) and whether it runs on battery now.
//
// Everything is read under a root directory given in Options, never from a package variable: "/"
// probes this host, a fixture tree under testdata/ probes a recorded one. A value that cannot be
// read is left zero and named in Info.Unknown, with the reason in Info.Notes, so a zero never
// passes for a real figure and a missing or garbled file never stops the agent from starting.
package hwprobe

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Options say which host to probe.
type Options struct {
	// Root is the directory the host's files are read under: "/" for this host, a fixture tree
	// in tests. Empty means "/".
	Root string
	// OS and Arch are the host's GOOS and GOARCH. Empty means this process's.
	OS, Arch string
	// Sysctl supplies macOS values. Nil means the running kernel's when Root is "/" on macOS,
	// and otherwise the recorded values in <Root>/sysctl.txt.
	Sysctl Sysctl
}

// Info is what a host has. Numbers are bytes unless named otherwise. A field named in Unknown
// could not be read and holds its zero value.
type Info struct {
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Hostname string `json:"hostname"`
	CPUs     int    `json:"cpus"`
	PageSize int    `json:"page_size"`
	// Chip is a short printable name: "Raspberry Pi 5 Model B Rev 1.0", "Apple M2",
	// "AMD EPYC 7313P 16-Core Processor".
	Chip         string        `json:"chip"`
	Memory       MemInfo       `json:"memory"`
	Accelerators []Accelerator `json:"accelerators,omitempty"`
	// OnBattery: the host runs on its battery now (power.go); false with no battery, and when
	// unknown.
	OnBattery bool `json:"on_battery,omitempty"`
	// Unknown names the fields that could not be read, by their JSON paths ("page_size",
	// "memory.available", "accelerators.0.memory"), sorted.
	Unknown []string `json:"unknown,omitempty"`
	// Notes say why fields are unknown and anything else the agent should log once, such as
	// "memory figures are the host's: memory controller on cgroup v1".
	Notes []string `json:"notes,omitempty"`
}

// MemInfo is the host's memory as the agent may use it.
type MemInfo struct {
	// Total is min(HostTotal, CgroupLimit); Available is min(HostAvailable, the smallest
	// limit − usage over the agent's cgroup and its ancestors).
	Total     int64 `json:"total"`
	Available int64 `json:"available"`
	// HostTotal and HostAvailable are the whole machine's: MemTotal and MemAvailable on Linux,
	// hw.memsize and the reclaimable VM page counts on macOS.
	HostTotal     int64 `json:"host_total"`
	HostAvailable int64 `json:"host_available"`
	// CgroupLimit is the tightest cgroup v2 memory.max over the agent's cgroup and its ancestors,
	// held by CgroupLimitPath. With no limit both are empty; a CgroupLimitPath with a
	// CgroupLimit of 0 is a real limit of nothing. CgroupHigh is the tightest memory.high, 0 for
	// none.
	CgroupLimit     int64  `json:"cgroup_limit"`
	CgroupLimitPath string `json:"cgroup_limit_path,omitempty"`
	CgroupHigh      int64  `json:"cgroup_high"`
	// CgroupCurrent is memory.current of the cgroup holding the limit, or of the agent's own
	// cgroup when nothing is limited.
	CgroupCurrent int64 `json:"cgroup_current"`
	// CgroupPath is the agent's own cgroup and CgroupVersion the hierarchy its memory
	// controller is on (1 or 2); 0 off Linux or when it could not be read.
	CgroupPath    string `json:"cgroup_path,omitempty"`
	CgroupVersion int    `json:"cgroup_version"`
	// HostFigures is set when the memory controller is on cgroup v1 (a hybrid v1/v2 host): no
	// cgroup limit was read, the figures are the host's.
	HostFigures bool `json:"host_figures"`
}

// Accelerator is a device that runs models.
type Accelerator struct {
	Kind   string `json:"kind"` // KindHailo, KindMetal or KindNVIDIA
	Name   string `json:"name"` // "Hailo-10H", "Apple M2", "NVIDIA GeForce RTX 3090"; the kind when unknown
	Device string `json:"device,omitempty"`
	// Memory is the device's own memory; 0 when it has none of its own (SharedMemory) or when
	// unknown (then named in Info.Unknown as "accelerators.<i>.memory").
	Memory int64 `json:"memory"`
	// SharedMemory is set for a GPU that uses system memory (Apple's unified memory).
	SharedMemory bool `json:"shared_memory,omitempty"`
	// Driver, Firmware and Runtimes are a Hailo device's kernel driver version, the version of
	// the firmware running on it, and the HailoRT library versions installed; "" (none) where
	// the host does not expose them. They must agree (Skew).
	Driver   string   `json:"driver,omitempty"`
	Firmware string   `json:"firmware,omitempty"`
	Runtimes []string `json:"runtimes,omitempty"`
}

// Field names used in Info.Unknown: the JSON paths of the fields.
const (
	FieldHostname      = "hostname"
	FieldCPUs          = "cpus"
	FieldPageSize      = "page_size"
	FieldChip          = "chip"
	FieldTotal         = "memory.total"
	FieldAvailable     = "memory.available"
	FieldHostTotal     = "memory.host_total"
	FieldHostAvailable = "memory.host_available"
	FieldCgroupLimit   = "memory.cgroup_limit"
	FieldCgroupHigh    = "memory.cgroup_high"
	FieldCgroupCurrent = "memory.cgroup_current"
	FieldCgroupVersion = "memory.cgroup_version"
	FieldAccelerators  = "accelerators"
)

// AcceleratorMemoryField is the Unknown name of accelerator i's memory.
func AcceleratorMemoryField(i int) string {
	return "accelerators." + strconv.Itoa(i) + ".memory"
}

// Known reports whether a field (a Field* name) was read. It does not rely on Unknown being
// sorted: an Info may come from another member as JSON.
func (i Info) Known(field string) bool {
	return !slices.Contains(i.Unknown, field)
}

// Probe reads what the host has. It never fails: what it cannot read is named in Unknown, and
// why in Notes. Once ctx is done the fields not yet read are reported unknown. On this host,
// with a Hailo device and hailortcli installed, it runs `hailortcli fw-control identify` (for
// the firmware's version; 5 s at most); it runs nothing else.
func Probe(ctx context.Context, opts Options) Info {
	opts = opts.defaults()
	// The Go runtime answers for this very process, and better than files (NumCPU honours the
	// CPU affinity mask); a fixture root exercises the file parsers instead.
	live := opts.Root == "/" && opts.OS == runtime.GOOS && opts.Arch == runtime.GOARCH
	return probe(ctx, opts, newRootFS(opts.Root), live, false)
}

// defaults fills the root, OS and arch left empty: this host's.
func (o Options) defaults() Options {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.OS == "" {
		o.OS = runtime.GOOS
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	return o
}

// ProbeLive reads only what changes while the host runs: Probe's Memory and OnBattery, with
// what of them is unknown and why in Unknown and Notes; the other fields are left empty. It is
// the refresh an agent makes every 30 s, which needs no chip, accelerators or hostname read
// again.
func ProbeLive(ctx context.Context, opts Options) Info {
	opts = opts.defaults()
	live := opts.Root == "/" && opts.OS == runtime.GOOS && opts.Arch == runtime.GOARCH
	return probe(ctx, opts, newRootFS(opts.Root), live, true)
}

// probe reads a host through r: all of it, or with onlyLive what changes while it runs.
func probe(ctx context.Context, opts Options, r rootFS, live, onlyLive bool) Info {
	p := &prober{ctx: ctx, r: r, opts: opts, live: live, onlyLive: onlyLive, info: Info{OS: opts.OS, Arch: opts.Arch}}
	switch opts.OS {
	case "linux":
		p.linux()
	case "darwin":
		p.darwin()
	default:
		p.other()
	}
	slices.Sort(p.info.Unknown)
	p.info.Unknown = slices.Compact(p.info.Unknown)
	return p.info
}

// prober carries one probe's state.
type prober struct {
	ctx      context.Context
	r        rootFS
	opts     Options
	live     bool
	onlyLive bool // ProbeLive's probe
	info     Info
}

// step runs one part of the probe, or, once the context is done, marks its fields unknown.
func (p *prober) step(fields []string, run func()) {
	if err := p.ctx.Err(); err != nil {
		p.unknownAll(fields, "probe stopped: "+err.Error())
		return
	}
	run()
}

// unknown marks a field unknown, noting why.
func (p *prober) unknown(field, why string) {
	p.info.Unknown = append(p.info.Unknown, field)
	p.note(field + " unknown: " + why)
}

// unknownAll marks several fields unknown for one reason, in one note.
func (p *prober) unknownAll(fields []string, why string) {
	p.info.Unknown = append(p.info.Unknown, fields...)
	p.note(strings.Join(fields, ", ") + " unknown: " + why)
}

// note records something worth logging once.
func (p *prober) note(n string) {
	if !slices.Contains(p.info.Notes, n) {
		p.info.Notes = append(p.info.Notes, n)
	}
}

// liveBasics fills hostname, CPU count and page size from the Go runtime, for a live probe.
func (p *prober) liveBasics() {
	p.info.CPUs = runtime.NumCPU()
	p.info.PageSize = os.Getpagesize()
	h, err := os.Hostname()
	if err != nil {
		p.unknown(FieldHostname, err.Error())
		return
	}
	if p.info.Hostname, _ = printablePrefix([]byte(h)); p.info.Hostname == "" {
		p.unknown(FieldHostname, fmt.Sprintf("hostname %q is not printable", clip(h)))
	}
}

// other probes an OS we have no sources for: only what the Go runtime knows of a live host.
func (p *prober) other() {
	p.note(fmt.Sprintf("hwprobe does not read %s hosts: chip, memory, accelerators and power source unknown", p.opts.OS))
	if p.onlyLive {
		p.info.Unknown = append(p.info.Unknown, FieldTotal, FieldAvailable, FieldHostTotal, FieldHostAvailable, FieldOnBattery)
		return
	}
	if p.live {
		p.step([]string{FieldHostname, FieldCPUs, FieldPageSize}, p.liveBasics)
	} else {
		p.unknownAll([]string{FieldHostname, FieldCPUs, FieldPageSize}, "not a live probe of this host")
	}
	p.info.Unknown = append(p.info.Unknown, FieldChip, FieldTotal, FieldAvailable, FieldHostTotal, FieldHostAvailable, FieldAccelerators, FieldOnBattery)
}

// finishAccelerators names every accelerator whose memory is unknown.
func (p *prober) finishAccelerators() {
	for i, a := range p.info.Accelerators {
		if a.Memory == 0 && !a.SharedMemory {
			p.unknown(AcceleratorMemoryField(i), "nothing the probe reads gives the memory of "+a.Name)
		}
	}
}
