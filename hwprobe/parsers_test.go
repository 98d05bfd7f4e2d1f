package hwprobe

import (
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeTree makes a root directory from host paths and their contents.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	return root
}

func TestPrintablePrefix(t *testing.T) {
	tests := []struct {
		name, in, want string
		clean          bool
	}{
		{"plain", "Apple M2", "Apple M2", true},
		{"device-tree NUL", "Raspberry Pi 5 Model B Rev 1.0\x00", "Raspberry Pi 5 Model B Rev 1.0", true},
		{"sysfs newline", "pi5\n", "pi5", true},
		{"surrounding spaces", "  AMD EPYC  ", "AMD EPYC", true},
		{"empty", "", "", true},
		{"binary start", "\xd0\x0d\xfe\xedRaspberry", "", false},
		{"binary after text", "Board X\x01\xffgarbage", "Board X", false},
		{"NUL inside", "Pi\x00Pi", "Pi", false},
		{"tab inside", "a\tb", "a", false},
		{"invalid UTF-8", "ab\xc3", "ab", false},
		{"non-ASCII kept", "Größe 🙂", "Größe 🙂", true},
		{"128 bytes kept", strings.Repeat("a", 128), strings.Repeat("a", 128), true},
		{"cut at 128 bytes", strings.Repeat("a", 200), strings.Repeat("a", 128), false},
		{"no rune split at 128", strings.Repeat("a", 127) + "é", strings.Repeat("a", 127), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, clean := printablePrefix([]byte(tt.in))
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.clean, clean)
		})
	}
}

func TestCpuinfoModel(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"x86", "processor\t: 0\nmodel name\t: AMD EPYC 7313P 16-Core Processor\nprocessor\t: 1\nmodel name\t: other\n", "AMD EPYC 7313P 16-Core Processor", true},
		{"Pi kernel", "processor\t: 0\nCPU part\t: 0xd08\n\nRevision\t: c03111\nModel\t\t: Raspberry Pi 4 Model B Rev 1.1\n", "Raspberry Pi 4 Model B Rev 1.1", true},
		{"empty model name skipped", "model name\t:   \nModel\t: Board\n", "Board", true},
		{"generic arm64", "processor\t: 0\nBogoMIPS\t: 48.00\nCPU part\t: 0xd05\n", "", false},
		{"lower-case model is not it", "model\t\t: 1\n", "", false},
		{"binary value", "model name\t: \x01\x02\n", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := cpuinfoModel([]byte(tt.in))
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.ok, ok)
		})
	}
	assert.Equal(t, 2, cpuinfoProcessors([]byte("processor\t: 0\nmodel name: x\nprocessor\t: 1\n")))
	assert.Zero(t, cpuinfoProcessors([]byte("garbage")))
}

