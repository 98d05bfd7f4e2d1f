// Command footprint measures llmkube-agent's idle footprint on Linux, for BENCHMARKS.md:
// resident memory (VmRSS of /proc/<pid>/status) and CPU time (the threads' run time in
// /proc/<pid>/task/*/schedstat) over an idle window.
//
//	go run ./cmd/llmkube-agent/internal/footprint [-idle 30s]
//
// It builds llmkube-agent and barenode (a bare memberlist node with the same LAN timings: the
// baseline) as make release builds what ships (static, no cgo: the C library's pages are not
// counted; -trimpath, -s -w), and the llama-server simulator, then measures three windows: the
// agent alone (a mesh member with default LAN timings, gossip on loopback, no mDNS so nothing
// is multicast on this machine's interfaces, llama-server detected) beside a bare node and a
// bare node with an HTTP API (barenode -http: what any member with an API holds); the agent
// with one ready placement on the simulator (health-checked every 5 s; the engine's own process
// is not counted); and an agent with a second agent joined to it beside a bare node with a bare
// peer. An agent is measured once it is idle: it serves its API and is a mesh member, the join
// or the placement is done, and then each run settles for 5 s before its window.
// Besides CPU time it counts how often the threads were put on a CPU (schedstat's third
// field): the wakeups, a count the machine's other load hardly moves; and besides the resident
// set at the window's end, its mean and maximum through the window, and the working set: the
// resident pages touched during the window.
// Everything lives in a temporary folder.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/sim/gguf"
)

func main() {
	idle := flag.Duration("idle", 30*time.Second, "idle window measured")
	flag.Parse()
	if runtime.GOOS != "linux" {
		fmt.Fprintln(os.Stderr, "footprint reads /proc: Linux only")
		os.Exit(2)
	}
	if err := measureAll(*idle); err != nil {
		fmt.Fprintln(os.Stderr, "footprint:", err)
		os.Exit(1)
	}
}

