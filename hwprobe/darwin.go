package hwprobe

import (
	"fmt"
	"math"
)

// darwinReclaimable are the VM page counters whose sum approximates Linux's MemAvailable on
// macOS: free pages, file-backed (external) pages the kernel can drop, and purgeable pages
// apps have marked disposable. Speculative pages are left out, being file-backed read-ahead
// already counted in the external pages, and so is anything that would need compression or
// swap to free: an estimate that errs low rather than high.
var darwinReclaimable = []string{"vm.page_free_count", "vm.page_pageable_external_count", "vm.page_purgeable_count"}

// darwin probes a Mac through sysctl values: the kernel's on a live probe, recorded ones from
// <Root>/sysctl.txt otherwise (or Options.Sysctl).
func (p *prober) darwin() {
	sc, err := p.darwinSysctl()
	if err != nil {
		p.note(fmt.Sprintf("no sysctl values: %v", err))
	}
	memory := []string{FieldTotal, FieldAvailable, FieldHostTotal, FieldHostAvailable}
	if p.onlyLive {
		p.step(memory, func() { p.darwinMemory(sc) })
		p.step([]string{FieldOnBattery}, p.darwinPower)
		return
	}
	if p.live {
		p.step([]string{FieldHostname, FieldCPUs, FieldPageSize}, p.liveBasics)
	} else {
		p.step([]string{FieldHostname, FieldCPUs, FieldPageSize}, func() { p.darwinBasics(sc) })
	}
	p.step([]string{FieldChip}, func() { p.darwinChip(sc) })
	p.step(memory, func() { p.darwinMemory(sc) })
	p.step([]string{FieldAccelerators}, p.darwinAccelerators)
	p.step([]string{FieldOnBattery}, p.darwinPower)
}

// darwinSysctl picks the sysctl source; nil with the error when there is none.
func (p *prober) darwinSysctl() (Sysctl, error) {
	if p.opts.Sysctl != nil {
		return p.opts.Sysctl, nil
	}
	if p.live {
		return liveSysctl()
	}
	b, err := p.r.readFile("/sysctl.txt")
	if err != nil {
		return nil, err
	}
	v, err := ParseSysctlValues(b)
	if err != nil {
		return nil, fmt.Errorf("/sysctl.txt: %w", err)
	}
	return v, nil
}

// sysctlUint reads a numeric sysctl, or says why it could not.
func sysctlUint(sc Sysctl, name string) (uint64, error) {
	if sc == nil {
		return 0, fmt.Errorf("sysctl %s: no sysctl values", name)
	}
	return sc.Uint64(name)
}

// sysctlString reads a text sysctl, or says why it could not.
func sysctlString(sc Sysctl, name string) (string, error) {
	if sc == nil {
		return "", fmt.Errorf("sysctl %s: no sysctl values", name)
	}
	return sc.String(name)
}

// darwinPageSize is the kernel's page size: vm.pagesize, which hw.pagesize can misstate to a
// process under Rosetta.
func darwinPageSize(sc Sysctl) (uint64, error) {
	n, err := sysctlUint(sc, "vm.pagesize")
	if err != nil {
		var herr error
		if n, herr = sysctlUint(sc, "hw.pagesize"); herr != nil {
			return 0, fmt.Errorf("%v; %v", err, herr)
		}
	}
	if n < 4096 || n > 1<<30 || n&(n-1) != 0 {
		return 0, fmt.Errorf("page size %d is not a power of two of at least 4096", n)
	}
	return n, nil
}

func (p *prober) darwinBasics(sc Sysctl) {
	if h, err := sysctlString(sc, "kern.hostname"); err != nil {
		p.unknown(FieldHostname, err.Error())
	} else if p.info.Hostname, _ = printablePrefix([]byte(h)); p.info.Hostname == "" {
		p.unknown(FieldHostname, "kern.hostname holds no printable name")
	}
	if n, err := sysctlUint(sc, "hw.ncpu"); err != nil {
		p.unknown(FieldCPUs, err.Error())
	} else if n == 0 || n > maxCPUs {
		p.unknown(FieldCPUs, fmt.Sprintf("hw.ncpu %d is not a CPU count", n))
	} else {
		p.info.CPUs = int(n)
	}
	if n, err := darwinPageSize(sc); err != nil {
		p.unknown(FieldPageSize, err.Error())
	} else {
		p.info.PageSize = int(n)
	}
}

func (p *prober) darwinChip(sc Sysctl) {
	s, err := sysctlString(sc, "machdep.cpu.brand_string")
	if err != nil {
		p.unknown(FieldChip, err.Error())
		return
	}
	if p.info.Chip, _ = printablePrefix([]byte(s)); p.info.Chip == "" {
		p.unknown(FieldChip, "machdep.cpu.brand_string holds no printable name")
	}
}

func (p *prober) darwinMemory(sc Sysctl) {
	m := &p.info.Memory
	if n, err := sysctlUint(sc, "hw.memsize"); err != nil || n == 0 || n > math.MaxInt64 {
		why := fmt.Sprintf("hw.memsize %d is not a memory size", n)
		if err != nil {
			why = err.Error()
		}
		p.unknownAll([]string{FieldHostTotal, FieldTotal}, why)
	} else {
		m.HostTotal, m.Total = int64(n), int64(n)
	}
	avail, err := darwinAvailable(sc)
	if err != nil {
		p.unknownAll([]string{FieldHostAvailable, FieldAvailable}, err.Error())
		return
	}
	if m.Total > 0 {
		avail = min(avail, m.Total)
	}
	m.HostAvailable, m.Available = avail, avail
}

// darwinAvailable sums the reclaimable page counters; every one must be read, or the estimate
// would err high.
func darwinAvailable(sc Sysctl) (int64, error) {
	pageSize, err := darwinPageSize(sc)
	if err != nil {
		return 0, err
	}
	var pages uint64
	for _, name := range darwinReclaimable {
		n, err := sysctlUint(sc, name)
		if err != nil {
			return 0, err
		}
		// pages stays at most MaxInt64/pageSize, so the product below cannot overflow.
		if n > math.MaxInt64/pageSize-pages {
			return 0, fmt.Errorf("sysctl %s: %d pages overflow", name, n)
		}
		pages += n
	}
	return int64(pages * pageSize), nil
}

// darwinAccelerators reports the GPU of Apple silicon, which Metal drives and which shares the
// system's unified memory.
func (p *prober) darwinAccelerators() {
	if p.opts.Arch == "arm64" {
		name := p.info.Chip
		if name == "" {
			name = "Apple GPU"
		}
		p.info.Accelerators = append(p.info.Accelerators, Accelerator{Kind: KindMetal, Name: name, SharedMemory: true})
	}
	p.finishAccelerators()
}
