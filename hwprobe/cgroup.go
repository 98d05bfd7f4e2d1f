package hwprobe

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// procCgroup is what /proc/self/cgroup says about the agent's own cgroups.
type procCgroup struct {
	// V2Path is the path in the unified (v2) hierarchy, from the "0::<path>" line; HasV2 says
	// whether there was one.
	V2Path string
	HasV2  bool
	// MemoryV1 is set when the memory controller is bound to a v1 hierarchy (a hybrid host):
	// the v2 files then carry no memory figures.
	MemoryV1 bool
}

// parseProcCgroup reads /proc/self/cgroup: one "hierarchy-ID:controller-list:cgroup-path" per line.
func parseProcCgroup(data []byte) (procCgroup, error) {
	var pc procCgroup
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return procCgroup{}, fmt.Errorf("line %d: want id:controllers:path, got %q", i+1, clip(line))
		}
		id, err := strconv.ParseUint(parts[0], 10, 32)
		if err != nil {
			return procCgroup{}, fmt.Errorf("line %d: bad hierarchy id %q", i+1, clip(parts[0]))
		}
		p := parts[2]
		if !strings.HasPrefix(p, "/") {
			return procCgroup{}, fmt.Errorf("line %d: cgroup path %q is not absolute", i+1, clip(p))
		}
		if id == 0 && parts[1] == "" {
			if pc.HasV2 {
				return procCgroup{}, fmt.Errorf("line %d: second unified hierarchy line", i+1)
			}
			pc.V2Path, pc.HasV2 = p, true
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "memory") {
			pc.MemoryV1 = true
		}
	}
	if !pc.HasV2 && !pc.MemoryV1 {
		return procCgroup{}, errors.New("neither a unified hierarchy nor a memory controller")
	}
	return pc, nil
}

// mount is one line of /proc/self/mountinfo, reduced to what finding cgroup2 needs.
type mount struct {
	Root       string // the path inside the filesystem that is mounted
	MountPoint string
	FSType     string
}

// parseMountinfo reads /proc/self/mountinfo (proc(5)): "36 35 98:0 /mnt1 /mnt2 rw,noatime
// master:1 - ext3 /dev/root rw,errors=continue". Lines that do not parse are skipped: only
// the cgroup2 line matters here, and a garbled one just is not found.
func parseMountinfo(data []byte) []mount {
	var out []mount
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 6 || sep+1 >= len(fields) {
			continue
		}
		root, ok1 := unescapeMountField(fields[3])
		mp, ok2 := unescapeMountField(fields[4])
		if !ok1 || !ok2 {
			continue
		}
		out = append(out, mount{Root: root, MountPoint: mp, FSType: fields[sep+1]})
	}
	return out
}