func measureAll(idle time.Duration) error {
	tmp, err := os.MkdirTemp("", "llmkube-footprint-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	agentBin, simBin := filepath.Join(tmp, "llmkube-agent"), filepath.Join(tmp, "llama-server")
	bareBin, httpBin := filepath.Join(tmp, "barenode"), filepath.Join(tmp, "barenode-http")
	const barePkg = "./cmd/llmkube-agent/internal/footprint/barenode"
	for _, b := range []struct{ out, pkg, tags string }{{agentBin, "./cmd/llmkube-agent", ""},
		{simBin, "./cmd/llama-server-sim", ""}, {bareBin, barePkg, ""}, {httpBin, barePkg, "httpapi"}} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-tags", b.tags, "-o", b.out, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s (run from the module root): %w", b.pkg, err)
		}
	}
	fmt.Printf("llmkube-agent idle footprint: %s/%s, %d CPUs, %s window after 5 s settling\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), idle)
	mb := func(n int64) float64 { return float64(n) / (1 << 20) }
	line := func(label string, u usage) {
		fmt.Printf("%-28s RSS %5.1f MB (anonymous %.1f, file-backed %.1f; over the window mean %.1f, max %.1f), working set %.1f MB   CPU %.3f%% of a core, %.1f wakeups/s\n",
			label, mb(u.mem["VmRSS"]), mb(u.mem["RssAnon"]), mb(u.mem["RssFile"]), mb(u.rssMean), mb(u.rssMax), mb(u.mem["Referenced"]), u.cpu, u.wakeups)
	}
	// The user's target for an idle agent (DESIGN.md §6): at most half a percent of a core and
	// 40 MB resident, the working set reported beside it.
	const cpuTarget, rssTarget = 0.5, 40.0
	target := func(label string, u usage) {
		verdict := "met"
		if u.cpu > cpuTarget || mb(u.rssMax) > rssTarget {
			verdict = "MISSED"
		}
		fmt.Printf("%-28s CPU %.3f%% of a core (≤ %.1f%%), RSS max %.1f MB (≤ %.0f MB), working set %.1f MB: %s\n",
			"target, "+label, u.cpu, cpuTarget, mb(u.rssMax), rssTarget, mb(u.mem["Referenced"]), verdict)
	}
	rss := func(a, b usage) string {
		return fmt.Sprintf("RSS %.2f× (mean %.2f×, max %.2f×)", float64(a.mem["VmRSS"])/float64(b.mem["VmRSS"]),
			float64(a.rssMean)/float64(b.rssMean), float64(a.rssMax)/float64(b.rssMax))
	}
	ratio := func(a, b usage) {
		fmt.Printf("%-28s %s   CPU %.2f×, working set %.2f×, wakeups %.2f×\n", "agent ÷ bare node",
			rss(a, b), a.cpu/b.cpu, float64(a.mem["Referenced"])/float64(b.mem["Referenced"]), a.wakeups/b.wakeups)
	}

	// Alone, beside a bare node alone and a bare node with an HTTP API, in one window.
	bare, _, err := startBare(bareBin, "")
	if err != nil {
		return err
	}
	bareHTTP, _, err := startBare(httpBin, "")
	if err != nil {
		stop(bare)
		return err
	}
	got, err := measure(tmp, agentBin, simBin, false, false, idle, bare, bareHTTP)
	stop(bareHTTP)
	stop(bare)
	if err != nil {
		return fmt.Errorf("alone: %w", err)
	}
	line("idle alone, no placements", got[0])
	target("alone", got[0])
	line("bare memberlist node alone", got[1])
	line("bare node with an HTTP API", got[2])
	ratio(got[0], got[1])
	fmt.Printf("%-28s %s   CPU %.2f×   working set %.2f×\n", "agent ÷ node with HTTP API",
		rss(got[0], got[2]), got[0].cpu/got[2].cpu, float64(got[0].mem["Referenced"])/float64(got[2].mem["Referenced"]))
	if err := printSizes(agentBin, bareBin, httpBin); err != nil {
		return err
	}

	// Alone, one ready placement.
	if got, err = measure(tmp, agentBin, simBin, true, false, idle); err != nil {
		return fmt.Errorf("one placement: %w", err)
	}
	line("idle alone, one placement", got[0])

	// In a mesh of two: the agent with a second agent joined to it, beside a bare node with a
	// second bare node joined to it (encrypted, as the agents' gossip is), in one window; the
	// first of each pair is measured. This is an idle agent as most hosts run it: with peers to
	// probe and to be probed by, which a lone member never is.
	bare, addr, err := startBare(bareBin, "")
	if err != nil {
		return err
	}
	bare2, _, err := startBare(bareBin, addr)
	if err != nil {
		stop(bare)
		return err
	}
	got, err = measure(tmp, agentBin, simBin, false, true, idle, bare)
	stop(bare2)
	stop(bare)
	if err != nil {
		return fmt.Errorf("mesh of two: %w", err)
	}
	line("idle in a mesh of two", got[0])
	line("bare node, with a bare peer", got[1])
	ratio(got[0], got[1])
	return nil
}

// usage is a process's resident memory (bytes, by /proc/<pid>/status key) at the end of a
// window, its resident set's mean and maximum over the window (sampled every rssEvery), and
// its CPU over the window (percent of one core) and wakeups (per second).
type usage struct {
	mem             map[string]int64
	rssMean, rssMax int64
	cpu             float64
	wakeups         float64
}

// rssEvery is how often the resident set is read during a window.
const rssEvery = 250 * time.Millisecond

// bareKey is the pair of bare nodes' gossip key: any 32 bytes, AES-256 as the agents use.
const bareKey = "0123456789abcdef0123456789abcdef"

