package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// keptModel is the name the intents run places its file model under.
const keptModel = "kept"

// TestLANIntents: what the mesh keeps running survives its hosts. Three agents, red, green and
// blue (llama-server on each, one file every host can read; Ollama on blue) and a laptop, on a LAN of network
// namespaces with mDNS:
//
//   - an intent of two replicas survives the kill -9 of a replica's host: chats through the third
//     host fail over, and the third host places the missing replica (the time from the kill to
//     two replicas serving again is measured: detection ≤ 5 s + 5 s is the target);
//   - the killed host comes back with its old replica, and removes it: no surplus;
//   - a partition and its heal leave two replicas, no surplus;
//   - the official Ollama JS client pulls a model that was nowhere, then chats with it;
//   - `mesh run` places a model and chats;
//   - a placement with a short ttl sleeps, and a chat wakes it.
func TestLANIntents(t *testing.T) {
	skipUnlessLAN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	l := startIntentsLAN(ctx, t)
	e := l.e

	t.Run("place two replicas", func(t *testing.T) { l.placeTwoReplicas(ctx, t) })
	if l.third == nil {
		t.FailNow()
	}
	e.box = l.third
	t.Run("kill -9 of a replica's host", func(t *testing.T) { l.killFirstReplicaHost(ctx, t) })
	t.Run("kill -9 of the other", func(t *testing.T) { l.killOtherReplicaHost(ctx, t) })
	e.box = l.third
	t.Run("partition and heal", func(t *testing.T) { l.partitionAndHeal(ctx, t) })
	t.Run("ollama JS client pulls a model that was nowhere, then chats", func(t *testing.T) { l.ollamaJSPull(ctx, t) })
	t.Run("a flood for an unplaceable model", func(t *testing.T) { l.floodUnplaceable(ctx, t) })
	t.Run("mesh run", func(t *testing.T) { l.meshRun(ctx, t) })
	t.Run("ttl sleep and wake", func(t *testing.T) { l.ttlSleepAndWake(ctx, t) })
}

// intentsLAN is TestLANIntents' LAN and what its steps learn of it.
type intentsLAN struct {
	e     *env
	nets  []*netHost   // red, green, blue
	hosts []*agentHost // their agents, in that order
	file  string       // the GGUF file every host reads
	// replicaHosts name the hosts holding the kept model's replicas; third holds none: chats go
	// through it.
	replicaHosts []string
	third        *agentHost
}

// startIntentsLAN starts the three agents and the laptop, waits until every agent sees the
// others alive, and watches each one's events from the laptop.
func startIntentsLAN(ctx context.Context, t *testing.T) *intentsLAN {
	dir := t.TempDir()
	e := newEnv(t, dir)
	if err := buildPrograms(e.bin); err != nil {
		t.Fatal(err)
	}
	l := &intentsLAN{e: e}
	l.nets = []*netHost{e.lab.addHost("red", true), e.lab.addHost("green", true), e.lab.addHost("blue", true)}
	e.laptop = e.lab.addHost("laptop", true)
	var err error
	if e.join, e.admin, err = e.initMesh(ctx, l.nets[0], filepath.Join(l.nets[0].Dir, "state")); err != nil {
		t.Fatal(err)
	}
	e.sealClients(t, append(slices.Clone(l.nets), e.laptop)...)
	registry := l.nets[2].Addr + ":11435"
	gguf := filepath.Join(dir, "gguf") // one file every host reads: "the file is already there"
	if l.file, err = writeGGUF(gguf, "sim-1b"); err != nil {
		t.Fatal(err)
	}
	for _, h := range l.nets {
		args := []string{"--runtimes", "llama-server", "--llama-server", e.prog("llama-server"), "--gguf-dir", gguf,
			"--memory-budget", "8GiB", "--on-demand", "*"}
		if h.Name == "blue" {
			args = []string{"--runtimes", "llama-server,ollama", "--llama-server", e.prog("llama-server"), "--gguf-dir", gguf,
				"--memory-budget", "8GiB", "--on-demand", "*", "--ollama-url", ollamaURL}
		}
		// The Ollama registry (the simulator's, on blue's LAN address) is where every agent sizes
		// an Ollama model, as every host reaches the real one.
		args = append(args, "--ollama-registry", "http://"+registry, "--allow-private-downloads")
		a := e.newAgent(h, e.join, demoRoot(t, h, "gpu-server"), "linux", "amd64", args...)
		a.extra = append(a.extra, "LLAMA_SIM_LOAD_DELAY=200ms", "LLAMA_SIM_TOKENS_PER_SEC=200", "LLAMA_SIM_TTFT=20ms")
		if h.Name == "blue" {
			if err := a.startEngine(ctx, "ollama-sim", nil, ollamaURL+"/api/version",
				"--addr", strings.TrimPrefix(ollamaURL, "http://"), "--registry-addr", registry,
				"--pull-rate", "0", "--load-delay", "200ms", "--tokens-per-sec", "50", "--ttft", "20ms"); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.start(); err != nil {
			t.Fatal(err)
		}
		l.hosts = append(l.hosts, a)
	}
	e.box = l.hosts[2] // the laptop's commands go through blue until the hosts' roles are known
	for _, a := range l.hosts {
		if _, err := eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, string) { return l.converged(ctx, a) }); err != nil {
			t.Fatalf("%s: %v\n%s", a.Name, err, a.agent.tail(20))
		}
	}
	for _, a := range l.hosts { // a killed host's stream ends: the others' go on
		e.events.watch(ctx, e.laptop, a.apiURL(), e.admin, a.Name)
	}
	return l
}

