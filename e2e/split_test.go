package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/internal/netnslab"
)

// TestLANSplit runs one model across hosts of the LAN with the real llama-server and
// ggml-rpc-server: three agents whose budgets each hold less than the model with its main's
// share, and the laptop. The laptop places a split; a chat through the host outside the split
// streams from it; no RPC port answers from the LAN; a worker's agent killed with SIGKILL ends
// the chat in flight with an error within 5 s and the split is re-planned onto the hosts left;
// a delete leaves no engine on any host.
func TestLANSplit(t *testing.T) {
	skipUnlessLAN(t)
	llama := enginetest.LlamaServer(t)
	enginetest.RPCServer(t)
	// Its own report file beside TestLAN's.
	t.Setenv(reportEnv, cmp.Or(os.Getenv(reportEnv), filepath.Join(os.TempDir(), "llmkube-e2e-report.txt"))+".split")
	rep := newReport()
	t.Cleanup(func() { rep.write(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	l := &splitLAN{e: newEnv(t, dir)}
	model := bigModel(t, filepath.Dir(llama), dir)
	if !rep.step(t, "build the programs", l.build) {
		t.FailNow()
	}
	rep.step(t, "start three agents with the real llama-server and ggml-rpc-server", func(t *testing.T, note func(string, ...any)) {
		l.start(ctx, t, llama, note)
	})
	if t.Failed() {
		t.FailNow()
	}
	rep.step(t, "place from the laptop: every member admits its share", func(t *testing.T, note func(string, ...any)) {
		l.place(ctx, t, model, note)
	})
	if t.Failed() {
		t.FailNow()
	}
	rep.step(t, "chat through the host outside the split, streaming and not", func(t *testing.T, note func(string, ...any)) {
		l.chatBothWays(ctx, t, note)
	})
	rep.step(t, "from the LAN, no RPC port answers", l.noRPCPortAnswers)
	rep.step(t, "kill -9 a worker's agent: the chat in flight ends with an error, the split moves", func(t *testing.T, note func(string, ...any)) {
		l.killWorker(ctx, t, note)
	})
	rep.step(t, "restart the killed worker's agent: it drops the part its split no longer uses", func(t *testing.T, note func(string, ...any)) {
		l.restartWorker(ctx, t, note)
	})
	rep.step(t, "delete: nothing left on any host", func(t *testing.T, note func(string, ...any)) {
		l.deleteSplit(ctx, t)
	})
}

// splitLAN is TestLANSplit's LAN and what its steps learn of it.
type splitLAN struct {
	e *env
	// hosts are sa, sb and sc's agents: the split goes on sa and sb, sc stays outside it and
	// carries the laptop's commands and chats.
	hosts      []*agentHost
	sa, sb, sc *agentHost
	p          api.Placement // the split, as placed
}

func (l *splitLAN) build(t *testing.T, _ func(string, ...any)) {
	if err := buildPrograms(l.e.bin); err != nil {
		t.Fatal(err)
	}
}

func (l *splitLAN) start(ctx context.Context, t *testing.T, llama string, note func(string, ...any)) {
	// 850 MiB: under the model's 989 MiB alone, enough for the main's llama-server (its compute,
	// prompt cache, overhead and the token embeddings it keeps: 739 MiB with the headroom) and
	// for a worker holding every layer and the output layer.
	l.hosts = startSplitAgents(ctx, t, l.e, llama, "850MiB", note, "sa", "sb", "sc")
	l.sa, l.sb, l.sc = l.hosts[0], l.hosts[1], l.hosts[2]
	l.e.box = l.sc // the laptop's commands go through the host outside the split
}

func (l *splitLAN) place(ctx context.Context, t *testing.T, model string, note func(string, ...any)) {
	// No host holds it alone: the ranking refuses it everywhere, and offers the split.
	if r := l.e.mesh(ctx, "rank", "file://"+model); r.code != 3 || !strings.Contains(r.stderr, "no host holds it alone, but 2 do together") {
		t.Errorf("rank without --split: %s", r)
	}
	p, _ := placeSplit(ctx, t, l.e, model, "tiny", "--hosts", "sa,sb", "--host", "sa")
	l.p = p
	if got := splitHosts(p); !slices.Equal(got, []string{"sa", "sb"}) {
		t.Fatalf("members %v, want sa and sb: %s", got, p.Split.Reason)
	}
	note("expected speed %.1f tok/s: %s", p.Split.TokensPerS, p.Split.Basis)
	for _, m := range p.Split.Members {
		note("%s: %d of %d layers, needs %s of %s free", m.Host, m.Layers, p.Split.Layers, api.FormatBytes(m.Need+m.MainNeed), api.FormatBytes(m.Free))
	}
}

// chatBothWays chats with the split through sc, streamed and not, with a capture on the LAN's
// bridge: the chats and the RPC between sa and sb cross it, and nothing captured holds the
// prompt, an answer or the admin token.
func (l *splitLAN) chatBothWays(ctx context.Context, t *testing.T, note func(string, ...any)) {
	bridge, err := startCapture(l.e.lab.hub)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"Say something about meshes", l.e.admin}
	defer func() {
		frames, apiBytes := bridge.stop()
		if apiBytes < 4096 {
			t.Errorf("the capture saw %d bytes on the API port: it did not watch the split's traffic", apiBytes)
		}
		for _, s := range secrets {
			if len(s) >= 8 && bytes.Contains(frames, []byte(s)) {
				t.Errorf("%.40q… crossed the LAN in the clear", s)
			}
		}
		note("captured %d bytes on the bridge, %d on the API port; the prompt, %d answers and the admin token not among them", len(frames), apiBytes, len(secrets)-2)
	}()
	for _, stream := range []bool{true, false} {
		var c chatResult
		if _, err := eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, string) {
			c = l.e.chat(ctx, l.sc, l.e.admin, "tiny", stream, 8, nil)
			return c.ok(), c.String()
		}); err != nil {
			t.Fatalf("stream %v: %v", stream, err)
		}
		note("stream %v: %s", stream, c)
		secrets = append(secrets, c.content)
	}
}