func TestParseMeminfo(t *testing.T) {
	got := parseMeminfo([]byte(`MemTotal:       16310012 kB
MemFree:        x kB
MemAvailable:   1 MB
Buffers:        9223372036854775807 kB
Cached:         -5 kB
HugePages_Total:       3
MemTotal:       1 kB
no colon here
:  7 kB
SwapTotal: 8 kB extra
Big: 9007199254740991 kB
`))
	assert.Equal(t, map[string]int64{
		"MemTotal":        16310012 * 1024, // the first MemTotal wins
		"HugePages_Total": 3,
		"Big":             9007199254740991 * 1024,
	}, got)
	assert.Empty(t, parseMeminfo(nil))
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    procCgroup
		wantErr string
	}{
		{"pure v2", "0::/system.slice/a.service\n", procCgroup{V2Path: "/system.slice/a.service", HasV2: true}, ""},
		{"hybrid, memory on v1", "4:memory:/user.slice\n1:name=systemd:/user.slice\n0::/user.slice\n", procCgroup{V2Path: "/user.slice", HasV2: true, MemoryV1: true}, ""},
		{"hybrid, memory not on v1", "3:cpu,cpuacct:/\n1:name=systemd:/a\n0::/a\n", procCgroup{V2Path: "/a", HasV2: true}, ""},
		{"pure v1", "5:memory:/docker/abc\n3:cpu:/docker/abc\n", procCgroup{MemoryV1: true}, ""},
		{"co-mounted memory", "7:cpu,memory:/\n", procCgroup{MemoryV1: true}, ""},
		{"path with colons", "0::/a:b:c\n", procCgroup{V2Path: "/a:b:c", HasV2: true}, ""},
		{"empty", "", procCgroup{}, "neither"},
		{"only cpu on v1", "3:cpu:/\n", procCgroup{}, "neither"},
		{"garbage", "hello\n", procCgroup{}, "line 1: want id:controllers:path"},
		{"bad id", "x::/\n", procCgroup{}, "bad hierarchy id"},
		{"relative path", "0::a\n", procCgroup{}, "not absolute"},
		{"two unified lines", "0::/a\n0::/b\n", procCgroup{}, "second unified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcCgroup([]byte(tt.in))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseMountinfo(t *testing.T) {
	got := parseMountinfo([]byte(`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:9 master:3 - cgroup2 cgroup2 rw
31 22 0:27 /a\040b /mnt/with\040space rw - tmpfs tmpfs rw
32 22 0:28 / /bad\04 rw - tmpfs tmpfs rw
33 22 0:29 / /bad\zzz rw - tmpfs tmpfs rw
too short - x
34 22 0:30 / /no-fstype rw -
`))
	assert.Equal(t, []mount{
		{Root: "/mnt1", MountPoint: "/mnt2", FSType: "ext3"},
		{Root: "/", MountPoint: "/sys/fs/cgroup", FSType: "cgroup2"},
		{Root: "/a b", MountPoint: "/mnt/with space", FSType: "tmpfs"},
	}, got)
}

func TestCgroupV2Dir(t *testing.T) {
	v2 := []mount{{Root: "/", MountPoint: "/proc", FSType: "proc"}, {Root: "/", MountPoint: "/sys/fs/cgroup", FSType: "cgroup2"}}
	hybrid := []mount{{Root: "/", MountPoint: "/sys/fs/cgroup/unified", FSType: "cgroup2"}}
	subtree := []mount{{Root: "/docker/abc", MountPoint: "/sys/fs/cgroup", FSType: "cgroup2"}}
	tests := []struct {
		name                             string
		mounts                           []mount
		cgPath                           string
		mountPoint, mountRoot, dir, note string
	}{
		{"pure v2", v2, "/system.slice/a.service", "/sys/fs/cgroup", "/", "/sys/fs/cgroup/system.slice/a.service", ""},
		{"namespace root", v2, "/", "/sys/fs/cgroup", "/", "/sys/fs/cgroup", ""},
		{"hybrid", hybrid, "/user.slice", "/sys/fs/cgroup/unified", "/", "/sys/fs/cgroup/unified/user.slice", ""},
		{"subtree mount", subtree, "/docker/abc", "/sys/fs/cgroup", "/docker/abc", "/sys/fs/cgroup", ""},
		{"below subtree mount", subtree, "/docker/abc/x", "/sys/fs/cgroup", "/docker/abc", "/sys/fs/cgroup/x", ""},
		{"outside subtree mount", subtree, "/docker/abcd", "/sys/fs/cgroup", "/docker/abc", "/sys/fs/cgroup",
			"cgroup path /docker/abcd is outside the cgroup2 mount: reading the limits of the mount point, /sys/fs/cgroup"},
		{"outside the namespace", v2, "/../..", "/sys/fs/cgroup", "/", "/sys/fs/cgroup",
			"cgroup path /../.. is outside the cgroup2 mount: reading the limits of the mount point, /sys/fs/cgroup"},
		{"no mountinfo", nil, "/a", "/sys/fs/cgroup", "/", "/sys/fs/cgroup/a", "no cgroup2 mount in /proc/self/mountinfo: assuming /sys/fs/cgroup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mp, mr, dir, note := cgroupV2Dir(tt.mounts, tt.cgPath)
			assert.Equal(t, []string{tt.mountPoint, tt.mountRoot, tt.dir, tt.note}, []string{mp, mr, dir, note})
		})
	}
	assert.Equal(t, "/docker/abc/x", cgroupPathOf("/sys/fs/cgroup", "/docker/abc", "/sys/fs/cgroup/x"))
	assert.Equal(t, "/", cgroupPathOf("/sys/fs/cgroup", "/", "/sys/fs/cgroup"))
}

