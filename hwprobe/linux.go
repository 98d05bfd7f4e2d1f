package hwprobe

import (
	"errors"
	"fmt"
	"io/fs"
)

// linux probes a Linux host from its /proc, /sys and /dev under the root. These readers are
// plain file parsers, built and tested on every OS.
func (p *prober) linux() {
	memory := []string{FieldTotal, FieldAvailable, FieldHostTotal, FieldHostAvailable, FieldCgroupVersion}
	if p.onlyLive {
		p.step(memory, p.linuxMemory)
		p.step([]string{FieldOnBattery}, p.linuxPower)
		return
	}
	if p.live {
		p.step([]string{FieldHostname, FieldCPUs, FieldPageSize}, p.liveBasics)
	} else {
		p.step([]string{FieldHostname}, p.linuxHostname)
		p.step([]string{FieldCPUs}, p.linuxCPUs)
		p.step([]string{FieldPageSize}, p.linuxPageSize)
	}
	p.step([]string{FieldChip}, p.linuxChip)
	p.step(memory, p.linuxMemory)
	p.step([]string{FieldAccelerators}, p.linuxAccelerators)
	p.step([]string{FieldOnBattery}, p.linuxPower)
}

func (p *prober) linuxHostname() {
	b, err := p.r.readFile("/proc/sys/kernel/hostname")
	if err != nil {
		p.unknown(FieldHostname, err.Error())
		return
	}
	if p.info.Hostname, _ = printablePrefix(b); p.info.Hostname == "" {
		p.unknown(FieldHostname, "/proc/sys/kernel/hostname holds no printable name")
	}
}

// linuxCPUs counts online CPUs, falling back to /proc/cpuinfo's processor entries.
func (p *prober) linuxCPUs() {
	b, err := p.r.readFile("/sys/devices/system/cpu/online")
	if err == nil {
		n, perr := parseCPUList(b)
		if perr == nil {
			p.info.CPUs = n
			return
		}
		err = fmt.Errorf("/sys/devices/system/cpu/online: %w", perr)
	}
	cpuinfo, cerr := p.r.readFile("/proc/cpuinfo")
	if cerr == nil {
		if n := cpuinfoProcessors(cpuinfo); n > 0 {
			p.info.CPUs = n
			return
		}
		cerr = errors.New("/proc/cpuinfo lists no processor")
	}
	p.unknown(FieldCPUs, joinNotes(err.Error(), cerr.Error()))
}

func (p *prober) linuxPageSize() {
	b, err := p.r.readFile("/proc/self/auxv")
	if err == nil {
		p.info.PageSize, err = parseAuxvPageSize(b, p.opts.Arch)
		if err != nil {
			err = fmt.Errorf("/proc/self/auxv: %w", err)
		}
	}
	if err != nil {
		p.unknown(FieldPageSize, err.Error())
	}
}

// linuxChip names the board from the device tree (Arm boards) or the CPU from /proc/cpuinfo.
func (p *prober) linuxChip() {
	var why []string
	// 4 KiB is far more than any model string; the sanitiser keeps at most maxTextLen bytes.
	b, err := p.r.readPrefix("/proc/device-tree/model", 4096)
	switch {
	case err == nil:
		s, clean := printablePrefix(b)
		if s != "" {
			if !clean {
				p.note(fmt.Sprintf("/proc/device-tree/model holds non-printable bytes: kept only its printable start %q", s))
			}
			p.info.Chip = s
			return
		}
		why = append(why, "/proc/device-tree/model holds no printable name")
	case !errors.Is(err, fs.ErrNotExist):
		why = append(why, err.Error())
	}
	b, err = p.r.readFile("/proc/cpuinfo")
	if err != nil {
		why = append(why, err.Error())
	} else if s, ok := cpuinfoModel(b); ok {
		p.info.Chip = s
		return
	} else {
		why = append(why, `/proc/cpuinfo has no "model name" or "Model" line`)
	}
	p.unknown(FieldChip, joinNotes(why...))
}