func (l *splitLAN) noRPCPortAnswers(t *testing.T, note func(string, ...any)) {
	for _, a := range []*agentHost{l.sa, l.sb} {
		open := scanPorts(l.e.laptop, a.Addr)
		for _, port := range open {
			if port != apiPort && port != 7946 {
				t.Errorf("%s answers on port %d from the LAN", a.Name, port)
			}
		}
		note("%s: open TCP ports from the LAN %v", a.Name, open)
	}
}

// killWorker kills sb's agent with SIGKILL a few tokens into a chat, checks how that chat ends,
// then that the split moves onto sa and sc and answers there.
func (l *splitLAN) killWorker(ctx context.Context, t *testing.T, note func(string, ...any)) {
	killed := l.killMidChat(ctx, t, note)
	d, err := eventually(ctx, 90*time.Second, func(ctx context.Context) (bool, string) {
		q, err := l.e.client(l.e.laptop, l.sa, l.e.admin).Placement(ctx, l.p.ID)
		if err != nil {
			return false, err.Error()
		}
		return q.State == api.StateReady && slices.Equal(splitHosts(q), []string{"sa", "sc"}), fmt.Sprintf("%s on %v: %s", q.State, splitHosts(q), q.Reason)
	})
	if err != nil {
		t.Fatalf("the split did not move onto sa and sc: %v", err)
	}
	note("re-planned onto sa and sc and ready %.1fs after the kill (%.1fs of waiting here)", time.Since(killed).Seconds(), d.Seconds())
	if _, err := eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, string) {
		c := l.e.chat(ctx, l.sc, l.e.admin, "tiny", true, 8, nil)
		return c.ok(), c.String()
	}); err != nil {
		t.Errorf("the re-planned split does not answer: %v", err)
	}
}

