package mesh

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// BenchmarkLoadedMesh measures the failure detector as hosts run it: n members, each its own
// process (this test binary re-executed) with real UDP/TCP sockets on loopback and the LAN
// profile. First it counts suspect and dead events about healthy members while busy loops
// (MESH_BENCH_BURNERS of them, default 2 per CPU) load every CPU for MESH_BENCH_WINDOW (default
// 60 s): the target is zero. MESH_BENCH_PROFILE names another profile (local: the demo's and
// the tests'). Then, the load gone, it kills one member with SIGKILL and times
// until every other shows it suspect and dead: the targets are 2 s and 5 s. Run it alone:
//
//	go test -run '^$' -bench LoadedMesh -benchtime 1x ./mesh/
func BenchmarkLoadedMesh(b *testing.B) {
	const n = 4
	window := 60 * time.Second
	if s := os.Getenv("MESH_BENCH_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(b, err)
		window = d
	}
	burners := 2 * runtimeCPUs()
	if s := os.Getenv("MESH_BENCH_BURNERS"); s != "" {
		k, err := strconv.Atoi(s)
		require.NoError(b, err)
		burners = k
	}
	for range b.N {
		procs := make([]*benchMember, n)
		procs[0] = startBenchMember(b, "m0", "")
		for i := 1; i < n; i++ {
			procs[i] = startBenchMember(b, fmt.Sprintf("m%d", i), procs[0].gossip)
		}
		for _, p := range procs {
			p.waitLine(b, fmt.Sprintf("ALIVE %d", n), time.Minute)
		}
		for _, p := range procs {
			p.reset()
		}

		stop := burn(b, burners)
		time.Sleep(window) // the measurement is what happens in this window
		stop()
		var suspects, deaths int
		for _, p := range procs {
			s, d := p.counts()
			suspects += s
			deaths += d
		}
		b.ReportMetric(float64(suspects), "suspect-events/loaded-window")
		b.ReportMetric(float64(deaths), "dead-events/loaded-window")
		b.ReportMetric(window.Seconds(), "s-window")
		b.ReportMetric(float64(burners), "busy-loops")

		// Detection on an idle machine.
		time.Sleep(2 * time.Second) // let any suspicion of the loaded window clear
		victim, watchers := procs[n-1], procs[:n-1]
		start := time.Now()
		victim.kill()
		var suspectAll, deadAll time.Duration
		for _, w := range watchers {
			suspectAll = max(suspectAll, w.waitEvent(b, "suspect", victim.name, start))
			deadAll = max(deadAll, w.waitEvent(b, "dead", victim.name, start))
		}
		b.ReportMetric(suspectAll.Seconds(), "s/suspect-all")
		b.ReportMetric(deadAll.Seconds(), "s/dead-all")
		for _, p := range watchers {
			p.kill()
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func runtimeCPUs() int {
	n, err := strconv.Atoi(strings.TrimSpace(mustOutput("nproc")))
	if err != nil || n < 1 {
		return 2
	}
	return n
}

func mustOutput(name string, args ...string) string {
	out, _ := exec.Command(name, args...).Output()
	return string(out)
}

// burn starts k busy loops and returns their stop.
func burn(b *testing.B, k int) func() {
	var cmds []*exec.Cmd
	for range k {
		c := exec.Command("sh", "-c", "while :; do :; done")
		require.NoError(b, c.Start())
		cmds = append(cmds, c)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, c := range cmds {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		})
	}
	b.Cleanup(stop)
	return stop
}

// benchMember is one member process; its stdout lines are "GOSSIP <addr>", "ALIVE <n>" and
// "EVENT <unix-nanos> <kind> <member>".
type benchMember struct {
	name, gossip string
	cmd          *exec.Cmd

	mu    sync.Mutex
	lines []string
	more  chan struct{}
}

func startBenchMember(b *testing.B, name, seed string) *benchMember {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadedMeshMember$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MESH_BENCH_MEMBER="+name, "MESH_BENCH_SEED="+seed)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(b, err)
	stdin, err := cmd.StdinPipe() // the member stops when this closes, even if we crash
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	p := &benchMember{name: name, cmd: cmd, more: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
		}
	}()
	b.Cleanup(func() {
		stdin.Close()
		p.kill()
	})
	p.gossip = strings.TrimPrefix(p.waitLine(b, "GOSSIP ", time.Minute), "GOSSIP ")
	return p
}

func (p *benchMember) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

func (p *benchMember) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = nil
}

// waitLine waits for a line starting with prefix.
func (p *benchMember) waitLine(b *testing.B, prefix string, within time.Duration) string {
	b.Helper()
	deadline := time.After(within)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.HasPrefix(l, prefix) {
				p.mu.Unlock()
				return l
			}
		}
		p.mu.Unlock()
		select {
		case <-p.more:
		case <-deadline:
			b.Fatalf("%s printed no %q within %s", p.name, prefix, within)
		}
	}
}

// waitEvent waits for an event of kind about member and returns its time since start.
func (p *benchMember) waitEvent(b *testing.B, kind, member string, start time.Time) time.Duration {
	b.Helper()
	deadline := time.After(time.Minute)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			f := strings.Fields(l)
			if len(f) == 4 && f[0] == "EVENT" && f[2] == kind && f[3] == member {
				ns, _ := strconv.ParseInt(f[1], 10, 64)
				p.mu.Unlock()
				return time.Unix(0, ns).Sub(start)
			}
		}
		p.mu.Unlock()
		select {
		case <-p.more:
		case <-deadline:
			b.Fatalf("%s saw no %s of %s within a minute", p.name, kind, member)
		}
	}
}

func (p *benchMember) counts() (suspects, deaths int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "EVENT" {
			switch f[2] {
			case "suspect":
				suspects++
			case "dead":
				deaths++
			}
		}
	}
	return suspects, deaths
}

// TestLoadedMeshMember is one member of BenchmarkLoadedMesh; run directly it skips.
func TestLoadedMeshMember(t *testing.T) {
	name := os.Getenv("MESH_BENCH_MEMBER")
	if name == "" {
		t.Skip("a member process of BenchmarkLoadedMesh only")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	cfg := Config{
		MeshID: "bench", Secret: testSecret, NodeName: name, Role: api.RoleAgent, Profile: cmpOr(os.Getenv("MESH_BENCH_PROFILE"), ProfileLAN),
		BindAddr: "127.0.0.1", APIAddr: name + ".test:7777", DialBack: (&answers{}).dial,
	}
	if seed := os.Getenv("MESH_BENCH_SEED"); seed != "" {
		cfg.Seeds = []string{seed}
	}
	m, err := Start(ctx, cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	say("GOSSIP %s", m.GossipAddr())
	evs, stopEvents := m.SubscribeEvents()
	defer stopEvents()
	views, stopViews := m.Subscribe()
	defer stopViews()
	alive := 0
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-views:
			k := 0
			for _, mb := range v.Members {
				if mb.Liveness == api.Alive {
					k++
				}
			}
			if k != alive {
				alive = k
				say("ALIVE %d", k)
			}
		case ev := <-evs:
			if ev.Type == api.EventMesh {
				kind, _, _ := strings.Cut(ev.Message, ":")
				say("EVENT %d %s %s", time.Now().UnixNano(), strings.Fields(kind)[0], ev.Member)
			}
		}
	}
}
