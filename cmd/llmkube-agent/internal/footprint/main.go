// Command footprint measures llmkube-agent's idle footprint on Linux, for BENCHMARKS.md:
// resident memory (VmRSS of /proc/<pid>/status) and CPU time (the threads' run time in
// /proc/<pid>/task/*/schedstat) over an idle window.
//
//	go run ./cmd/llmkube-agent/internal/footprint [-idle 30s]
//
// It builds llmkube-agent and barenode (a bare memberlist node with the same LAN timings: the
// baseline) as make release builds what ships (static, no cgo: the C library's pages are not
// counted; -trimpath, -s -w), and the llama-server simulator, then measures two runs: the agent alone (a mesh member
// with default LAN timings, gossip on loopback, no mDNS so nothing is multicast on this
// machine's interfaces, llama-server detected) beside barenode in the same window, and the
// agent with one ready placement on the simulator (health-checked every 5 s; the engine's own
// process is not counted). Each run settles for 5 s before the window. Besides CPU time it
// counts how often the threads were put on a CPU (schedstat's third field): the wakeups, a
// count the machine's other load hardly moves. Everything lives in a temporary folder.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmkube/mesh/agent/api"
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
	agentBin, simBin, bareBin := filepath.Join(tmp, "llmkube-agent"), filepath.Join(tmp, "llama-server"), filepath.Join(tmp, "barenode")
	for out, pkg := range map[string]string{agentBin: "./cmd/llmkube-agent", simBin: "./cmd/llama-server-sim",
		bareBin: "./cmd/llmkube-agent/internal/footprint/barenode"} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s (run from the module root): %w", pkg, err)
		}
	}
	fmt.Printf("llmkube-agent idle footprint: %s/%s, %d CPUs, %s window after 5 s settling\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), idle)
	mb := func(n int64) float64 { return float64(n) / (1 << 20) }
	line := func(label string, u usage) {
		fmt.Printf("%-28s RSS %5.1f MB (anonymous %.1f, file-backed %.1f)   CPU %.3f%% of a core, %.1f wakeups/s\n",
			label, mb(u.mem["VmRSS"]), mb(u.mem["RssAnon"]), mb(u.mem["RssFile"]), u.cpu, u.wakeups)
	}
	for _, withPlacement := range []bool{false, true} {
		label := "idle, no placements"
		if withPlacement {
			label = "idle, one ready placement"
		}
		var bare *exec.Cmd
		if !withPlacement {
			bare = exec.Command(bareBin)
			if err := bare.Start(); err != nil {
				return err
			}
		}
		agent, base, err := measure(tmp, agentBin, simBin, withPlacement, idle, bare)
		if bare != nil {
			bare.Process.Signal(syscall.SIGTERM)
			bare.Wait()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		line(label, agent)
		if bare != nil {
			line("bare memberlist node", base)
			fmt.Printf("%-28s RSS %.2f×   CPU %.2f× (target ≤ 1.5×), wakeups %.2f×\n", "agent ÷ bare node",
				float64(agent.mem["VmRSS"])/float64(base.mem["VmRSS"]), agent.cpu/base.cpu, agent.wakeups/base.wakeups)
		}
	}
	return nil
}

// usage is a process's resident memory (bytes, by /proc/<pid>/status key) at the end of a
// window, and its CPU over the window (percent of one core) and wakeups (per second).
type usage struct {
	mem     map[string]int64
	cpu     float64
	wakeups float64
}

// measure runs the agent and reads its usage over the idle window; alongside, when not nil, is
// measured over the same window.
func measure(tmp, agentBin, simBin string, withPlacement bool, idle time.Duration, alongside *exec.Cmd) (agent, other usage, err error) {
	dir, err := os.MkdirTemp(tmp, "run-")
	if err != nil {
		return agent, other, err
	}
	logPath := filepath.Join(dir, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return agent, other, err
	}
	defer logf.Close()
	stateDir := filepath.Join(dir, "state")
	cmd := exec.Command(agentBin, "run", "--log-format", "json", "--listen", "127.0.0.1:0",
		"--allow-temp-store", "--state-dir", stateDir, "--models-dir", filepath.Join(dir, "models"),
		"--bind", "127.0.0.1", "--gossip-port", "0", "--no-mdns",
		"--runtimes", "llama-server", "--llama-server", simBin)
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), "LLAMA_SIM_LOAD_DELAY=0")
	if err := cmd.Start(); err != nil {
		return agent, other, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	addr, err := waitListening(logPath, 10*time.Second)
	if err != nil {
		return agent, other, err
	}
	j, _, err := state.LoadJoinFile(filepath.Join(stateDir, state.JoinFile))
	if err != nil {
		return agent, other, err
	}
	c := api.NewClient(addr, api.AdminToken(j.Secret))
	if withPlacement {
		spec, _ := gguf.Preset("sim-tiny")
		model := filepath.Join(dir, "tiny.gguf")
		if err := gguf.Write(model, spec); err != nil {
			return agent, other, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := c.Place(ctx, api.PlacementRequest{Source: model})
		if err != nil {
			return agent, other, err
		}
		if _, err := c.WaitPlacement(ctx, p.ID, 50*time.Millisecond, nil); err != nil {
			return agent, other, err
		}
	}
	time.Sleep(5 * time.Second)
	pids := []int{cmd.Process.Pid}
	if alongside != nil {
		pids = append(pids, alongside.Process.Pid)
	}
	got, err := window(pids, idle)
	if err != nil {
		return agent, other, err
	}
	agent = got[0]
	if alongside != nil {
		other = got[1]
	}
	return agent, other, nil
}

// window reads the processes' CPU time over idle, and their resident memory at its end.
func window(pids []int, idle time.Duration) ([]usage, error) {
	t0 := make([]sched, len(pids))
	for i, pid := range pids {
		t, err := schedOf(pid)
		if err != nil {
			return nil, err
		}
		t0[i] = t
	}
	time.Sleep(idle)
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
		out[i] = usage{mem: mem, cpu: 100 * (t1.run - t0[i].run).Seconds() / idle.Seconds(),
			wakeups: float64(t1.slices-t0[i].slices) / idle.Seconds()}
	}
	return out, nil
}

// waitListening reads the agent's JSON log until it says where the API listens.
func waitListening(path string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if f, err := os.Open(path); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var m struct{ Msg, Addr string }
				if json.Unmarshal(sc.Bytes(), &m) == nil && m.Msg == "API listening" {
					f.Close()
					return "http://" + m.Addr, nil
				}
			}
			f.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	return "", fmt.Errorf("the agent did not start:\n%s", b)
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
