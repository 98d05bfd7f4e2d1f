package hwprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	kB  = 1024
	MiB = 1 << 20
	GiB = 1 << 30
)

// TestProbeFixtures probes every fixture host and checks every field of the result.
func TestProbeFixtures(t *testing.T) {
	tests := []struct {
		fixture  string
		os, arch string
		want     Info
	}{
		{
			fixture: "pi5-hailo", os: "linux", arch: "arm64",
			want: Info{
				OS: "linux", Arch: "arm64", Hostname: "pi5-hailo", CPUs: 4, PageSize: 16384,
				Chip: "Raspberry Pi 5 Model B Rev 1.0",
				Memory: MemInfo{
					Total: 16608720 * kB, Available: 15544848 * kB,
					HostTotal: 16608720 * kB, HostAvailable: 15544848 * kB,
					CgroupCurrent: 201326592,
					CgroupPath:    "/system.slice/llmkube-agent.service", CgroupVersion: 2,
				},
				Accelerators: []Accelerator{{Kind: KindHailo, Name: "Hailo-10H", Device: "/dev/hailo0", Memory: 8 * GiB}},
			},
		},
		{
			fixture: "x86-nvidia", os: "linux", arch: "amd64",
			want: Info{
				OS: "linux", Arch: "amd64", Hostname: "gpu-server", CPUs: 32, PageSize: 4096,
				Chip: "AMD EPYC 7313P 16-Core Processor",
				Memory: MemInfo{
					// memory.high (32 GiB) is reported but does not cap the total: only memory.max does.
					Total: 65768040 * kB, Available: 61234512 * kB,
					HostTotal: 65768040 * kB, HostAvailable: 61234512 * kB,
					CgroupHigh: 32 * GiB, CgroupCurrent: 50 * MiB,
					CgroupPath: "/system.slice/llmkube-agent.service", CgroupVersion: 2,
				},
				Accelerators: []Accelerator{{Kind: KindNVIDIA, Name: "NVIDIA GeForce RTX 3090", Device: "/dev/nvidia0"}},
				Unknown:      []string{"accelerators.0.memory"},
				Notes:        []string{"accelerators.0.memory unknown: nothing the probe reads gives the memory of NVIDIA GeForce RTX 3090"},
			},
		},
		{
			fixture: "container-2g", os: "linux", arch: "amd64",
			want: Info{
				OS: "linux", Arch: "amd64", Hostname: "3f2a9c1b7d4e", CPUs: 8, PageSize: 4096,
				Chip: "Intel(R) Xeon(R) Gold 6230R CPU @ 2.10GHz",
				Memory: MemInfo{
					// The 2 GiB limit is below MemTotal (31.3 GiB): the limit wins, and what is
					// available is what the limit leaves above the cgroup's 300 MiB of usage.
					Total: 2 * GiB, Available: 2*GiB - 300*MiB,
					HostTotal: 32827152 * kB, HostAvailable: 28734556 * kB,
					CgroupLimit: 2 * GiB, CgroupLimitPath: "/", CgroupCurrent: 300 * MiB,
					CgroupPath: "/", CgroupVersion: 2,
				},
			},
		},
		{
			fixture: "nested-cgroup", os: "linux", arch: "amd64",
			want: Info{
				OS: "linux", Arch: "amd64", Hostname: "k8s-worker-3", CPUs: 16, PageSize: 4096,
				Chip: "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz",
				Memory: MemInfo{
					// The pod's 1 GiB binds tighter than the container's own 4 GiB; the
					// kubepods slice has only 50 MiB left under its 8 GiB, which bounds what is
					// available even though its limit is not the tightest.
					Total: 1 * GiB, Available: 50 * MiB,
					HostTotal: 131841788 * kB, HostAvailable: 110348920 * kB,
					CgroupLimit:     1 * GiB,
					CgroupLimitPath: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1e9a52.slice",
					CgroupHigh:      3 * GiB, CgroupCurrent: 900 * MiB,
					CgroupPath:    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1e9a52.slice/cri-containerd-5f0d2b8c.scope",
					CgroupVersion: 2,
				},
			},
		},
		{
			fixture: "cgroup-v1-hybrid", os: "linux", arch: "amd64",
			want: Info{
				OS: "linux", Arch: "amd64", Hostname: "build-box", CPUs: 12, PageSize: 4096,
				Chip: "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz",
				Memory: MemInfo{
					// The v1 memory.limit_in_bytes (1 GiB) is not read: the figures are the host's.
					Total: 16318164 * kB, Available: 13422200 * kB,
					HostTotal: 16318164 * kB, HostAvailable: 13422200 * kB,
					CgroupPath: "/system.slice/llmkube-agent.service", CgroupVersion: 1, HostFigures: true,
				},
				Unknown: []string{FieldCgroupCurrent, FieldCgroupHigh, FieldCgroupLimit},
				Notes: []string{
					"memory.cgroup_limit, memory.cgroup_high, memory.cgroup_current unknown: the memory controller is on cgroup v1",
					"memory figures are the host's: memory controller on cgroup v1",
				},
			},
		},
		{
			fixture: "garbage-dt", os: "linux", arch: "arm64",
			want: Info{
				// The CPU list is garbled, so the count comes from /proc/cpuinfo.
				OS: "linux", Arch: "arm64", Hostname: "rock5b", CPUs: 8,
				Memory: MemInfo{Total: 8026512 * kB, HostTotal: 8026512 * kB},
				Unknown: []string{
					FieldChip, FieldAvailable, FieldCgroupCurrent, FieldCgroupHigh, FieldCgroupLimit,
					FieldCgroupVersion, FieldHostAvailable, FieldPageSize,
				},
				Notes: []string{
					"page_size unknown: open /proc/self/auxv: file does not exist",
					`chip unknown: /proc/device-tree/model holds no printable name; /proc/cpuinfo has no "model name" or "Model" line`,
					"memory.host_available unknown: /proc/meminfo has no valid MemAvailable",
					"memory.cgroup_version unknown: open /proc/self/cgroup: file does not exist",
					"memory.cgroup_limit, memory.cgroup_high, memory.cgroup_current unknown: the agent's cgroup is unknown",
					"memory figures are the host's: the agent's cgroup could not be read",
					"memory.available unknown: the host's available memory is unknown",
				},
			},
		},
		{
			fixture: "mac-m2", os: "darwin", arch: "arm64",
			want: Info{
				OS: "darwin", Arch: "arm64", Hostname: "mac-mini.local", CPUs: 8, PageSize: 16384,
				Chip: "Apple M2",
				Memory: MemInfo{
					// free + file-backed + purgeable pages, of 16 KiB.
					Total: 16 * GiB, Available: (20480 + 250112 + 5120) * 16384,
					HostTotal: 16 * GiB, HostAvailable: (20480 + 250112 + 5120) * 16384,
				},
				Accelerators: []Accelerator{{Kind: KindMetal, Name: "Apple M2", SharedMemory: true}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			opts := Options{Root: filepath.Join("testdata", tt.fixture), OS: tt.os, Arch: tt.arch}
			got := Probe(t.Context(), opts)
			assert.Equal(t, tt.want, got)
			for _, f := range tt.want.Unknown {
				assert.False(t, got.Known(f), f)
			}
			assert.True(t, got.Known(FieldTotal))

			// The refresh of memory alone reads the same memory, and nothing else.
			mem := ProbeLive(t.Context(), opts)
			assert.Equal(t, Info{OS: tt.os, Arch: tt.arch, Memory: tt.want.Memory}, Info{OS: mem.OS, Arch: mem.Arch, Memory: mem.Memory})
			var memUnknown []string
			for _, f := range tt.want.Unknown {
				if strings.HasPrefix(f, "memory.") {
					memUnknown = append(memUnknown, f)
				}
			}
			assert.Equal(t, memUnknown, mem.Unknown)
		})
	}
}

// TestProbeLive probes this machine.
func TestProbeLive(t *testing.T) {
	info := Probe(t.Context(), Options{Root: "/"})
	t.Logf("%+v", info)
	assert.Equal(t, runtime.GOOS, info.OS)
	assert.Equal(t, runtime.GOARCH, info.Arch)
	assert.Positive(t, info.CPUs)
	assert.Positive(t, info.PageSize)
	assert.Zero(t, info.PageSize&(info.PageSize-1), "page size %d is not a power of two", info.PageSize)
	assert.NotEmpty(t, info.Hostname)
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		return
	}
	require.True(t, info.Known(FieldTotal), "notes: %q", info.Notes)
	assert.Positive(t, info.Memory.Total)
	assert.LessOrEqual(t, info.Memory.Total, info.Memory.HostTotal)
	if info.Known(FieldAvailable) {
		assert.LessOrEqual(t, info.Memory.Available, info.Memory.Total)
	}
}