// startBare starts a bare node, joined to join when it is not empty, and returns its gossip
// address once it prints it.
func startBare(bin, join string) (*exec.Cmd, string, error) {
	cmd := exec.Command(bin)
	if join != "" {
		cmd.Args = append(cmd.Args, "-join", join)
	}
	cmd.Env = append(os.Environ(), "BARENODE_KEY="+bareKey)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "gossip on ")
	if err != nil || !ok {
		stop(cmd)
		return nil, "", fmt.Errorf("barenode did not start: %q %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return cmd, addr, nil
}

func stop(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// agentProc is a started agent: its process, API and gossip addresses, and join string.
type agentProc struct {
	cmd         *exec.Cmd
	log         string // its JSON log
	api, gossip string
	join        api.Join
}

// startAgent starts an agent in its own folder under dir; joined to peer when it is not nil.
func startAgent(dir, agentBin, simBin string, peer *agentProc) (*agentProc, error) {
	logPath := filepath.Join(dir, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	stateDir := filepath.Join(dir, "state")
	cmd := exec.Command(agentBin, "run", "--log-format", "json", "--listen", "127.0.0.1:0",
		"--allow-temp-store", "--state-dir", stateDir, "--models-dir", filepath.Join(dir, "models"),
		"--bind", "127.0.0.1", "--gossip-port", "0", "--no-mdns",
		"--runtimes", "llama-server", "--llama-server", simBin, "--log-level", "debug")
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), "LLAMA_SIM_LOAD_DELAY=0")
	if peer != nil {
		cmd.Args = append(cmd.Args, "--join", peer.gossip)
		cmd.Env = append(cmd.Env, "LLMKUBE_JOIN="+peer.join.String())
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &agentProc{cmd: cmd, log: logPath}
	fields, err := waitLog(logPath, 10*time.Second, map[string]string{"API listening": "addr", "mesh member started": "gossip"})
	if err == nil {
		a.api, a.gossip = "http://"+fields["API listening"], fields["mesh member started"]
		a.join, _, err = state.LoadJoinFile(filepath.Join(stateDir, state.JoinFile))
	}
	if err != nil {
		stop(cmd)
		return nil, err
	}
	return a, nil
}

// measure runs an agent (with one ready placement, or with a second agent joined to it) and
// reads its usage over the idle window; the processes alongside are measured over the same
// window, in order after it.
func measure(tmp, agentBin, simBin string, withPlacement, withPeer bool, idle time.Duration, alongside ...*exec.Cmd) ([]usage, error) {
	dir, err := os.MkdirTemp(tmp, "run-")
	if err != nil {
		return nil, err
	}
	a, err := startAgent(dir, agentBin, simBin, nil)
	if err != nil {
		return nil, err
	}
	defer stop(a.cmd)
	c := apiclient.New(a.api, api.AdminToken(a.join.Secret))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if withPeer {
		dir2, err := os.MkdirTemp(tmp, "peer-")
		if err != nil {
			return nil, err
		}
		b, err := startAgent(dir2, agentBin, simBin, a)
		if err != nil {
			return nil, fmt.Errorf("the second agent: %w", err)
		}
		defer stop(b.cmd)
		for {
			v, err := c.Mesh(ctx)
			if err == nil && len(v.Members) >= 2 {
				break
			}
			if ctx.Err() != nil {
				return nil, errors.New("the second agent did not join the first")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if withPlacement {
		spec, _ := gguf.Preset("sim-tiny")
		model := filepath.Join(dir, "tiny.gguf")
		if err := gguf.Write(model, spec); err != nil {
			return nil, err
		}
		p, err := c.Place(ctx, api.PlacementRequest{Source: model})
		if err != nil {
			return nil, err
		}
		if _, err := c.WaitPlacement(ctx, p.ID, 50*time.Millisecond, nil); err != nil {
			return nil, err
		}
	}
	time.Sleep(5 * time.Second)
	pids := []int{a.cmd.Process.Pid}
	for _, c := range alongside {
		pids = append(pids, c.Process.Pid)
	}
	return window(pids, idle)
}

// printSizes prints the sizes of the agent's and the bare nodes' binaries: the file-backed part
// of a Go program's RSS follows its binary's size, as its packages' initialisation and the
// kernel's fault-around (64 kB windows) bring in nearly every page of its code.
func printSizes(agentBin, bareBin, httpBin string) error {
	var mb [3]float64
	for i, bin := range []string{agentBin, bareBin, httpBin} {
		fi, err := os.Stat(bin)
		if err != nil {
			return err
		}
		mb[i] = float64(fi.Size()) / (1 << 20)
	}
	fmt.Printf("%-28s agent %.1f MB, bare node %.1f MB, with an HTTP API %.1f MB\n", "binaries (static, -s -w)", mb[0], mb[1], mb[2])
	return nil
}

// window reads the processes' CPU time over idle, their resident memory at its end and through
// it, and their working set: the resident pages they touched during the window (the kernel's
// referenced bits, cleared at its start through /proc/<pid>/clear_refs).
func window(pids []int, idle time.Duration) ([]usage, error) {
	t0 := make([]sched, len(pids))
	for i, pid := range pids {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("1"), 0); err != nil {
			return nil, err
		}
		t, err := schedOf(pid)
		if err != nil {
			return nil, err
		}
		t0[i] = t
	}
	// The resident set is sampled through the window as well: an agent's moves with what it
	// runs now and then (a detection round, a collection), so one reading at the end depends on
	// when it falls.
	sum, peak := make([]int64, len(pids)), make([]int64, len(pids))
	samples := 0
	tick := time.NewTicker(rssEvery)
	defer tick.Stop()
	end := time.After(idle)
sampling:
	for {
		select {
		case <-tick.C:
			for i, pid := range pids {
				mem, err := memStatus(pid)
				if err != nil {
					return nil, err
				}
				sum[i] += mem["VmRSS"]
				peak[i] = max(peak[i], mem["VmRSS"])
			}
			samples++
		case <-end:
			break sampling
		}
	}
	out := make([]usage, len(pids))
	for i, pid := range pids {
		t1, err := schedOf(pid)
		if err != nil {
			return nil, err
		}
		mem, err := memStatus(pid)
		if err != nil {
			return nil, err
		}
		if mem["Referenced"], err = referenced(pid); err != nil {
			return nil, err
		}
		out[i] = usage{mem: mem, rssMean: sum[i] / int64(max(samples, 1)), rssMax: peak[i], cpu: 100 * (t1.run - t0[i].run).Seconds() / idle.Seconds(),
			wakeups: float64(t1.slices-t0[i].slices) / idle.Seconds()}
	}
	return out, nil
}

// waitLog reads the agent's JSON log until it has logged each message of want, and returns
// the field want names of each.
func waitLog(path string, timeout time.Duration, want map[string]string) (map[string]string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		got := map[string]string{}
		if b, err := os.ReadFile(path); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) != nil {
					continue
				}
				msg, _ := m["msg"].(string)
				if key, ok := want[msg]; ok {
					if v, ok := m[key].(string); ok {
						got[msg] = v
					}
				}
			}
		}
		if len(got) == len(want) {
			return got, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	return nil, fmt.Errorf("the agent did not start:\n%s", b)
}

// sched is what a process's threads have run: CPU time and the number of times put on a CPU.
type sched struct {
	run    time.Duration
	slices int64
}

// schedOf reads it from /proc/<pid>/task/*/schedstat (its first field, nanoseconds on the CPU:
// exact where /proc/<pid>/stat counts 10 ms ticks, too coarse for a process that runs a few
// milliseconds a second; its third, the time slices run). A Go program's threads live as long
// as it does, so none is lost between two readings.
func schedOf(pid int) (sched, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return sched{}, fmt.Errorf("no threads of process %d in /proc", pid)
	}
	var total sched
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			return sched{}, fmt.Errorf("malformed %s", t)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return sched{}, fmt.Errorf("%s: %w", t, err)
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return sched{}, fmt.Errorf("%s: %w", t, err)
		}
		total.run += time.Duration(ns)
		total.slices += n
	}
	return total, nil
}

// referenced reads the bytes of a process's resident pages referenced since its referenced
// bits were last cleared, from /proc/<pid>/smaps_rollup.
func referenced(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Referenced:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/smaps_rollup: %q: %w", pid, line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no Referenced in /proc/%d/smaps_rollup", pid)
}

// memStatus reads the resident set of a process in bytes: VmRSS and its parts RssAnon (heap,
// stacks) and RssFile (pages of the binary and other mapped files: shared, clean, reclaimable).
func memStatus(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		key, v, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "RssAnon" && key != "RssFile") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/status %s: %w", pid, key, err)
		}
		out[key] = kb << 10
	}
	if _, ok := out["VmRSS"]; !ok {
		return nil, errors.New("no VmRSS in /proc/<pid>/status")
	}
	return out, nil
}
