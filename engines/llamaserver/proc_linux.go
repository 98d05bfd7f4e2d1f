package llamaserver

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/llmkube/mesh/engines"
)

// sysProcAttr puts llama-server in its own process group (so a stop reaches anything it
// starts) and has the kernel send it SIGTERM if the agent dies: an orphaned engine would hold
// memory and a port that a restarted agent knows nothing about.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// resident reads a process's resident memory from /proc/<pid>/status (VmRSS and RssAnon, in
// kB). A kernel older than 4.5 has no RssAnon; then the whole VmRSS counts as the process's own.
func resident(pid int) (engines.Resident, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return engines.Resident{}, err
	}
	var r engines.Resident
	anon := int64(-1)
	for line := range strings.SplitSeq(string(b), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "RssAnon") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil || kb < 0 {
			return engines.Resident{}, fmt.Errorf("/proc/%d/status: unreadable %s %q", pid, key, value)
		}
		if key == "VmRSS" {
			r.RSS = kb << 10
		} else {
			anon = kb << 10
		}
	}
	if r.RSS == 0 {
		return engines.Resident{}, fmt.Errorf("/proc/%d/status has no VmRSS (a zombie?)", pid)
	}
	r.Anon = r.RSS
	if anon >= 0 {
		r.Anon = anon
	}
	return r, nil
}

// readBytes is what process pid has read from storage, mapped pages included (/proc/<pid>/io's
// read_bytes): a loading engine's progress through its model file. 0 when unreadable.
func readBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "read_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
