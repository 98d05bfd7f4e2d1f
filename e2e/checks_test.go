package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
)

// Models the run places, one per runtime, and the team-a one of the namespace check.
const (
	hailoModel  = "qwen2.5-instruct:1.5b"
	llamaModel  = "llama-1b"
	ollamaModel = "qwen2.5:0.5b"
	teamModel   = "llama3.2:1b"
	teamNS      = "team-a"
)

type note = func(format string, args ...any)

// startLAN makes the hosts, their engines and agents: a Pi 5 with a Hailo-10H (hailo-sim) and
// no default route, an x86 server with llama-server and Ollama, a third agent with no engine,
// and the laptop. Every agent finds the others by mDNS alone. The simulated Hailo library and
// Ollama registry serve on their host's loopback, a local mirror: those agents may size and pull
// from private addresses.
func (e *env) startLAN(ctx context.Context, t *testing.T, n note) {
	l := e.lab
	pi := l.addHost("pi5", false)
	x86 := l.addHost("x86", true)
	box := l.addHost("box", true)
	e.laptop = l.addHost("laptop", true)

	var err error
	e.join, e.admin, err = e.initMesh(ctx, pi, filepath.Join(pi.Dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	e.sealClients(t, pi, x86, box, e.laptop)

	hailoHome := filepath.Join(pi.Dir, "hailo-home")
	e.pi = e.newAgent(pi, e.join, demoRoot(t, pi, "pi5-hailo"), "linux", "arm64",
		"--runtimes", "hailo-ollama", "--hailo-url", hailoURL,
		"--hailo-manifests-dir", filepath.Join(hailoHome, ".local", "share", "hailo-ollama", "models", "manifests"),
		"--hailo-library-url", "http://"+hailoLib, "--allow-private-downloads")
	if err := e.pi.startEngine(ctx, "hailo-sim", nil, hailoURL+"/hailo/v1/list",
		"--version", "5.3.0", "--home", hailoHome, "--listen", strings.TrimPrefix(hailoURL, "http://"), "--library-listen", hailoLib,
		"--tokens-per-second", "50", "--ttft", "50ms", "--load-time", "300ms", "--switch-delay", "200ms"); err != nil {
		t.Fatal(err)
	}

	gguf := filepath.Join(x86.Dir, "gguf")
	if _, err := writeGGUF(gguf, "sim-1b"); err != nil {
		t.Fatal(err)
	}
	e.x86 = e.newAgent(x86, e.join, demoRoot(t, x86, "gpu-server"), "linux", "amd64",
		"--runtimes", "llama-server,ollama", "--llama-server", e.prog("llama-server"), "--gguf-dir", gguf,
		"--ollama-url", ollamaURL, "--ollama-registry", "http://"+ollamaReg, "--memory-budget", "8GiB", "--allow-private-downloads")
	e.x86.extra = append(e.x86.extra, "LLAMA_SIM_LOAD_DELAY=200ms", "LLAMA_SIM_TOKENS_PER_SEC=50", "LLAMA_SIM_TTFT=50ms")
	if err := e.x86.startOllama(ctx); err != nil {
		t.Fatal(err)
	}

	e.box = e.newAgent(box, e.join, fixtureRoot(t, "container-2g"), "linux", "amd64")

	for _, a := range e.agents() {
		if err := a.start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range e.agents() {
		_, err := eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, string) {
			if a.agent.exited() {
				return false, "the agent exited:\n" + a.agent.tail(30)
			}
			code, _, err := e.laptop.get(ctx, a.apiURL()+"/healthz", "")
			if err != nil {
				return false, err.Error()
			}
			return code == http.StatusOK, fmt.Sprintf("/healthz answered %d", code)
		})
		if err != nil {
			t.Fatalf("%s: %v", a.Name, err)
		}
		n("%s API up %.2fs after its start", a.Name, time.Since(a.started).Seconds())
	}
	// The run watches pi5's and box's events throughout (they are never killed).
	for _, a := range []*agentHost{e.pi, e.box} {
		e.events.watch(ctx, e.laptop, a.apiURL(), e.admin, a.Name)
	}
}

func (e *env) agents() []*agentHost { return []*agentHost{e.pi, e.x86, e.box} }

// startOllama runs the Ollama simulator on x86 at 4 tokens/s, slow enough for a chat to be in
// flight when a fault strikes (its answers run 8-39 tokens). preloaded are the models a
// restarted daemon still has on disk.
func (a *agentHost) startOllama(ctx context.Context, preloaded ...string) error {
	return a.startEngine(ctx, "ollama-sim", nil, ollamaURL+"/api/version",
		"--addr", strings.TrimPrefix(ollamaURL, "http://"), "--registry-addr", ollamaReg, "--preloaded", strings.Join(preloaded, ","),
		"--pull-rate", "0", "--load-delay", "200ms", "--tokens-per-sec", "4", "--ttft", "50ms")
}

var checks = []struct {
	name string
	run  func(ctx context.Context, t *testing.T, e *env, n note)
}{
	{"discovery by mDNS", checkDiscovery},
	{"advertised addresses dial back", checkDialBack},
	{"console joins by mDNS", checkConsoleMDNS},
	{"interactive console by mDNS", checkInteractiveConsole},
	{"place one model per runtime", checkPlace},
	{"chat through another gateway", checkChat},
	{"a laptop that reaches one agent", checkRemoteLaptop},
	{"nothing crosses the LAN in the clear", checkSealed},
	{".local names from the laptop", checkLocalNames},
	{"doctor on a healthy mesh", checkHealthyDoctor},
	{"namespace isolation", checkNamespaces},
	{"admission before pull", checkAdmission},
	{"CPU load: no false suspicion", checkCPULoad},
	{"kill -9 and restart an agent", checkCrash},
	{"15s link cut mid-chat", checkLinkCut},
	{"dead engine", checkDeadEngine},
	{"stranger's join string", checkStranger},
	{"wrong advertised addresses", checkWrongAdvertisement},
}

// converged says whether a's view shows every agent alive with its state and engines.
func (e *env) converged(ctx context.Context, a *agentHost) (bool, string) {
	v, err := e.view(ctx, a)
	if err != nil {
		return false, err.Error()
	}
	for _, o := range e.agents() {
		m, ok := member(v, o.Name)
		if !ok || m.Liveness != api.Alive || m.Host == nil {
			return false, fmt.Sprintf("%s sees %s as %+v", a.Name, o.Name, m.Liveness)
		}
	}
	return true, ""
}

func checkDiscovery(ctx context.Context, t *testing.T, e *env, n note) {
	for _, a := range e.agents() {
		if _, err := eventually(ctx, 20*time.Second, func(ctx context.Context) (bool, string) { return e.converged(ctx, a) }); err != nil {
			t.Fatalf("%s: %v\n%s", a.Name, err, a.agent.tail(20))
		}
		n("%s sees every agent alive %.2fs after its start", a.Name, time.Since(a.started).Seconds())
	}
}

func checkDialBack(ctx context.Context, t *testing.T, e *env, n note) {
	v, err := e.view(ctx, e.box)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range e.agents() {
		t.Run(a.Name, func(t *testing.T) {
			m, _ := member(v, a.Name)
			if m.Host == nil {
				t.Fatalf("box has no state of %s", a.Name)
			}
			adv := m.Host.APIAddr
			n("%s advertises %s", a.Name, adv)
			if want := fmt.Sprintf("%s:%d", a.Addr, apiPort); adv != want {
				t.Errorf("%s advertises its API as %s; peers reach it at %s", a.Name, adv, want)
			}
			// From every other host, the advertised address answers as that host.
			for _, from := range []*netHost{e.laptop, e.pi.netHost, e.x86.netHost, e.box.netHost} {
				if from == a.netHost {
					continue
				}
				code, body, err := from.get(ctx, "https://"+adv+"/v1/host", e.admin)
				var h api.Host
				if err == nil && code == http.StatusOK {
					err = json.Unmarshal(body, &h)
				}
				switch {
				case err != nil:
					t.Errorf("%s's advertised %s from %s: %v", a.Name, adv, from.Name, err)
				case code != http.StatusOK:
					t.Errorf("%s's advertised %s from %s: HTTP %d", a.Name, adv, from.Name, code)
				case h.Name != a.Name:
					t.Errorf("%s's advertised %s reached from %s answers as %q", a.Name, adv, from.Name, h.Name)
				}
			}
		})
	}
}

func checkConsoleMDNS(ctx context.Context, t *testing.T, e *env, n note) {
	var doc struct {
		Mode  string       `json:"mode"`
		Hosts []api.Member `json:"hosts"`
	}
	r := e.console(ctx, "mesh", "hosts", "--mdns", "--json", "--timeout", "20s")
	if r.code != 0 {
		t.Fatalf("the console could not join by mDNS: %s", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("%v: %s", err, r)
	}
	for _, a := range e.agents() {
		i := slices.IndexFunc(doc.Hosts, func(m api.Member) bool { return m.Name == a.Name })
		if i < 0 || doc.Hosts[i].Liveness != api.Alive {
			t.Errorf("mesh hosts --mdns does not show %s alive: %s", a.Name, r)
		}
	}
	n("mesh hosts --mdns: %d hosts in %.2fs (mode %s)", len(doc.Hosts), r.took.Seconds(), doc.Mode)
	if !t.Failed() {
		e.viaMDNS = true
	}
}

func checkPlace(ctx context.Context, t *testing.T, e *env, n note) {
	if !e.viaMDNS {
		n("the laptop's commands act through box's API: the console could not join by mDNS")
	}
	for _, p := range []struct {
		host         *agentHost
		source, name string
		runtime      api.Runtime
	}{
		{e.pi, "hailo://" + hailoModel, hailoModel, api.RuntimeHailoOllama},
		{e.x86, "file://" + filepath.Join(e.x86.Dir, "gguf", "sim-1b.gguf"), llamaModel, api.RuntimeLlamaServer},
		{e.x86, "ollama://" + ollamaModel, ollamaModel, api.RuntimeOllama},
	} {
		t.Run(string(p.runtime), func(t *testing.T) {
			args := []string{"place", p.source, "--host", p.host.Name, "--wait", "--timeout", "60s"}
			if p.runtime == api.RuntimeLlamaServer {
				args = append(args, "--name", p.name)
			}
			var doc struct {
				Placement api.Placement `json:"placement"`
			}
			r, err := e.meshJSON(ctx, &doc, args...)
			pl := doc.Placement
			if err != nil || r.code != 0 || pl.State != api.StateReady || pl.Host != p.host.Name || pl.Runtime != p.runtime || pl.Model != p.name {
				t.Fatalf("placing %s on %s: %v %s", p.source, p.host.Name, err, r)
			}
			n("%s (%s) ready on %s in %.2fs", pl.Model, pl.Runtime, pl.Host, r.took.Seconds())
			// Every agent routes it.
			for _, a := range e.agents() {
				if _, err := eventually(ctx, 10*time.Second, func(ctx context.Context) (bool, string) {
					code, body, err := e.laptop.get(ctx, a.apiURL()+"/v1/models", e.admin)
					if err != nil || code != http.StatusOK {
						return false, fmt.Sprint(code, err)
					}
					return strings.Contains(string(body), `"`+p.name+`"`), fmt.Sprintf("%s's /v1/models lacks %s: %s", a.Name, p.name, body)
				}); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func checkChat(ctx context.Context, t *testing.T, e *env, n note) {
	// box runs no engine: every model it answers for is another host's.
	for _, m := range []struct {
		model string
		owner *agentHost
	}{{hailoModel, e.pi}, {llamaModel, e.x86}, {ollamaModel, e.x86}} {
		t.Run(m.model, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				c := e.chat(ctx, e.box, e.admin, m.model, stream, 8, nil)
				if !c.ok() {
					t.Errorf("chat with %s through box (stream %v): %s", m.model, stream, c)
					continue
				}
				n("%s through box, stream %v: %d chunks in %.2fs", m.model, stream, c.chunks, c.took.Seconds())
			}
		})
	}
	// The headless chat, from the laptop.
	r := e.mesh(ctx, "chat", llamaModel, "Hello there", "--json", "--timeout", "30s")
	if r.code != 0 || !strings.Contains(r.stdout, `"done":true`) || !strings.Contains(r.stdout, `"host":"x86"`) {
		t.Errorf("mesh chat: %s", r)
	}
	n("mesh chat %s: %.2fs", llamaModel, r.took.Seconds())
}

// checkLocalNames reaches the mesh from the laptop by the agents' mDNS names
// (<node>.llmkube.local, answered by the agents themselves: no Avahi on this LAN): as a gossip
// seed, as --agent and as LLMKUBE_AGENT.
func checkLocalNames(ctx context.Context, t *testing.T, e *env, n note) {
	name := strings.TrimSuffix(discovery.MDNSHostName(e.box.Name), ".")
	hostsOK := func(r cliResult) bool {
		var doc struct {
			Hosts []api.Member `json:"hosts"`
		}
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &doc) == nil && len(doc.Hosts) >= len(e.agents())
	}
	r := e.console(ctx, "mesh", "hosts", "--json", "--join", name+":7946", "--timeout", "20s")
	if !hostsOK(r) {
		t.Errorf("a .local seed: %s", r)
	}
	n("--join %s:7946: %.2fs", name, r.took.Seconds())
	// A token holder without the join string reaches an agent over TLS with the mesh's CA.
	caFile := filepath.Join(e.laptop.Dir, "mesh-ca.pem")
	if err := e.writeCA(ctx, caFile); err != nil {
		t.Fatal(err)
	}
	for _, via := range []struct {
		what string
		args []string
		env  []string
	}{
		{"--agent", []string{"--agent", "https://" + name + ":7777", "--ca-file", caFile}, nil},
		{"LLMKUBE_AGENT", []string{"--ca-file", caFile}, []string{"LLMKUBE_AGENT=https://" + name + ":7777"}},
	} {
		t.Run(via.what, func(t *testing.T) {
			start := time.Now()
			args := append([]string{"mesh", "hosts", "--json", "--timeout", "20s"}, via.args...)
			out, errOut, code, err := e.laptop.run(ctx, append(via.env, "LLMKUBE_TOKEN="+e.admin), e.prog("llmkube-tui"), args...)
			r := cliResult{args: args, stdout: out, stderr: errOut, code: code, took: time.Since(start)}
			if err != nil || !hostsOK(r) {
				t.Fatalf("%s %s: %v %s", via.what, name, err, r)
			}
			n("%s https://%s:7777: %.2fs", via.what, name, r.took.Seconds())
		})
	}
}

// checkHealthyDoctor: on a healthy mesh the doctor reports no error (exit 0), so that its
// findings in the faults below mean something.
func checkHealthyDoctor(ctx context.Context, t *testing.T, e *env, n note) {
	text, r, err := e.doctorFindings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 || strings.Contains(text, "error:") {
		t.Errorf("the doctor finds errors in a healthy mesh: %s\n%s", text, r)
	}
	n("doctor in %.2fs: %d finding(s)%s", r.took.Seconds(), strings.Count(text, "\n"), strings.TrimSuffix("; "+strings.ReplaceAll(text, "\n", "; "), "; "))
}