// linuxMemory reads /proc/meminfo and the agent's cgroup, and combines them.
func (p *prober) linuxMemory() {
	m := &p.info.Memory
	hostTotalOK, hostAvailOK := false, false
	if b, err := p.r.readFile("/proc/meminfo"); err != nil {
		p.unknownAll([]string{FieldHostTotal, FieldHostAvailable}, err.Error())
	} else {
		mi := parseMeminfo(b)
		if m.HostTotal, hostTotalOK = mi["MemTotal"]; !hostTotalOK || m.HostTotal == 0 {
			hostTotalOK = false
			p.unknown(FieldHostTotal, "/proc/meminfo has no valid MemTotal")
		}
		if m.HostAvailable, hostAvailOK = mi["MemAvailable"]; !hostAvailOK {
			p.unknown(FieldHostAvailable, "/proc/meminfo has no valid MemAvailable")
		}
	}

	cg := p.linuxCgroup()

	switch {
	case !hostTotalOK:
		p.unknown(FieldTotal, "the host's total is unknown")
	case cg.Limited:
		m.Total = min(m.HostTotal, cg.Limit)
	default:
		m.Total = m.HostTotal
	}
	switch {
	case !hostAvailOK:
		p.unknown(FieldAvailable, "the host's available memory is unknown")
	case cg.Limited:
		m.Available = min(m.HostAvailable, cg.Headroom)
	default:
		m.Available = m.HostAvailable
	}
}

// linuxCgroup finds the agent's cgroup and reads its memory limits into Info. What it returns
// is unlimited when there is no limit to apply: none set, the memory controller on cgroup v1,
// or the files unreadable (each noted).
func (p *prober) linuxCgroup() cgroupMemory {
	m := &p.info.Memory
	cgUnknown := func(why string) {
		p.unknownAll([]string{FieldCgroupLimit, FieldCgroupHigh, FieldCgroupCurrent}, why)
	}
	b, err := p.r.readFile("/proc/self/cgroup")
	var pc procCgroup
	if err == nil {
		pc, err = parseProcCgroup(b)
		if err != nil {
			err = fmt.Errorf("/proc/self/cgroup: %w", err)
		}
	}
	if err != nil {
		p.unknown(FieldCgroupVersion, err.Error())
		cgUnknown("the agent's cgroup is unknown")
		p.note("memory figures are the host's: the agent's cgroup could not be read")
		return cgroupMemory{}
	}
	if pc.MemoryV1 {
		m.CgroupVersion, m.HostFigures = 1, true
		if pc.HasV2 {
			m.CgroupPath = pc.V2Path
		}
		cgUnknown("the memory controller is on cgroup v1")
		p.note("memory figures are the host's: memory controller on cgroup v1")
		return cgroupMemory{}
	}
	m.CgroupVersion, m.CgroupPath = 2, pc.V2Path

	var mounts []mount
	if b, err := p.r.readFile("/proc/self/mountinfo"); err == nil {
		mounts = parseMountinfo(b)
	}
	mountPoint, mountRoot, dir, note := cgroupV2Dir(mounts, pc.V2Path)
	if note != "" {
		p.note(note)
	}
	cg, err := readCgroupMemory(p.r, mountPoint, dir)
	if err != nil {
		cgUnknown(err.Error())
		p.note("memory figures are the host's: the cgroup limits could not be read")
		return cgroupMemory{}
	}
	m.CgroupLimit, m.CgroupHigh = cg.Limit, cg.High
	if cg.Limited {
		m.CgroupLimitPath = cgroupPathOf(mountPoint, mountRoot, cg.LimitPath)
		if cg.Limit == 0 {
			p.note("cgroup " + m.CgroupLimitPath + " has a memory.max of 0: the agent may use no memory")
		}
	}
	if cg.HasCurrent {
		m.CgroupCurrent = cg.Current
	} else {
		p.unknown(FieldCgroupCurrent, fmt.Sprintf("no memory.current in %s", dir))
	}
	return cg
}

func (p *prober) linuxAccelerators() {
	hailo, notes := probeHailo(p.r)
	for _, n := range append(notes, p.hailoVersions(hailo)...) {
		p.note(n)
	}
	nvidia, notes := probeNVIDIA(p.r)
	for _, n := range notes {
		p.note(n)
	}
	p.info.Accelerators = append(append(p.info.Accelerators, hailo...), nvidia...)
	p.finishAccelerators()
}