// unescapeMountField undoes the kernel's octal escapes (\040 for a space, \011, \012, \134).
func unescapeMountField(s string) (string, bool) {
	if !strings.Contains(s, `\`) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", false
		}
		n, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(n))
		i += 3
	}
	return b.String(), true
}

// parseCgroupValue reads a cgroup v2 memory file such as memory.max: a byte count, or "max" for
// no limit (returned as limited=false).
func parseCgroupValue(data []byte) (n int64, limited bool, err error) {
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("want a byte count or \"max\", got %q", clip(s))
	}
	return n, true, nil
}

// cgroupMemory is what the agent's own cgroup v2 and its ancestors say about memory.
type cgroupMemory struct {
	Limit     int64 // tightest memory.max; 0 with Limited false when there is none
	Limited   bool
	LimitPath string // the cgroup that holds Limit
	High      int64  // tightest memory.high; 0 with HasHigh false when there is none
	HasHigh   bool
	// Current is memory.current of the cgroup holding the limit (the agent's own when unlimited).
	Current    int64
	HasCurrent bool
	// Headroom is the smallest limit − current over every limited level; valid when Limited.
	Headroom int64
}

// cgroupV2Dir finds the directory of a v2 cgroup path, using the cgroup2 mount in mountinfo
// (/sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid one); mountRoot is the
// cgroup the mount shows at its mount point. Without a usable mountinfo it assumes
// /sys/fs/cgroup and says so in the returned note.
func cgroupV2Dir(mounts []mount, cgPath string) (mountPoint, mountRoot, dir, note string) {
	mountPoint, mountRoot = "/sys/fs/cgroup", "/"
	found := false
	for _, m := range mounts {
		if m.FSType == "cgroup2" {
			mountPoint, mountRoot, found = m.MountPoint, m.Root, true
			break
		}
	}
	if !found {
		note = "no cgroup2 mount in /proc/self/mountinfo: assuming /sys/fs/cgroup"
	}
	// Without a cgroup namespace a container may see only its own subtree mounted: the
	// mount's root is then a prefix of the path /proc/self/cgroup gives.
	inside := mountRoot == "/" || cgPath == mountRoot || strings.HasPrefix(cgPath, mountRoot+"/")
	if inside {
		dir = path.Join(mountPoint, strings.TrimPrefix(cgPath, strings.TrimSuffix(mountRoot, "/")))
		// A process outside its cgroup namespace's root sees a path such as "/../..".
		if dir == mountPoint || strings.HasPrefix(dir, strings.TrimSuffix(mountPoint, "/")+"/") {
			return mountPoint, mountRoot, dir, note
		}
	}
	return mountPoint, mountRoot, mountPoint, joinNotes(note, fmt.Sprintf("cgroup path %s is outside the cgroup2 mount: reading the limits of the mount point, %s", cgPath, mountPoint))
}

// joinNotes joins non-empty notes with "; ".
func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}

// readCgroupMemory walks from the agent's cgroup up to the cgroup2 mount point, keeping the
// tightest memory.max and memory.high and the smallest headroom (limit − current) on the way:
// a parent's limit binds its children, and a parent's usage includes its siblings'.
// A missing memory.max means the memory controller is not enabled at that level (or it is the
// host's root cgroup): no limit there. Any other failure is returned; the caller reports the
// limit as unknown.
func readCgroupMemory(r rootFS, mountPoint, dir string) (cgroupMemory, error) {
	var cm cgroupMemory
	for d := dir; ; d = path.Dir(d) {
		limit, limited, err := readCgroupFile(r, d, "memory.max")
		if err != nil {
			return cm, err
		}
		high, hasHigh, err := readCgroupFile(r, d, "memory.high")
		if err != nil {
			return cm, err
		}
		current, hasCurrent, err := readCgroupFile(r, d, "memory.current")
		if err != nil {
			return cm, err
		}
		if d == dir && hasCurrent {
			cm.Current, cm.HasCurrent = current, true
		}
		if hasHigh && (!cm.HasHigh || high < cm.High) {
			cm.High, cm.HasHigh = high, true
		}
		if limited {
			if !hasCurrent {
				return cm, fmt.Errorf("%s: no memory.current beside memory.max", d)
			}
			headroom := max(limit-current, 0)
			if !cm.Limited || headroom < cm.Headroom {
				cm.Headroom = headroom
			}
			if !cm.Limited || limit < cm.Limit {
				cm.Limit, cm.LimitPath, cm.Current, cm.HasCurrent = limit, d, current, true
			}
			cm.Limited = true
		}
		if d == mountPoint || d == "/" || d == "." {
			return cm, nil
		}
	}
}

// cgroupPathOf turns a directory under the cgroup2 mount back into a cgroup path.
func cgroupPathOf(mountPoint, mountRoot, dir string) string {
	return path.Join("/", mountRoot, strings.TrimPrefix(dir, mountPoint))
}

// readCgroupFile reads one memory file of a cgroup directory. A missing file, or "max", is
// (0, false, nil).
func readCgroupFile(r rootFS, dir, name string) (int64, bool, error) {
	p := path.Join(dir, name)
	b, err := r.readFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n, ok, err := parseCgroupValue(b)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", p, err)
	}
	return n, ok, nil
}

// clip shortens untrusted text quoted in an error.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