// killMidChat starts a long chat through sc, kills sb's agent once it is under way, and checks
// the chat ends within 5 s with an error naming the split and the member lost. It returns when
// the kill was.
func (l *splitLAN) killMidChat(ctx context.Context, t *testing.T, note func(string, ...any)) time.Time {
	started := make(chan struct{})
	done := make(chan chatResult, 1)
	go func() {
		done <- l.e.chat(ctx, l.sc, l.e.admin, "tiny", true, 200, func() { close(started) })
	}()
	<-started
	time.Sleep(300 * time.Millisecond) // a few tokens in: the chat is under way
	killed := time.Now()
	l.sb.agent.kill()
	select {
	case c := <-done:
		ended := time.Since(killed)
		if c.ok() && c.errText == "" {
			t.Errorf("the chat in flight ended as if nothing happened: %s", c)
		} else if !strings.Contains(c.errText, "split tiny lost member sb: ") {
			t.Errorf("the chat in flight's error does not name the split and the member lost: %s", c)
		}
		if ended > 5*time.Second {
			t.Errorf("the chat in flight ended %.1fs after the kill, want within 5 s", ended.Seconds())
		}
		note("the chat in flight ended %.2fs after the kill: %s", ended.Seconds(), c)
	case <-time.After(10 * time.Second):
		t.Error("the chat in flight did not end within 10 s of the kill")
	}
	return killed
}

func (l *splitLAN) restartWorker(ctx context.Context, t *testing.T, note func(string, ...any)) {
	sb := l.sb
	if err := sb.start(); err != nil {
		t.Fatal(err)
	}
	d, err := eventually(ctx, 60*time.Second, func(ctx context.Context) (bool, string) {
		if sb.agent.exited() {
			return false, "the agent exited"
		}
		return l.droppedPart(ctx, sb)
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, sb.agent.tail(30))
	}
	note("sb restored, then dropped its stale part, %.1fs after its restart", d.Seconds())
}

// droppedPart says whether a holds no part of a split and runs no engine.
func (l *splitLAN) droppedPart(ctx context.Context, a *agentHost) (bool, string) {
	ps, err := l.e.client(l.e.laptop, a, l.e.admin).Placements(ctx)
	if err != nil {
		return false, err.Error()
	}
	for _, q := range ps {
		if q.Part != nil {
			return false, fmt.Sprintf("%s still has part %s (%s)", a.Name, q.ID, q.State)
		}
	}
	if left := engines(a.NS); len(left) > 0 {
		return false, fmt.Sprintf("%s still runs %v", a.Name, left)
	}
	return true, ""
}

func (l *splitLAN) deleteSplit(ctx context.Context, t *testing.T) {
	if r := l.e.mesh(ctx, "delete", l.p.ID); r.code != 0 {
		t.Fatalf("delete: %s", r)
	}
	if _, err := eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, string) {
		for _, a := range l.hosts {
			if left := engines(a.NS); len(left) > 0 {
				return false, fmt.Sprintf("%s still runs %v", a.Name, left)
			}
		}
		return true, ""
	}); err != nil {
		t.Error(err)
	}
}

// bigModel makes make_gguf.py's "big" random model (8 layers, ~300 MB): more than any of the
// hosts' budgets holds with llama-server, and slow enough a token for a chat to be in flight
// when a member dies.
func bigModel(t *testing.T, engines, dir string) string {
	return makeModel(t, engines, filepath.Join(dir, "big.gguf"), "--preset", "big")
}

// skipUnlessModelMaker skips t, saying why, unless make_gguf.py can run here.
func skipUnlessModelMaker(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy").Run(); err != nil {
		t.Skipf("making a bigger model needs /usr/bin/python3 with numpy (python3-numpy): %v", err)
	}
}