func TestParseCgroupValue(t *testing.T) {
	n, limited, err := parseCgroupValue([]byte("max\n"))
	require.NoError(t, err)
	assert.False(t, limited)
	assert.Zero(t, n)
	n, limited, err = parseCgroupValue([]byte("2147483648\n"))
	require.NoError(t, err)
	assert.True(t, limited)
	assert.Equal(t, int64(2147483648), n)
	for _, bad := range []string{"", "-1", "1G", "max max", "99999999999999999999"} {
		_, _, err := parseCgroupValue([]byte(bad))
		assert.Error(t, err, bad)
	}
}

// TestProbeCgroupBadFiles: a cgroup file that cannot be read leaves the limits unknown and
// the figures the host's, saying so.
func TestProbeCgroupBadFiles(t *testing.T) {
	base := map[string]string{
		"/proc/meminfo":     "MemTotal: 4194304 kB\nMemAvailable: 3145728 kB\n",
		"/proc/self/cgroup": "0::/a\n",
	}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	t.Run("garbled memory.max", func(t *testing.T) {
		root := writeTree(t, with(map[string]string{"/sys/fs/cgroup/a/memory.max": "lots\n"}))
		info := Probe(t.Context(), Options{Root: root, OS: "linux", Arch: "arm64"})
		assert.Equal(t, MemInfo{Total: 4 * GiB, Available: 3 * GiB, HostTotal: 4 * GiB, HostAvailable: 3 * GiB, CgroupPath: "/a", CgroupVersion: 2}, info.Memory)
		assert.False(t, info.Known(FieldCgroupLimit))
		assert.Contains(t, info.Notes, `memory.cgroup_limit, memory.cgroup_high, memory.cgroup_current unknown: /sys/fs/cgroup/a/memory.max: want a byte count or "max", got "lots"`)
		assert.Contains(t, info.Notes, "memory figures are the host's: the cgroup limits could not be read")
		assert.Contains(t, info.Notes, "no cgroup2 mount in /proc/self/mountinfo: assuming /sys/fs/cgroup")
	})
	t.Run("limit without usage", func(t *testing.T) {
		root := writeTree(t, with(map[string]string{"/sys/fs/cgroup/a/memory.max": "1073741824\n"}))
		info := Probe(t.Context(), Options{Root: root, OS: "linux", Arch: "arm64"})
		assert.False(t, info.Known(FieldCgroupLimit))
		assert.Equal(t, int64(4*GiB), info.Memory.Total, "host figures, noted")
		assert.Contains(t, info.Notes, "memory.cgroup_limit, memory.cgroup_high, memory.cgroup_current unknown: /sys/fs/cgroup/a: no memory.current beside memory.max")
	})
	t.Run("no limit and no usage", func(t *testing.T) {
		root := writeTree(t, base)
		info := Probe(t.Context(), Options{Root: root, OS: "linux", Arch: "arm64"})
		assert.True(t, info.Known(FieldCgroupLimit))
		assert.False(t, info.Known(FieldCgroupCurrent))
		assert.Equal(t, int64(4*GiB), info.Memory.Total)
		assert.Equal(t, int64(3*GiB), info.Memory.Available)
	})
	t.Run("usage over the limit", func(t *testing.T) {
		root := writeTree(t, with(map[string]string{"/sys/fs/cgroup/a/memory.max": "1073741824\n", "/sys/fs/cgroup/a/memory.current": "2147483648\n"}))
		info := Probe(t.Context(), Options{Root: root, OS: "linux", Arch: "arm64"})
		assert.Equal(t, int64(1*GiB), info.Memory.Total)
		assert.Zero(t, info.Memory.Available)
		assert.True(t, info.Known(FieldAvailable), "nothing left is a real zero")
	})
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-3\n": 4, "0-3,5,7-8": 7, "0,2,4,6": 4, "0-65535": 65536} {
		got, err := parseCPUList([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "\n", "a", "3-1", "-1", "0-", "0-65536", "1,,2", "0-3 4"} {
		_, err := parseCPUList([]byte(bad))
		assert.Error(t, err, bad)
	}
}

func auxvBytes(size int, order binary.AppendByteOrder, pairs ...uint64) []byte {
	var b []byte
	for _, v := range pairs {
		if size == 8 {
			b = order.AppendUint64(b, v)
		} else {
			b = order.AppendUint32(b, uint32(v))
		}
	}
	return b
}

func TestParseAuxvPageSize(t *testing.T) {
	le8 := auxvBytes(8, binary.LittleEndian, 16, 0x8fff, 6, 16384, 17, 100, 0, 0)
	n, err := parseAuxvPageSize(le8, "arm64")
	require.NoError(t, err)
	assert.Equal(t, 16384, n)

	be4 := auxvBytes(4, binary.BigEndian, 6, 65536, 0, 0)
	n, err = parseAuxvPageSize(be4, "mips")
	require.NoError(t, err)
	assert.Equal(t, 65536, n)

	le4 := auxvBytes(4, binary.LittleEndian, 6, 4096, 0, 0)
	n, err = parseAuxvPageSize(le4, "arm")
	require.NoError(t, err)
	assert.Equal(t, 4096, n)

	_, err = parseAuxvPageSize(le8, "arm")
	assert.Error(t, err, "64-bit vector read as 32-bit: AT_PAGESZ not found at the right place")
	_, err = parseAuxvPageSize(le8, "wasm")
	assert.ErrorContains(t, err, "auxv layout")
	_, err = parseAuxvPageSize(auxvBytes(8, binary.LittleEndian, 17, 100, 0, 0, 6, 4096), "amd64")
	assert.ErrorContains(t, err, "no AT_PAGESZ", "entries after AT_NULL are not read")
	_, err = parseAuxvPageSize(auxvBytes(8, binary.LittleEndian, 6, 12288, 0, 0), "amd64")
	assert.ErrorContains(t, err, "not a page size")
	_, err = parseAuxvPageSize(auxvBytes(8, binary.LittleEndian, 6, 0, 0, 0), "amd64")
	assert.ErrorContains(t, err, "not a page size")
	_, err = parseAuxvPageSize(le8[:20], "amd64")
	assert.ErrorContains(t, err, "no AT_PAGESZ")
}

func TestProbeHailo(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []Accelerator
		notes []string
	}{
		{
			name: "4.x/5.x driver: device_id is vendor:device",
			files: map[string]string{
				"/dev/hailo0": "", "/sys/class/hailo_chardev/hailo0/device_id": "1e60:45c4",
			},
			want: []Accelerator{{Kind: KindHailo, Name: "Hailo-10H", Device: "/dev/hailo0", Memory: 8 * GiB}},
		},
		{
			name: "newer driver: device_id is the PCI address, ids from the PCI function",
			files: map[string]string{
				"/dev/hailo0": "", "/sys/class/hailo_chardev/hailo0/device_id": "0001:01:00.0",
				"/sys/class/hailo_chardev/hailo0/device/vendor": "0x1e60\n",
				"/sys/class/hailo_chardev/hailo0/device/device": "0x45c4\n",
			},
			want: []Accelerator{{Kind: KindHailo, Name: "Hailo-10H", Device: "/dev/hailo0", Memory: 8 * GiB}},
		},
		{
			name: "Hailo-8",
			files: map[string]string{
				"/dev/hailo0": "", "/sys/class/hailo_chardev/hailo0/device_id": "1e60:2864",
			},
			want: []Accelerator{{Kind: KindHailo, Name: "Hailo-8", Device: "/dev/hailo0"}},
		},
		{
			name:  "no sysfs: just hailo",
			files: map[string]string{"/dev/hailo0": ""},
			want:  []Accelerator{{Kind: KindHailo, Name: "hailo", Device: "/dev/hailo0"}},
			notes: []string{"/dev/hailo0: cannot tell which Hailo device it is: open /sys/class/hailo_chardev/hailo0/device/vendor: file does not exist"},
		},
		{
			name: "unknown Hailo device",
			files: map[string]string{
				"/dev/hailo1": "", "/sys/class/hailo_chardev/hailo1/device_id": "1e60:43a2",
			},
			want:  []Accelerator{{Kind: KindHailo, Name: "hailo", Device: "/dev/hailo1"}},
			notes: []string{"/dev/hailo1: unknown Hailo PCI device 43a2"},
		},
		{
			name: "not Hailo's vendor",
			files: map[string]string{
				"/dev/hailo0": "", "/sys/class/hailo_chardev/hailo0/device_id": "10de:45c4",
			},
			want:  []Accelerator{{Kind: KindHailo, Name: "hailo", Device: "/dev/hailo0"}},
			notes: []string{"/dev/hailo0: PCI vendor 10de is not Hailo's"},
		},
		{
			name: "garbled PCI id",
			files: map[string]string{
				"/dev/hailo0": "", "/sys/class/hailo_chardev/hailo0/device/vendor": "hailo\n",
			},
			want:  []Accelerator{{Kind: KindHailo, Name: "hailo", Device: "/dev/hailo0"}},
			notes: []string{`/dev/hailo0: cannot tell which Hailo device it is: /sys/class/hailo_chardev/hailo0/device/vendor: want 0x and four hex digits, got "hailo"`},
		},
		{
			name: "two devices, in order",
			files: map[string]string{
				"/dev/hailo0": "", "/dev/hailo1": "",
				"/sys/class/hailo_chardev/hailo0/device_id": "1e60:45c4",
				"/sys/class/hailo_chardev/hailo1/device_id": "1e60:45c4",
			},
			want: []Accelerator{
				{Kind: KindHailo, Name: "Hailo-10H", Device: "/dev/hailo0", Memory: 8 * GiB},
				{Kind: KindHailo, Name: "Hailo-10H", Device: "/dev/hailo1", Memory: 8 * GiB},
			},
		},
		{name: "none", files: map[string]string{"/dev/null": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes := probeHailo(newRootFS(writeTree(t, tt.files)))
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.notes, notes)
		})
	}
}