// TestLiveFilesMatchRuntime checks the Linux file parsers on this machine's real files against
// what the Go runtime says.
func TestLiveFilesMatchRuntime(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads Linux's /proc")
	}
	r := newRootFS("/")
	auxv, err := r.readFile("/proc/self/auxv")
	require.NoError(t, err)
	ps, err := parseAuxvPageSize(auxv, runtime.GOARCH)
	require.NoError(t, err)
	assert.Equal(t, os.Getpagesize(), ps)

	h, err := r.readFile("/proc/sys/kernel/hostname")
	require.NoError(t, err)
	want, err := os.Hostname()
	require.NoError(t, err)
	got, _ := printablePrefix(h)
	assert.Equal(t, want, got)

	online, err := r.readFile("/sys/devices/system/cpu/online")
	require.NoError(t, err)
	n, err := parseCPUList(online)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, runtime.NumCPU(), "the affinity mask is a subset of the online CPUs")

	cg, err := r.readFile("/proc/self/cgroup")
	require.NoError(t, err)
	_, err = parseProcCgroup(cg)
	require.NoError(t, err)
}

// TestProbeFixtureAsLinuxFiles probes a fixture root whose OS and arch match this process: it
// must still read the fixture's files, not this machine's runtime.
func TestProbeFixtureIsNotLive(t *testing.T) {
	info := Probe(t.Context(), Options{Root: "testdata/pi5-hailo", OS: runtime.GOOS, Arch: "arm64"})
	if runtime.GOOS == "linux" {
		assert.Equal(t, "pi5-hailo", info.Hostname)
		assert.Equal(t, 16384, info.PageSize)
		assert.Equal(t, 4, info.CPUs)
	}
}

func TestProbeCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	info := Probe(ctx, Options{Root: "testdata/pi5-hailo", OS: "linux", Arch: "arm64"})
	assert.Equal(t, Info{
		OS: "linux", Arch: "arm64",
		Unknown: []string{
			FieldAccelerators, FieldChip, FieldCPUs, FieldHostname, FieldAvailable, FieldCgroupVersion,
			FieldHostAvailable, FieldHostTotal, FieldTotal, FieldOnBattery, FieldPageSize,
		},
		Notes: []string{
			"hostname unknown: probe stopped: context canceled",
			"cpus unknown: probe stopped: context canceled",
			"page_size unknown: probe stopped: context canceled",
			"chip unknown: probe stopped: context canceled",
			"memory.total, memory.available, memory.host_total, memory.host_available, memory.cgroup_version unknown: probe stopped: context canceled",
			"accelerators unknown: probe stopped: context canceled",
			"on_battery unknown: probe stopped: context canceled",
		},
	}, info)
}

func TestProbeUnsupportedOS(t *testing.T) {
	info := Probe(t.Context(), Options{Root: "testdata/pi5-hailo", OS: "plan9", Arch: "amd64"})
	assert.Equal(t, Info{
		OS: "plan9", Arch: "amd64",
		Unknown: []string{
			FieldAccelerators, FieldChip, FieldCPUs, FieldHostname, FieldAvailable,
			FieldHostAvailable, FieldHostTotal, FieldTotal, FieldOnBattery, FieldPageSize,
		},
		Notes: []string{
			"hwprobe does not read plan9 hosts: chip, memory, accelerators and power source unknown",
			"hostname, cpus, page_size unknown: not a live probe of this host",
		},
	}, info)
	assert.Equal(t, Info{
		OS: "plan9", Arch: "amd64",
		Unknown: []string{FieldAvailable, FieldHostAvailable, FieldHostTotal, FieldTotal, FieldOnBattery},
		Notes:   []string{"hwprobe does not read plan9 hosts: chip, memory, accelerators and power source unknown"},
	}, ProbeLive(t.Context(), Options{Root: "testdata/pi5-hailo", OS: "plan9", Arch: "amd64"}))
}

// TestProbeEmptyRoot probes a root with nothing in it: everything unknown, nothing invented.
func TestProbeEmptyRoot(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		t.Run(goos, func(t *testing.T) {
			info := Probe(t.Context(), Options{Root: t.TempDir(), OS: goos, Arch: "arm64"})
			for _, f := range []string{FieldHostname, FieldCPUs, FieldPageSize, FieldChip, FieldTotal, FieldAvailable, FieldHostTotal, FieldHostAvailable} {
				assert.False(t, info.Known(f), f)
			}
			assert.Zero(t, info.CPUs)
			assert.Zero(t, info.PageSize)
			assert.Zero(t, info.Memory.Total)
			assert.Zero(t, info.Memory.Available)
			assert.NotEmpty(t, info.Notes)
		})
	}
}

