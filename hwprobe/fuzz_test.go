package hwprobe

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
	"unicode/utf8"
)

// fixtureFiles returns the named file of every fixture that has it.
func fixtureFiles(f *testing.F, hostPath string) [][]byte {
	f.Helper()
	dirs, err := os.ReadDir("testdata")
	if err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join("testdata", d.Name(), filepath.FromSlash(hostPath))); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// seedFixtures adds the named file of every fixture that has it to a fuzzer's corpus.
func seedFixtures(f *testing.F, hostPath string) {
	f.Helper()
	for _, b := range fixtureFiles(f, hostPath) {
		f.Add(b)
	}
}

func FuzzParseMeminfo(f *testing.F) {
	seedFixtures(f, "proc/meminfo")
	f.Add([]byte("MemTotal: 9223372036854775807 kB\nMemAvailable: 9007199254740992 kB\n"))
	f.Add([]byte("MemTotal:\nMemFree: -1 kB\n:"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for k, v := range parseMeminfo(data) {
			if v < 0 {
				t.Fatalf("%s = %d", k, v)
			}
			if k == "" || strings.ContainsRune(k, ':') {
				t.Fatalf("bad key %q", k)
			}
		}
	})
}

func FuzzParseProcCgroup(f *testing.F) {
	seedFixtures(f, "proc/self/cgroup")
	f.Add([]byte("0::/../..\n"))
	f.Add([]byte("4294967296:memory:/\n"))
	f.Add([]byte("1:memory,cpu:/a:b\n0::/\n0::/x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pc, err := parseProcCgroup(data)
		if err != nil {
			return
		}
		if !pc.HasV2 && !pc.MemoryV1 {
			t.Fatal("accepted a file naming neither hierarchy")
		}
		if pc.HasV2 && !strings.HasPrefix(pc.V2Path, "/") {
			t.Fatalf("relative path %q", pc.V2Path)
		}
		// Wherever the path points, the cgroup directory stays under the mount point.
		mp, _, dir, _ := cgroupV2Dir(nil, pc.V2Path)
		if dir != mp && !strings.HasPrefix(dir, mp+"/") {
			t.Fatalf("%q escapes %q", dir, mp)
		}
	})
}

func FuzzParseMountinfo(f *testing.F) {
	for _, b := range fixtureFiles(f, "proc/self/mountinfo") {
		f.Add(b, "/system.slice/llmkube-agent.service")
	}
	f.Add([]byte(`1 2 0:1 /\040 /a\134b rw - cgroup2 x rw`), "/a")
	f.Add([]byte("1 2 3 4 5 6 - \n- - - - - - - x"), "/")
	f.Fuzz(func(t *testing.T, data []byte, cgPath string) {
		mounts := parseMountinfo(data)
		for _, m := range mounts {
			if m.FSType == "" {
				t.Fatalf("mount without a type: %+v", m)
			}
		}
		if !strings.HasPrefix(cgPath, "/") {
			return
		}
		mp, _, dir, _ := cgroupV2Dir(mounts, cgPath)
		if dir != mp && !strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/") {
			t.Fatalf("%q escapes %q", dir, mp)
		}
	})
}

func FuzzParseCgroupValue(f *testing.F) {
	for _, s := range []string{"max\n", "0\n", "2147483648\n", "-1", "9223372036854775808", " max "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, limited, err := parseCgroupValue(data)
		if err == nil && (n < 0 || (!limited && n != 0)) {
			t.Fatalf("n=%d limited=%v", n, limited)
		}
	})
}

// FuzzPrintablePrefix is the sanitiser for device-tree models, cpuinfo model names, hostnames
// and GPU names: whatever goes in, what comes out is short printable text.
func FuzzPrintablePrefix(f *testing.F) {
	seedFixtures(f, "proc/device-tree/model")
	f.Add([]byte("Raspberry Pi 5 Model B Rev 1.0\x00"))
	f.Add([]byte(strings.Repeat("é", 100)))
	f.Add([]byte("a\xffb"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, clean := printablePrefix(data)
		if len(s) > maxTextLen {
			t.Fatalf("%d bytes", len(s))
		}
		if !utf8.ValidString(s) {
			t.Fatalf("invalid UTF-8 %q", s)
		}
		for _, r := range s {
			if !unicode.IsPrint(r) {
				t.Fatalf("unprintable %q in %q", r, s)
			}
		}
		if s != strings.TrimSpace(s) {
			t.Fatalf("untrimmed %q", s)
		}
		if !strings.Contains(string(data), s) {
			t.Fatalf("%q is not from the input", s)
		}
		if clean && len(strings.TrimRight(string(data), "\x00\n\r\t ")) > maxTextLen {
			t.Fatal("a cut string reported clean")
		}
	})
}

func FuzzCpuinfo(f *testing.F) {
	seedFixtures(f, "proc/cpuinfo")
	f.Add([]byte("model name\t:\t\x00\nModel: x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if s, ok := cpuinfoModel(data); ok != (s != "") || len(s) > maxTextLen {
			t.Fatalf("%q %v", s, ok)
		}
		if n := cpuinfoProcessors(data); n < 0 || n > len(data) {
			t.Fatalf("%d processors in %d bytes", n, len(data))
		}
	})
}