func TestProbeHailoDirectoryNode(t *testing.T) {
	// Whatever file type the entry is (a fixture cannot hold device nodes), it counts.
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev", "hailo0"), 0o755))
	got, _ := probeHailo(newRootFS(root))
	require.Len(t, got, 1)
	assert.Equal(t, "/dev/hailo0", got[0].Device)
}

func TestProbeNVIDIA(t *testing.T) {
	root := writeTree(t, map[string]string{
		"/proc/driver/nvidia/gpus/a/information": "Model: \t\t NVIDIA A100-SXM4-80GB\nDevice Minor: \t 1\n",
		"/proc/driver/nvidia/gpus/b/information": "IRQ: 5\nDevice Minor: \t x\n",
	})
	got, notes := probeNVIDIA(newRootFS(root))
	assert.Equal(t, []Accelerator{
		{Kind: KindNVIDIA, Name: "NVIDIA A100-SXM4-80GB", Device: "/dev/nvidia1"},
		{Kind: KindNVIDIA, Name: "nvidia"},
	}, got)
	assert.Equal(t, []string{"/proc/driver/nvidia/gpus/b/information: no Model line"}, notes)

	none, notes := probeNVIDIA(newRootFS(t.TempDir()))
	assert.Empty(t, none)
	assert.Empty(t, notes)
}