// makeModel writes a random-weight model with make_gguf.py's args to out.
func makeModel(t *testing.T, engines, out string, args ...string) string {
	t.Helper()
	skipUnlessModelMaker(t)
	cmd := exec.Command("/usr/bin/python3", append([]string{filepath.Join(engines, "make_gguf.py"), "--gguf-py", filepath.Join(engines, "gguf-py"),
		"--vocab", filepath.Join(engines, "ggml-vocab-llama-spm.gguf"), "--out", out}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make_gguf.py: %v: %s", err, b)
	}
	return out
}

// startSplitAgents starts a mesh of agents on new hosts of the given names, each with the real
// llama-server and ggml-rpc-server and the given memory budget, and the laptop; it returns once
// every agent sees every other alive with its rpc-server.
func startSplitAgents(ctx context.Context, t *testing.T, e *env, llama, budget string, note func(string, ...any), names ...string) []*agentHost {
	t.Helper()
	var nets []*netHost
	for _, n := range names {
		nets = append(nets, e.lab.addHost(n, true))
	}
	e.laptop = e.lab.addHost("laptop", true)
	var err error
	if e.join, e.admin, err = e.initMesh(ctx, nets[0], filepath.Join(nets[0].Dir, "state")); err != nil {
		t.Fatal(err)
	}
	e.sealClients(t, append(nets, e.laptop)...)
	var hosts []*agentHost
	for _, h := range nets {
		a := e.newAgent(h, e.join, demoRoot(t, h, "gpu-server"), "linux", "amd64",
			"--runtimes", "llama-server", "--llama-server", llama, "--memory-budget", budget)
		if err := a.start(); err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, a)
	}
	for _, a := range hosts {
		d, err := eventually(ctx, 60*time.Second, func(ctx context.Context) (bool, string) {
			if a.agent.exited() {
				return false, "the agent exited:\n" + a.agent.tail(30)
			}
			v, err := e.view(ctx, a)
			if err != nil {
				return false, err.Error()
			}
			for _, o := range hosts {
				m, ok := member(v, o.Name)
				if !ok || m.Liveness != api.Alive || m.Host == nil || m.Host.RPCProtocol() == "" {
					return false, o.Name + " not seen alive with its RPC runtime by " + a.Name
				}
			}
			return true, ""
		})
		if err != nil {
			t.Fatalf("%s: %v", a.Name, err)
		}
		note("%s sees every host with its rpc-server after %.1fs", a.Name, d.Seconds())
	}
	return hosts
}

// placeSplit places model as a split named name from the laptop, with `mesh place`'s further
// args, and waits until it is ready; the progress mesh place printed is in stderr.
func placeSplit(ctx context.Context, t *testing.T, e *env, model, name string, args ...string) (p api.Placement, stderr string) {
	t.Helper()
	var doc struct {
		Placement *api.Placement `json:"placement"`
		Error     *api.Error     `json:"error"`
	}
	r, err := e.meshJSON(ctx, &doc, append([]string{"place", "file://" + model, "--name", name, "--context", "256", "--split", "--wait"}, args...)...)
	if err != nil || doc.Placement == nil || doc.Placement.State != api.StateReady {
		t.Fatalf("split placement: %v\n%s", err, r)
	}
	return *doc.Placement, r.stderr
}

func splitHosts(p api.Placement) []string {
	var out []string
	if p.Split != nil {
		for _, m := range p.Split.Members {
			out = append(out, m.Host)
		}
	}
	return out
}

// scanPorts dials every TCP port of addr from inside from's namespace and returns the open
// ones: each worker enters the namespace once and dials its share of the ports.
func scanPorts(from *netHost, addr string) []int {
	const workers = 32
	var mu sync.Mutex
	var open []int
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			_ = netnslab.Enter(from.NS, func() error {
				for port := 1 + w; port <= 65535; port += workers {
					c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, strconv.Itoa(port)), 500*time.Millisecond)
					if err == nil {
						c.Close()
						mu.Lock()
						open = append(open, port)
						mu.Unlock()
					}
				}
				return nil
			})
		})
	}
	wg.Wait()
	slices.Sort(open)
	return open
}

// engines lists the llama.cpp processes running in namespace ns.
func engines(ns string) []string {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	var names []string
	for _, f := range strings.Fields(string(out)) {
		exe, err := os.Readlink("/proc/" + f + "/exe")
		if err != nil {
			continue
		}
		if b := filepath.Base(exe); b == "llama-server" || b == "ggml-rpc-server" {
			names = append(names, b+" "+f)
		}
	}
	return names
}