func TestProbeDarwinOptionsSysctl(t *testing.T) {
	sc := SysctlValues{"hw.memsize": "8589934592", "vm.pagesize": "4096", "hw.ncpu": "4",
		"kern.hostname": "old-mac", "machdep.cpu.brand_string": "Intel(R) Core(TM) i5-8259U CPU @ 2.30GHz",
		"vm.page_free_count": "1000", "vm.page_pageable_external_count": "2000"}
	info := Probe(t.Context(), Options{Root: t.TempDir(), OS: "darwin", Arch: "amd64", Sysctl: sc})
	assert.Equal(t, Info{
		OS: "darwin", Arch: "amd64", Hostname: "old-mac", CPUs: 4, PageSize: 4096,
		Chip:    "Intel(R) Core(TM) i5-8259U CPU @ 2.30GHz",
		Memory:  MemInfo{Total: 8 * GiB, HostTotal: 8 * GiB},
		Unknown: []string{FieldAvailable, FieldHostAvailable},
		Notes:   []string{"memory.host_available, memory.available unknown: sysctl vm.page_purgeable_count: not recorded"},
	}, info, "no Metal on an Intel Mac; available needs every counter")
}

func TestInfoJSON(t *testing.T) {
	info := Probe(t.Context(), Options{Root: "testdata/x86-nvidia", OS: "linux", Arch: "amd64"})
	b, err := json.Marshal(info)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"os", "arch", "hostname", "cpus", "page_size", "chip", "memory", "accelerators", "unknown", "notes"} {
		assert.Contains(t, m, k)
	}
	mem := m["memory"].(map[string]any)
	for _, k := range []string{"total", "available", "host_total", "host_available", "cgroup_limit", "cgroup_high", "cgroup_current", "cgroup_path", "cgroup_version", "host_figures"} {
		assert.Contains(t, mem, k)
	}
	acc := m["accelerators"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"kind": "nvidia", "name": "NVIDIA GeForce RTX 3090", "device": "/dev/nvidia0", "memory": float64(0)}, acc)
	var back Info
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, info, back)
}

func TestWriteTable(t *testing.T) {
	tests := []struct {
		fixture, os, arch string
		want              string
	}{
		{"pi5-hailo", "linux", "arm64", `os                linux
arch              arm64
hostname          pi5-hailo
chip              Raspberry Pi 5 Model B Rev 1.0
cpus              4
page size         16 KiB
memory total      15.8 GiB
memory available  14.8 GiB
host memory       15.8 GiB total, 14.8 GiB available
cgroup            v2 /system.slice/llmkube-agent.service, no limit, using 192 MiB
accelerator       Hailo-10H (hailo) /dev/hailo0, 8.0 GiB
power             not on battery
`},
		{"nested-cgroup", "linux", "amd64", `os                linux
arch              amd64
hostname          k8s-worker-3
chip              Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz
cpus              16
page size         4 KiB
memory total      1.0 GiB
memory available  50 MiB
host memory       125.7 GiB total, 105.2 GiB available
cgroup            v2 /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1e9a52.slice/cri-containerd-5f0d2b8c.scope, limit 1.0 GiB at /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1e9a52.slice, high 3.0 GiB, using 900 MiB
accelerators      none
power             not on battery
`},
		{"cgroup-v1-hybrid", "linux", "amd64", `os                linux
arch              amd64
hostname          build-box
chip              Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz
cpus              12
page size         4 KiB
memory total      15.6 GiB
memory available  12.8 GiB
host memory       15.6 GiB total, 12.8 GiB available
cgroup            v1 memory controller: figures are the host's
accelerators      none
power             not on battery
unknown           memory.cgroup_current, memory.cgroup_high, memory.cgroup_limit
note              memory.cgroup_limit, memory.cgroup_high, memory.cgroup_current unknown: the memory controller is on cgroup v1
note              memory figures are the host's: memory controller on cgroup v1
`},
		{"garbage-dt", "linux", "arm64", `os                linux
arch              arm64
hostname          rock5b
chip              unknown
cpus              8
page size         unknown
memory total      7.7 GiB
memory available  unknown
host memory       7.7 GiB total, unknown available
cgroup            unknown
accelerators      none
power             not on battery
unknown           chip, memory.available, memory.cgroup_current, memory.cgroup_high, memory.cgroup_limit, memory.cgroup_version, memory.host_available, page_size
note              page_size unknown: open /proc/self/auxv: file does not exist
note              chip unknown: /proc/device-tree/model holds no printable name; /proc/cpuinfo has no "model name" or "Model" line
note              memory.host_available unknown: /proc/meminfo has no valid MemAvailable
note              memory.cgroup_version unknown: open /proc/self/cgroup: file does not exist
note              memory.cgroup_limit, memory.cgroup_high, memory.cgroup_current unknown: the agent's cgroup is unknown
note              memory figures are the host's: the agent's cgroup could not be read
note              memory.available unknown: the host's available memory is unknown
`},
		{"mac-m2", "darwin", "arm64", `os                darwin
arch              arm64
hostname          mac-mini.local
chip              Apple M2
cpus              8
page size         16 KiB
memory total      16.0 GiB
memory available  4.2 GiB
host memory       16.0 GiB total, 4.2 GiB available
accelerator       Apple M2 (metal), shares system memory
power             not on battery
`},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			info := Probe(t.Context(), Options{Root: filepath.Join("testdata", tt.fixture), OS: tt.os, Arch: tt.arch})
			var buf bytes.Buffer
			require.NoError(t, WriteTable(&buf, info))
			assert.Equal(t, tt.want, buf.String())
		})
	}
}