func TestParseSysctlValues(t *testing.T) {
	v, err := ParseSysctlValues([]byte("# recorded\n\nhw.memsize: 17179869184\nmachdep.cpu.brand_string: Apple M2 Pro\nkern.version: Darwin Kernel Version 24.3.0: Thu Jan  2 20:24:06 PST 2025\n"))
	require.NoError(t, err)
	assert.Equal(t, SysctlValues{
		"hw.memsize":               "17179869184",
		"machdep.cpu.brand_string": "Apple M2 Pro",
		"kern.version":             "Darwin Kernel Version 24.3.0: Thu Jan  2 20:24:06 PST 2025",
	}, v)
	n, err := v.Uint64("hw.memsize")
	require.NoError(t, err)
	assert.Equal(t, uint64(17179869184), n)
	_, err = v.Uint64("machdep.cpu.brand_string")
	assert.ErrorContains(t, err, "is not a number")
	_, err = v.Uint64("vm.pagesize")
	assert.ErrorContains(t, err, "not recorded")
	_, err = v.String("kern.hostname")
	assert.ErrorContains(t, err, "not recorded")

	for in, want := range map[string]string{
		"hw.memsize 1\n":        "line 1: want",
		"a: 1\na: 2\n":          "line 2: a given twice",
		": 1\n":                 "line 1: want",
		"\n\nhw mem size: 1\n":  "line 3: want",
		"ok: 1\n" + "\x00bad\n": "line 2: want",
		"x: " + strings.Repeat("y", maxFileSize+10): "token too long",
	} {
		_, err := ParseSysctlValues([]byte(in))
		assert.ErrorContains(t, err, want, in[:min(len(in), 40)])
	}
}