// converged says whether a's view shows every agent of the LAN alive with its state.
func (l *intentsLAN) converged(ctx context.Context, a *agentHost) (bool, string) {
	v, err := l.e.view(ctx, a)
	if err != nil {
		return false, err.Error()
	}
	for _, o := range l.hosts {
		m, ok := member(v, o.Name)
		if !ok || m.Liveness != api.Alive || m.Host == nil {
			return false, fmt.Sprintf("%s sees %s as %q", a.Name, o.Name, m.Liveness)
		}
	}
	return true, ""
}

// replicas are the hosts with a ready replica of the kept model, as agent from sees them.
func (l *intentsLAN) replicas(ctx context.Context, from *agentHost) ([]string, error) {
	v, err := l.e.view(ctx, from)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range v.Members {
		for _, p := range m.Placements {
			if p.Model == keptModel && p.State == api.StateReady && m.Liveness == api.Alive {
				out = append(out, m.Name)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// waitReplicas waits until the replicas from sees are what want accepts, and returns them and
// how long that took.
func (l *intentsLAN) waitReplicas(ctx context.Context, t *testing.T, from *agentHost, within time.Duration, want func([]string) bool) ([]string, time.Duration) {
	t.Helper()
	var got []string
	took, err := eventually(ctx, within, func(ctx context.Context) (bool, string) {
		var err error
		got, err = l.replicas(ctx, from)
		if err != nil {
			return false, err.Error()
		}
		return want(got), fmt.Sprintf("%s sees ready replicas on %v", from.Name, got)
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, took
}

func (l *intentsLAN) byName(t *testing.T, n string) *agentHost {
	for _, a := range l.hosts {
		if a.Name == n {
			return a
		}
	}
	t.Fatalf("no host %s", n)
	return nil
}

func (l *intentsLAN) placeTwoReplicas(ctx context.Context, t *testing.T) {
	e := l.e
	r := e.mesh(ctx, "place", "file://"+l.file, "--host", "red", "--replicas", "2", "--name", keptModel, "--wait")
	if r.code != 0 {
		t.Fatal(r)
	}
	l.replicaHosts, _ = l.waitReplicas(ctx, t, l.hosts[0], 20*time.Second, func(h []string) bool { return len(h) == 2 })
	for _, a := range l.hosts {
		if !slices.Contains(l.replicaHosts, a.Name) {
			l.third = a
		}
	}
	t.Logf("replicas on %v; chats go through %s", l.replicaHosts, l.third.Name)
	r = e.mesh(ctx, "models")
	if !strings.Contains(r.stdout, keptModel+" wants 2, has 2") {
		t.Errorf("mesh models does not say wants 2, has 2: %s", r)
	}
}

func (l *intentsLAN) killFirstReplicaHost(ctx context.Context, t *testing.T) {
	victim := l.byName(t, l.replicaHosts[1])
	if victim.Name == l.third.Name {
		victim = l.byName(t, l.replicaHosts[0])
	}
	l.killAndComeBack(ctx, t, victim, l.third)
	l.replicaHosts = []string{l.third.Name}
	for _, a := range l.hosts {
		if a != victim && a != l.third {
			l.replicaHosts = append(l.replicaHosts, a.Name)
		}
	}
	l.third = victim
}

func (l *intentsLAN) killOtherReplicaHost(ctx context.Context, t *testing.T) {
	// The replicas are on the chat host of the first kill and the one of the first two not
	// killed; the one killed first, back, holds none: chats go through it now.
	other := l.byName(t, l.replicaHosts[1])
	l.killAndComeBack(ctx, t, other, l.third)
	l.third = other
}

// killAndComeBack kills victim, a replica's host, with SIGKILL while chats go through via,
// which holds no replica; the missing replica is placed again (on via: the only host left)
// and the victim, restarted, removes its superseded one.
func (l *intentsLAN) killAndComeBack(ctx context.Context, t *testing.T, victim, via *agentHost) {
	l.killReplica(ctx, t, victim, via)
	l.comeBack(ctx, t, victim, via)
}

// failoverChat is the outcome of one chat through the chat host while a replica's host dies.
type failoverChat struct {
	ok  bool
	why string
	at  time.Time
}

// chatUntil chats with the kept model through via, one chat after the other, until stop is
// closed; the outcomes' channel is closed after the last.
func (l *intentsLAN) chatUntil(ctx context.Context, via *agentHost, stop <-chan struct{}) <-chan failoverChat {
	results := make(chan failoverChat, 1000)
	go func() {
		defer close(results)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c := l.e.chat(ctx, via, l.e.admin, keptModel, true, 4, nil)
			results <- failoverChat{c.ok(), c.String(), time.Now()}
		}
	}()
	return results
}

// killReplica kills victim while chats go through via, and checks that the missing replica is
// placed again within 5 s of the death being seen and that chats are answered meanwhile.
func (l *intentsLAN) killReplica(ctx context.Context, t *testing.T, victim, via *agentHost) {
	e := l.e
	stop := make(chan struct{})
	results := l.chatUntil(ctx, via, stop)
	kill := time.Now()
	victim.agent.kill()
	got, took := l.waitReplicas(ctx, t, via, 30*time.Second, func(h []string) bool {
		return len(h) == 2 && !slices.Contains(h, victim.Name)
	})
	close(stop)
	dead, okDead := waitEvent(ctx, e, "dead", victim.Name, kill, 10*time.Second)
	for _, ev := range e.events.mesh("suspect", victim.Name, kill) {
		t.Logf("%s suspect at +%.2fs", victim.Name, ev.at.Sub(kill).Seconds())
	}
	for _, k := range []string{"dead", "left", "unreachable"} {
		for _, ev := range e.events.mesh(k, victim.Name, kill) {
			t.Logf("%s %s at +%.2fs: %s", victim.Name, k, ev.at.Sub(kill).Seconds(), ev.ev.Message)
		}
	}
	var okN, failN int
	var lastFail string
	var failed []float64
	for r := range results {
		if r.ok {
			okN++
		} else {
			failN++
			lastFail = r.why
			failed = append(failed, r.at.Sub(kill).Seconds())
		}
	}
	span := ""
	if len(failed) > 0 {
		span = fmt.Sprintf(" from +%.2fs to +%.2fs", failed[0], failed[len(failed)-1])
	}
	t.Logf("kill -9 %s: dead after %s; two replicas serve again (%v) %.2fs after the kill; chats through %s meanwhile: %d answered, %d failed%s (last: %s)",
		victim.Name, since(dead, kill, okDead), got, took.Seconds(), via.Name, okN, failN, span, lastFail)
	if okDead && took-dead.Sub(kill) > 5*time.Second {
		t.Errorf("re-placed %.2fs after the death was seen, want within 5 s", (took - dead.Sub(kill)).Seconds())
	}
	if okN == 0 {
		t.Errorf("no chat through %s was answered during the window", via.Name)
	}
	c := e.chat(ctx, via, e.admin, keptModel, true, 4, nil)
	if !c.ok() {
		t.Errorf("chat after the re-placement: %s", c)
	}
}

// comeBack restarts victim, which comes back with its old replica and removes it: two remain.
func (l *intentsLAN) comeBack(ctx context.Context, t *testing.T, victim, via *agentHost) {
	e := l.e
	back := time.Now()
	if err := victim.start(); err != nil {
		t.Fatal(err)
	}
	if _, err := eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, string) { return l.converged(ctx, victim) }); err != nil {
		t.Fatal(err)
	}
	l.waitReplicas(ctx, t, via, 30*time.Second, func(h []string) bool { return len(h) == 2 && !slices.Contains(h, victim.Name) })
	own, err := e.client(e.laptop, victim, e.admin).Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range own {
		if p.Model == keptModel && !p.State.Terminal() {
			l.waitOldReplicaRemoved(ctx, t, victim)
		}
	}
	t.Logf("%s came back: its old replica superseded and removed %.2fs after its start", victim.Name, time.Since(back).Seconds())
}

// waitOldReplicaRemoved waits until victim, come back, holds no replica of the kept model, and
// otherwise reports its intents and its view.
func (l *intentsLAN) waitOldReplicaRemoved(ctx context.Context, t *testing.T, victim *agentHost) {
	e := l.e
	// It must go, once its keeper sees the others' replicas: within a few gossip rounds
	// of its start (it took 3 s). It once stayed over 20 s: the others' views showed it
	// with its previous run's document (its old start time), so a live host's keeper
	// removed its own replica instead (mesh: TestRestartedMemberIsNotShownWithItsPreviousRun).
	_, err := eventually(ctx, 20*time.Second, func(ctx context.Context) (bool, string) {
		ps, err := e.client(e.laptop, victim, e.admin).Placements(ctx)
		return err == nil && !slices.ContainsFunc(ps, func(p api.Placement) bool { return p.Model == keptModel }), fmt.Sprintf("%s still holds %+v", victim.Name, ps)
	})
	if err == nil {
		return
	}
	sts, ierr := e.client(e.laptop, victim, e.admin).Intents(ctx)
	var seen []string
	if v, verr := e.view(ctx, victim); verr == nil {
		for _, m := range v.Members {
			var ps []string
			for _, p := range m.Placements {
				ps = append(ps, p.ID+"="+p.Model+"/"+string(p.State))
			}
			seen = append(seen, fmt.Sprintf("%s %s gen %d: %v", m.Name, m.Liveness, hostGen(m), ps))
		}
	}
	t.Errorf("%v\n%s's intents: %+v %v\n%s's view: %s\n%s", err, victim.Name, sts, ierr, victim.Name, strings.Join(seen, "; "), victim.agent.tail(30))
}

func (l *intentsLAN) partitionAndHeal(ctx context.Context, t *testing.T) {
	cur, err := l.replicas(ctx, l.third)
	if err != nil {
		t.Fatal(err)
	}
	cutHost := l.byName(t, cur[0])
	if err := cutHost.setLink(false); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	other := l.third
	if other.Name == cutHost.Name {
		other = l.byName(t, cur[1])
	}
	_, took := l.waitReplicas(ctx, t, other, 40*time.Second, func(h []string) bool { return len(h) == 2 && !slices.Contains(h, cutHost.Name) })
	t.Logf("%s cut: the other side has two replicas again %.2fs later", cutHost.Name, took.Seconds())
	if err := cutHost.setLink(true); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	l.waitReplicas(ctx, t, other, 60*time.Second, func(h []string) bool { return len(h) == 2 })
	for _, a := range l.hosts { // every host sees every other alive and answering again
		if _, err := eventually(ctx, 60*time.Second, func(ctx context.Context) (bool, string) { return l.converged(ctx, a) }); err != nil {
			t.Fatal(err)
		}
	}
	// Settled: every host sees exactly two replicas, for a while, none left over anywhere.
	if _, err := eventually(ctx, 60*time.Second, l.twoReplicasHeld); err != nil {
		t.Fatal(err)
	}
	t.Logf("healed %.1fs after the cut; two replicas and no surplus %.2fs after the heal", healed.Sub(cut).Seconds(), time.Since(healed).Seconds())
}

// twoReplicasHeld says whether the hosts hold exactly two replicas of the kept model between
// them, by their own placements.
func (l *intentsLAN) twoReplicasHeld(ctx context.Context) (bool, string) {
	held := 0
	for _, a := range l.hosts {
		ps, err := l.e.client(l.e.laptop, a, l.e.admin).Placements(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range ps {
			if p.Model == keptModel && !p.State.Terminal() {
				held++
			}
		}
	}
	return held == 2, fmt.Sprintf("%d replicas held across the hosts", held)
}

func (l *intentsLAN) ollamaJSPull(ctx context.Context, t *testing.T) {
	node, err := exec.LookPath("node")
	js, _ := filepath.Abs(filepath.Join("..", "agent", "gateway", "testdata", "jsclients"))
	if err != nil {
		t.Skip("node is not installed")
	}
	if _, err := os.Stat(filepath.Join(js, "node_modules")); err != nil {
		t.Skipf("the JS clients are not installed: run `npm ci` in %s", js)
	}
	// From red's loopback, where the gateway serves plain HTTP: the model runs only on blue.
	start := time.Now()
	out, stderr, code, err := l.nets[0].run(ctx, []string{"GATEWAY=http://127.0.0.1:7777", "TOKEN=" + l.e.admin, "MODEL=qwen2.5:0.5b"}, node, filepath.Join(js, "pull.mjs"))
	if err != nil || code != 0 {
		t.Fatalf("node pull.mjs: exit %d %v\n%s\n%s", code, err, out, stderr)
	}
	t.Logf("pull then chat of qwen2.5:0.5b through red in %.2fs:\n%s", time.Since(start).Seconds(), out)
}

func (l *intentsLAN) floodUnplaceable(ctx context.Context, t *testing.T) {
	e := l.e
	const n = 30
	type answer struct {
		c  chatResult
		at time.Duration
	}
	answers := make(chan answer, n)
	start := time.Now()
	for range n {
		go func() {
			c := e.chat(ctx, l.third, e.admin, "no-such-model:7b", false, 4, nil)
			answers <- answer{c, time.Since(start)}
		}()
	}
	var slowest time.Duration
	for range n {
		a := <-answers
		if a.c.status != http.StatusNotFound || !strings.Contains(a.c.errText, "no host can place it on demand") {
			t.Errorf("a chat for a model no host can place: %s", a.c)
		}
		slowest = max(slowest, a.at)
	}
	var doc struct {
		Placements []api.Placement    `json:"placements"`
		Intents    []api.IntentStatus `json:"intents"`
	}
	if _, err := e.meshJSON(ctx, &doc, "models"); err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Placements {
		if strings.Contains(p.Model, "no-such-model") {
			t.Errorf("placed for the flood: %+v", p)
		}
	}
	for _, in := range doc.Intents {
		if strings.Contains(in.Name, "no-such-model") {
			t.Errorf("an intent for the flood: %+v", in)
		}
	}
	t.Logf("%d chats for a model no host can place: every one refused with the reason, the last after %.2fs; nothing placed", n, slowest.Seconds())
}

func (l *intentsLAN) meshRun(ctx context.Context, t *testing.T) {
	r := l.e.mesh(ctx, "run", "llama3.2:1b", "hello")
	if r.code != 0 || strings.TrimSpace(r.stdout) == "" {
		t.Fatal(r)
	}
	t.Logf("mesh run llama3.2:1b answered in %.2fs", r.took.Seconds())
}

func (l *intentsLAN) ttlSleepAndWake(ctx context.Context, t *testing.T) {
	e := l.e
	r := e.mesh(ctx, "place", "file://"+l.file, "--host", l.third.Name, "--name", "sleepy", "--ttl", "1s", "--wait")
	if r.code != 0 {
		t.Fatal(r)
	}
	// Its one replica sleeps, wherever the mesh keeps it (a transient second replica, placed
	// by a host whose view lagged, is settled meanwhile: see the report).
	if _, err := eventually(ctx, 20*time.Second, func(ctx context.Context) (bool, string) {
		v, err := e.view(ctx, l.third)
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for _, m := range v.Members {
			for _, p := range m.Placements {
				if p.Model == "sleepy" {
					states = append(states, m.Name+": "+string(p.State))
				}
			}
		}
		return len(states) == 1 && strings.HasSuffix(states[0], string(api.StateSleeping)), fmt.Sprintf("sleepy: %v", states)
	}); err != nil {
		t.Fatal(err)
	}
	c := e.chat(ctx, l.third, e.admin, "sleepy", true, 4, nil)
	if !c.ok() {
		t.Fatalf("chat with the sleeping model: %s", c)
	}
	t.Logf("a chat woke the sleeping model and was answered in %.2fs", c.took.Seconds())
}

// hostGen is a member's state generation, 0 before its state arrived.
func hostGen(m api.Member) uint64 {
	if m.Host == nil {
		return 0
	}
	return m.Host.Generation
}