func FuzzParseCPUList(f *testing.F) {
	seedFixtures(f, "sys/devices/system/cpu/online")
	for _, s := range []string{"0-65535,0-65535", "4294967296", "0--1", "1-0", ",", "00-07"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := parseCPUList(data)
		if err == nil && (n < 1 || n > maxCPUs) {
			t.Fatalf("%d CPUs", n)
		}
	})
}

func FuzzParseAuxvPageSize(f *testing.F) {
	seedFixtures(f, "proc/self/auxv")
	f.Add(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 6), 8192))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, arch := range []string{"arm64", "s390x", "arm", "mips"} {
			n, err := parseAuxvPageSize(data, arch)
			if err == nil && (n < 4096 || n&(n-1) != 0) {
				t.Fatalf("%s: page size %d", arch, n)
			}
		}
	})
}

func FuzzParseNvidiaInformation(f *testing.F) {
	seedFixtures(f, "proc/driver/nvidia/gpus/0000_01_00.0/information")
	f.Add([]byte("Device Minor: 99999999999999999999\nModel: \x00\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ni := parseNvidiaInformation(data)
		if len(ni.Model) > maxTextLen || ni.Minor < 0 || (!ni.HasMinor && ni.Minor != 0) {
			t.Fatalf("%+v", ni)
		}
	})
}

func FuzzParseSysctlValues(f *testing.F) {
	seedFixtures(f, "sysctl.txt")
	f.Add([]byte("a:b\na :c\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseSysctlValues(data)
		if err != nil {
			return
		}
		for k, val := range v {
			if k == "" || strings.ContainsAny(k, " \t") || val != strings.TrimSpace(val) {
				t.Fatalf("%q: %q", k, val)
			}
		}
		// Whatever was recorded, the darwin probe neither panics nor invents a figure.
		info := probe(t.Context(), Options{OS: "darwin", Arch: "arm64", Sysctl: v}, rootFS{fsys: fstest.MapFS{}}, false, false)
		if info.Known(FieldTotal) && info.Memory.Total <= 0 {
			t.Fatalf("total %d reported known", info.Memory.Total)
		}
		if info.Known(FieldAvailable) && (info.Memory.Available < 0 || info.Memory.Available > info.Memory.Total && info.Known(FieldTotal)) {
			t.Fatalf("available %d of %d", info.Memory.Available, info.Memory.Total)
		}
	})
}

// FuzzProbeLinuxMemory runs the whole Linux memory path on fuzzed meminfo and cgroup files: the
// effective figures never exceed the host's or the limit, and a known total is never negative,
// nor zero unless a cgroup limit of 0 says so.
func FuzzProbeLinuxMemory(f *testing.F) {
	f.Add([]byte("MemTotal: 4194304 kB\nMemAvailable: 3145728 kB\n"), []byte("1073741824\n"), []byte("2147483648\n"), []byte("536870912\n"))
	f.Add([]byte("MemTotal: 4194304 kB\nMemAvailable: 8388608 kB\n"), []byte("max\n"), []byte("max"), []byte("0"))
	f.Add([]byte("MemTotal: 1 kB\n"), []byte("9223372036854775807"), []byte("1"), []byte("9223372036854775807"))
	f.Fuzz(func(t *testing.T, meminfo, parentMax, childMax, current []byte) {
		fsys := fstest.MapFS{
			"proc/meminfo":                     {Data: meminfo},
			"proc/self/cgroup":                 {Data: []byte("0::/p/c\n")},
			"sys/fs/cgroup/p/memory.max":       {Data: parentMax},
			"sys/fs/cgroup/p/memory.current":   {Data: current},
			"sys/fs/cgroup/p/c/memory.max":     {Data: childMax},
			"sys/fs/cgroup/p/c/memory.current": {Data: current},
		}
		info := probe(t.Context(), Options{OS: "linux", Arch: "amd64"}, rootFS{fsys: fsys}, false, false)
		// The refresh of memory alone finds what the whole probe does.
		if only := probe(t.Context(), Options{OS: "linux", Arch: "amd64"}, rootFS{fsys: fsys}, false, true); only.Memory != info.Memory {
			t.Fatalf("memory alone %+v, in the whole probe %+v", only.Memory, info.Memory)
		}
		m := info.Memory
		if info.Known(FieldTotal) {
			if m.Total < 0 || m.Total > m.HostTotal {
				t.Fatalf("total %d of host %d", m.Total, m.HostTotal)
			}
			// A zero total is real only as a memory.max of 0, which must show as a limit.
			if m.Total == 0 && (m.CgroupLimitPath == "" || m.CgroupLimit != 0) {
				t.Fatalf("total 0 without a limit of 0: %+v", m)
			}
			if m.CgroupLimitPath != "" && m.Total > m.CgroupLimit {
				t.Fatalf("total %d over limit %d", m.Total, m.CgroupLimit)
			}
		} else if m.Total != 0 {
			t.Fatalf("unknown total holds %d", m.Total)
		}
		if info.Known(FieldAvailable) {
			if m.Available < 0 || m.Available > m.HostAvailable {
				t.Fatalf("available %d of host %d", m.Available, m.HostAvailable)
			}
			if m.CgroupLimitPath != "" && m.Available > m.CgroupLimit {
				t.Fatalf("available %d over limit %d", m.Available, m.CgroupLimit)
			}
		} else if m.Available != 0 {
			t.Fatalf("unknown available holds %d", m.Available)
		}
	})
}