func TestDarwinPageSize(t *testing.T) {
	n, err := darwinPageSize(SysctlValues{"hw.pagesize": "4096"})
	require.NoError(t, err)
	assert.Equal(t, uint64(4096), n, "falls back to hw.pagesize")
	_, err = darwinPageSize(SysctlValues{"vm.pagesize": "5000"})
	assert.ErrorContains(t, err, "not a power of two")
	_, err = darwinPageSize(SysctlValues{})
	assert.ErrorContains(t, err, "sysctl vm.pagesize: not recorded; sysctl hw.pagesize: not recorded")
	_, err = darwinAvailable(SysctlValues{"vm.pagesize": "16384", "vm.page_free_count": "18446744073709551615"})
	assert.ErrorContains(t, err, "overflow")
}

func TestProbeMacBadSysctlFile(t *testing.T) {
	root := writeTree(t, map[string]string{"/sysctl.txt": "hw.memsize 1\n"})
	info := Probe(t.Context(), Options{Root: root, OS: "darwin", Arch: "arm64"})
	assert.Contains(t, info.Notes, `no sysctl values: /sysctl.txt: line 1: want "name: value", got "hw.memsize 1"`)
	assert.False(t, info.Known(FieldTotal))
	assert.Equal(t, []Accelerator{{Kind: KindMetal, Name: "Apple GPU", SharedMemory: true}}, info.Accelerators)
}

func TestRootFS(t *testing.T) {
	root := writeTree(t, map[string]string{"/a/b": "x"})
	r := newRootFS(root)
	_, err := r.readFile("/../../etc/passwd")
	require.ErrorIs(t, err, fs.ErrNotExist, "cleaned to a path inside the root, never the machine's /etc/passwd")
	b, err := r.readFile("/a/../a/b")
	require.NoError(t, err)
	assert.Equal(t, "x", string(b))

	big := filepath.Join(root, "big")
	require.NoError(t, os.WriteFile(big, make([]byte, maxFileSize+1), 0o644))
	_, err = r.readFile("/big")
	assert.ErrorIs(t, err, errTooLarge)
	assert.ErrorContains(t, err, "read /big: file too large")
	prefix, err := r.readPrefix("/big", 10)
	require.NoError(t, err)
	assert.Len(t, prefix, 10)
}

func TestProbeLinuxChip(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		chip  string
		note  string
	}{
		{"device tree wins", map[string]string{"/proc/device-tree/model": "Board A\x00", "/proc/cpuinfo": "model name\t: CPU B\n"}, "Board A", ""},
		{"printable start of a garbled model", map[string]string{"/proc/device-tree/model": "Board A\x01\xff\xfe" + strings.Repeat("\x00\x01", 2000)}, "Board A",
			`/proc/device-tree/model holds non-printable bytes: kept only its printable start "Board A"`},
		{"no device tree", map[string]string{"/proc/cpuinfo": "model name\t: CPU B\n"}, "CPU B", ""},
		{"unprintable device tree, cpuinfo", map[string]string{"/proc/device-tree/model": "\x01", "/proc/cpuinfo": "Model\t: Pi\n"}, "Pi", ""},
		{"nothing", map[string]string{"/proc/meminfo": ""}, "",
			"chip unknown: open /proc/cpuinfo: file does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := Probe(t.Context(), Options{Root: writeTree(t, tt.files), OS: "linux", Arch: "arm64"})
			assert.Equal(t, tt.chip, info.Chip)
			assert.Equal(t, tt.chip != "", info.Known(FieldChip))
			if tt.note != "" {
				assert.Contains(t, info.Notes, tt.note)
			}
		})
	}
}

func TestProbeLinuxMeminfoGaps(t *testing.T) {
	root := writeTree(t, map[string]string{
		"/proc/meminfo":             "MemTotal: 0 kB\nMemAvailable: 1024 kB\n",
		"/proc/self/cgroup":         "0::/\n",
		"/proc/sys/kernel/hostname": "\x01\x02\n",
	})
	info := Probe(t.Context(), Options{Root: root, OS: "linux", Arch: "amd64"})
	assert.False(t, info.Known(FieldHostTotal), "a zero MemTotal is not real")
	assert.False(t, info.Known(FieldTotal))
	assert.False(t, info.Known(FieldHostname))
	assert.Contains(t, info.Notes, "hostname unknown: /proc/sys/kernel/hostname holds no printable name")
	assert.Equal(t, int64(1024*1024), info.Memory.Available)
	assert.Contains(t, info.Notes, "cpus unknown: open /sys/devices/system/cpu/online: file does not exist; open /proc/cpuinfo: file does not exist")
}