func TestWriteTableNvidiaMemoryUnknown(t *testing.T) {
	info := Probe(t.Context(), Options{Root: "testdata/x86-nvidia", OS: "linux", Arch: "amd64"})
	var buf bytes.Buffer
	require.NoError(t, WriteTable(&buf, info))
	assert.Contains(t, buf.String(), "accelerator       NVIDIA GeForce RTX 3090 (nvidia) /dev/nvidia0, memory unknown\n")
	assert.Contains(t, buf.String(), "cgroup            v2 /system.slice/llmkube-agent.service, no limit, high 32.0 GiB, using 50 MiB\n")
}

func TestWriteTableWriteError(t *testing.T) {
	err := WriteTable(failWriter{}, Info{OS: "linux"})
	require.Error(t, err)
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

func TestDefaultDirs(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	tests := []struct {
		name, goos string
		getenv     func(string) string
		home       string
		want       Dirs
		wantErr    string
	}{
		{"linux default", "linux", env(), "/home/pi",
			Dirs{State: "/home/pi/.local/share/llmkube/agent", Models: "/home/pi/.local/share/llmkube/models"}, ""},
		{"linux XDG", "linux", env("XDG_DATA_HOME", "/data"), "/home/pi",
			Dirs{State: "/data/llmkube/agent", Models: "/data/llmkube/models"}, ""},
		{"relative XDG is ignored", "linux", env("XDG_DATA_HOME", "data"), "/home/pi",
			Dirs{State: "/home/pi/.local/share/llmkube/agent", Models: "/home/pi/.local/share/llmkube/models"}, ""},
		{"XDG without home", "freebsd", env("XDG_DATA_HOME", "/var/lib/x"), "",
			Dirs{State: "/var/lib/x/llmkube/agent", Models: "/var/lib/x/llmkube/models"}, ""},
		{"macOS ignores XDG", "darwin", env("XDG_DATA_HOME", "/data"), "/Users/ann",
			Dirs{State: "/Users/ann/Library/Application Support/llmkube/agent", Models: "/Users/ann/Library/Application Support/llmkube/models"}, ""},
		{"no home", "linux", env(), "", Dirs{}, "neither an absolute $XDG_DATA_HOME nor an absolute home"},
		{"relative home", "linux", env(), "home/pi", Dirs{}, "neither an absolute $XDG_DATA_HOME nor an absolute home"},
		{"macOS no home", "darwin", env(), "", Dirs{}, "no absolute home directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DefaultDirs(tt.goos, tt.getenv, tt.home)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			want := Dirs{State: filepath.FromSlash(tt.want.State), Models: filepath.FromSlash(tt.want.Models)}
			assert.Equal(t, want, got)
			assert.True(t, strings.HasSuffix(filepath.ToSlash(got.State), "/llmkube/agent"))
		})
	}
}
