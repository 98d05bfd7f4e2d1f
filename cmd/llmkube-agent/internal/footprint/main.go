// Command footprint measures llmkube-agent's idle footprint on Linux, for BENCHMARKS.md:
// resident memory (VmRSS of /proc/<pid>/status) and CPU time (utime + stime of
// /proc/<pid>/stat) over an idle window.
//
//	go run ./cmd/llmkube-agent/internal/footprint [-idle 30s]
//
// It builds llmkube-agent and the llama-server simulator, then measures two runs: the agent
// alone (a mesh member with default LAN timings, gossip on loopback, no mDNS so nothing is
// multicast on this machine's interfaces, llama-server detected), and the agent with one ready
// placement on the simulator (health-checked every 5 s; the engine's own process is not
// counted). Each run settles for 5 s before the window. Everything lives in a temporary folder.
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

// clkTck is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux the agent runs on.
const clkTck = 100

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
	for out, pkg := range map[string]string{agentBin: "./cmd/llmkube-agent", simBin: "./cmd/llama-server-sim"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s (run from the module root): %w", pkg, err)
		}
	}
	fmt.Printf("llmkube-agent idle footprint: %s/%s, %d CPUs, %s window after 5 s settling\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), idle)
	for _, withPlacement := range []bool{false, true} {
		label := "idle, no placements"
		if withPlacement {
			label = "idle, one ready placement"
		}
		mem, cpu, err := measure(tmp, agentBin, simBin, withPlacement, idle)
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		mb := func(n int64) float64 { return float64(n) / (1 << 20) }
		fmt.Printf("%-28s RSS %5.1f MB (anonymous %.1f, file-backed %.1f)   CPU %.2f%% of a core\n",
			label, mb(mem["VmRSS"]), mb(mem["RssAnon"]), mb(mem["RssFile"]), cpu)
	}
	return nil
}

func measure(tmp, agentBin, simBin string, withPlacement bool, idle time.Duration) (mem map[string]int64, cpuPct float64, err error) {
	dir, err := os.MkdirTemp(tmp, "run-")
	if err != nil {
		return nil, 0, err
	}
	logPath := filepath.Join(dir, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, 0, err
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
		return nil, 0, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	addr, err := waitListening(logPath, 10*time.Second)
	if err != nil {
		return nil, 0, err
	}
	j, _, err := state.LoadJoinFile(filepath.Join(stateDir, state.JoinFile))
	if err != nil {
		return nil, 0, err
	}
	c := api.NewClient(addr, api.AdminToken(j.Secret))
	if withPlacement {
		spec, _ := gguf.Preset("sim-tiny")
		model := filepath.Join(dir, "tiny.gguf")
		if err := gguf.Write(model, spec); err != nil {
			return nil, 0, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := c.Place(ctx, api.PlacementRequest{Source: model})
		if err != nil {
			return nil, 0, err
		}
		if _, err := c.WaitPlacement(ctx, p.ID, 50*time.Millisecond, nil); err != nil {
			return nil, 0, err
		}
	}
	time.Sleep(5 * time.Second)
	pid := cmd.Process.Pid
	t0, err := cpuTicks(pid)
	if err != nil {
		return nil, 0, err
	}
	time.Sleep(idle)
	t1, err := cpuTicks(pid)
	if err != nil {
		return nil, 0, err
	}
	mem, err = memStatus(pid)
	if err != nil {
		return nil, 0, err
	}
	return mem, 100 * float64(t1-t0) / clkTck / idle.Seconds(), nil
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

// cpuTicks is utime + stime of a process, in clock ticks (proc(5): fields 14 and 15).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it follow its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/<pid>/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc/<pid>/stat")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return u + s, nil
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
