package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/assets"
	"github.com/llmkube/mesh/sim/gguf"
)

// Ports every host uses: each namespace has its own port space, as each machine does.
const (
	apiPort     = 7777
	hailoURL    = "http://127.0.0.1:8000"
	hailoLib    = "127.0.0.1:8001"
	ollamaURL   = "http://127.0.0.1:11434"
	ollamaReg   = "127.0.0.1:11435"
	meshID      = "e2e"
	programsPkg = "github.com/llmkube/mesh/cmd/"
)

// programs are the binaries the run builds and runs, as users run them.
var programs = []string{"llmkube-agent", "llmkube-tui", "hailo-sim", "llama-server-sim", "ollama-sim"}

// env is one run: the lab, its hosts, the mesh's secrets and what the run observed.
type env struct {
	t   *testing.T
	lab *lab
	bin string // built programs

	join, admin string

	pi, x86, box *agentHost // the agents
	laptop       *netHost   // the console's host: no agent

	// viaMDNS: the laptop's headless commands join by mDNS (once that is shown to work);
	// otherwise they act through box's API, as the README says to across subnets.
	viaMDNS bool

	// userTimings: agents check their engines at the program's own interval, as a user's do,
	// not every 500 ms, which the fault checks need to see a failure soon. A speed test
	// measures the steady state, where the checks' work shares the CPU with the engines.
	userTimings bool

	events *eventLog
}

// agentHost is a host running llmkube-agent and its engines.
type agentHost struct {
	*netHost
	env     *env
	args    []string
	extra   []string // environment for the agent
	agent   *proc
	engines map[string]*proc
	started time.Time
}

// buildPrograms builds every program into dir with the go command running the test.
func buildPrograms(dir string) error {
	pkgs := make([]string, len(programs))
	for i, p := range programs {
		pkgs[i] = programsPkg + p
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	// The agent finds llama-server by that name.
	return os.Rename(filepath.Join(dir, "llama-server-sim"), filepath.Join(dir, "llama-server"))
}

func (e *env) prog(name string) string { return filepath.Join(e.bin, name) }

// initMesh makes the mesh secret with `llmkube-agent init` in dir and returns the join string
// and admin token it printed.
func (e *env) initMesh(ctx context.Context, h *netHost, dir string) (join, admin string, err error) {
	out, stderr, code, err := h.run(ctx, nil, e.prog("llmkube-agent"), "init", "--mesh-id", meshID, "--state-dir", dir, "--allow-temp-store")
	if err != nil || code != 0 {
		return "", "", fmt.Errorf("llmkube-agent init: exit %d %v: %s", code, err, stderr)
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "join string: "); ok {
			join = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "admin token: "); ok {
			admin = strings.TrimSpace(v)
		}
	}
	if join == "" || admin == "" {
		return "", "", fmt.Errorf("llmkube-agent init printed no join string or token:\n%s", out)
	}
	return join, admin, nil
}

// newAgent prepares an agent on h: a recorded host root (a demo host or an hwprobe fixture),
// the run flags common to every agent, and the given ones.
func (e *env) newAgent(h *netHost, join, root, goos, arch string, args ...string) *agentHost {
	a := &agentHost{netHost: h, env: e, engines: map[string]*proc{}, extra: []string{"LLMKUBE_JOIN=" + join}}
	a.args = []string{"run",
		"--state-dir", filepath.Join(h.Dir, "state"), "--models-dir", filepath.Join(h.Dir, "models"), "--allow-temp-store",
		"--node-name", h.Name, "--listen", fmt.Sprintf(":%d", apiPort),
		"--hwprobe-root", root, "--hwprobe-os", goos, "--hwprobe-arch", arch,
		"--restart-backoff", "200ms",
	}
	if !e.userTimings {
		a.args = append(a.args, "--health-interval", "500ms")
	}
	a.args = append(a.args, args...)
	return a
}

// demoRoot extracts a demo host's recorded root under the host's folder.
func demoRoot(t *testing.T, h *netHost, name string) string {
	t.Helper()
	root, err := assets.ExtractDemoHost(name, filepath.Join(h.Dir, "hw"))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// fixtureRoot is an hwprobe test fixture.
func fixtureRoot(t *testing.T, name string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "hwprobe", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// writeGGUF writes a sparse GGUF file of a sim/gguf preset into dir.
func writeGGUF(dir, preset string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, p := range gguf.Presets() {
		if p.Name == preset {
			path := filepath.Join(dir, preset+".gguf")
			return path, gguf.Write(path, p)
		}
	}
	return "", fmt.Errorf("no GGUF preset %q", preset)
}

// startEngine runs a simulator on the host and waits until probe answers 200 inside its
// namespace.
func (a *agentHost) startEngine(ctx context.Context, name string, env []string, probe string, args ...string) error {
	p, err := a.spawn(name, env, a.env.prog(name), args...)
	if err != nil {
		return err
	}
	a.engines[name] = p
	_, err = eventually(ctx, 20*time.Second, func(ctx context.Context) (bool, string) {
		if p.exited() {
			return false, name + " exited:\n" + p.tail(20)
		}
		code, _, err := a.get(ctx, probe, "")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("%s answered %d", probe, code)
	})
	return err
}

// start runs the agent; it does not wait for it.
func (a *agentHost) start() error {
	p, err := a.spawn("agent", a.extra, a.env.prog("llmkube-agent"), a.args...)
	if err != nil {
		return err
	}
	a.agent, a.started = p, time.Now()
	return nil
}

// apiURL is the agent's API on the LAN: TLS, the sealed channel.
func (a *agentHost) apiURL() string { return fmt.Sprintf("https://%s:%d", a.Addr, apiPort) }

// client is an API client of agent a, reaching it from host from.
func (e *env) client(from *netHost, a *agentHost, token string) *apiclient.Client {
	return &apiclient.Client{BaseURL: a.apiURL(), Token: token, HTTP: from.HTTP}
}

// get fetches url from inside the host's namespace and returns the status and body.
func (h *netHost) get(ctx context.Context, url, token string) (int, []byte, error) {
	return h.do(ctx, http.MethodGet, url, token, nil)
}

func (h *netHost) do(ctx context.Context, method, url, token string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// cliResult is one headless command's outcome.
type cliResult struct {
	args           []string
	stdout, stderr string
	code           int
	took           time.Duration
}

func (r cliResult) String() string {
	return fmt.Sprintf("llmkube-tui %s: exit %d after %.1fs\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.took.Seconds(), r.stdout, r.stderr)
}

// console runs `llmkube-tui args…` on the laptop with the mesh's join string in the
// environment, as the README's laptop does.
func (e *env) console(ctx context.Context, args ...string) cliResult {
	start := time.Now()
	out, errOut, code, err := e.laptop.run(ctx, []string{"LLMKUBE_JOIN=" + e.join}, e.prog("llmkube-tui"), args...)
	if err != nil {
		errOut += "\n(could not run: " + err.Error() + ")"
	}
	return cliResult{args: args, stdout: out, stderr: errOut, code: code, took: time.Since(start)}
}

// mesh runs `llmkube-tui mesh args…` from the laptop: joining by mDNS when that works, through
// box's API otherwise.
func (e *env) mesh(ctx context.Context, args ...string) cliResult {
	full := append([]string{"mesh"}, args...)
	if e.viaMDNS {
		full = append(full, "--mdns")
	} else {
		full = append(full, "--agent", e.box.apiURL(), "--token", e.admin)
	}
	return e.console(ctx, full...)
}

// meshJSON runs a headless command with --json and decodes its document into v.
func (e *env) meshJSON(ctx context.Context, v any, args ...string) (cliResult, error) {
	r := e.mesh(ctx, append(args, "--json")...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		return r, fmt.Errorf("decoding %s: %v\n%s", strings.Join(args, " "), err, r)
	}
	return r, nil
}

// view is agent a's view of the mesh, read from the laptop.
func (e *env) view(ctx context.Context, a *agentHost) (api.MeshView, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return e.client(e.laptop, a, e.admin).Mesh(ctx)
}

// member finds a member in a view.
func member(v api.MeshView, name string) (api.Member, bool) {
	for _, m := range v.Members {
		if m.Name == name {
			return m, true
		}
	}
	return api.Member{}, false
}

// seenEvent is an event one agent streamed, with when the run received it.
type seenEvent struct {
	at   time.Time
	from string
	ev   api.Event
}

// eventLog collects every event the watched agents stream for the whole run.
type eventLog struct {
	mu  sync.Mutex
	all []seenEvent
}

// watch streams the events of the agent at url into the log until ctx ends, reconnecting if
// the stream breaks.
func (l *eventLog) watch(ctx context.Context, from *netHost, url, token, name string) {
	go func() {
		var last uint64
		for ctx.Err() == nil {
			_ = from.events(ctx, url, token, last, nil, func(ev api.Event) {
				last = ev.Seq
				l.mu.Lock()
				l.all = append(l.all, seenEvent{at: time.Now(), from: name, ev: ev})
				l.mu.Unlock()
			})
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

// events streams GET /v1/events of the agent at url from inside the namespace until ctx ends
// or the stream breaks. connected, if not nil, receives nil once the stream is open (events
// from then on are delivered) or the error that kept it from opening.
func (h *netHost) events(ctx context.Context, url, token string, after uint64, connected chan<- error, emit func(api.Event)) error {
	tell := func(err error) {
		if connected != nil {
			connected <- err
			connected = nil
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/events", nil)
	if err != nil {
		tell(err)
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		req.Header.Set("Last-Event-ID", fmt.Sprint(after))
	}
	resp, err := h.HTTP.Do(req)
	if err != nil {
		tell(err)
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("HTTP %d", resp.StatusCode)
		tell(err)
		return err
	}
	tell(nil)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev api.Event
		if json.Unmarshal([]byte(data), &ev) == nil {
			emit(ev)
		}
	}
	return sc.Err()
}

// mesh lists the mesh events of a kind (mesh.EventKind: "suspect", "dead", "recovered"…) about
// member (any when "") received at or after since.
func (l *eventLog) mesh(kind, member string, since time.Time) []seenEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []seenEvent
	for _, s := range l.all {
		if s.ev.Type != api.EventMesh || s.at.Before(since) || string(s.ev.Kind) != kind {
			continue
		}
		if member == "" || s.ev.Member == member {
			out = append(out, s)
		}
	}
	return out
}

// first is when an agent first streamed a mesh event of kind about member at or after since.
func (l *eventLog) first(kind, member string, since time.Time) (time.Time, bool) {
	evs := l.mesh(kind, member, since)
	if len(evs) == 0 {
		return time.Time{}, false
	}
	return evs[0].at, true
}

// chatResult is one chat through a gateway.
type chatResult struct {
	status  int
	content string
	chunks  int
	errText string // an error the gateway sent: a JSON error body or an SSE error event
	took    time.Duration
	err     error // the request itself failed (reset, timeout)
}

// chat sends an OpenAI chat completion for model to agent a's gateway from the laptop.
// started, if not nil, is called once generation is under way: the response headers are in (a
// stream), or the request is sent (otherwise, where the headers come with the answer).
func (e *env) chat(ctx context.Context, a *agentHost, token, model string, stream bool, maxTokens int, started func()) chatResult {
	start := time.Now()
	body, _ := json.Marshal(map[string]any{
		"model": model, "stream": stream, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": "Say something about meshes."}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.apiURL()+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return chatResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if started != nil && !stream {
		req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { started() }}))
	}
	resp, err := e.laptop.HTTP.Do(req)
	if err != nil {
		return chatResult{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	if started != nil && stream {
		started()
	}
	r := chatResult{status: resp.StatusCode}
	if !stream || resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(resp.Body)
		r.err, r.took = err, time.Since(start)
		var doc struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(b, &doc) == nil && len(doc.Choices) > 0 {
			r.content = doc.Choices[0].Message.Content
		}
		if len(doc.Error) > 0 {
			r.errText = string(doc.Error)
		} else if resp.StatusCode != http.StatusOK {
			r.errText = string(b)
		}
		return r
	}
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			if line == "" {
				event = ""
			}
			continue
		}
		if data == "[DONE]" {
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			r.err = fmt.Errorf("malformed chunk %q: %w", data, err)
			break
		}
		if event == "error" || len(chunk.Error) > 0 {
			r.errText = data
			break
		}
		r.chunks++
		if len(chunk.Choices) > 0 {
			r.content += chunk.Choices[0].Delta.Content
		}
	}
	if r.err == nil {
		r.err = sc.Err()
	}
	r.took = time.Since(start)
	return r
}

func (c chatResult) ok() bool {
	return c.err == nil && c.status == http.StatusOK && c.errText == "" && c.content != ""
}

func (c chatResult) String() string {
	return fmt.Sprintf("status %d, %d chunks, %d bytes of content, error %q, request error %v, after %.1fs", c.status, c.chunks, len(c.content), c.errText, c.err, c.took.Seconds())
}

// doctorFindings runs `mesh doctor --json` from the laptop and returns its findings as text,
// one per line ("severity: problem — fix").
func (e *env) doctorFindings(ctx context.Context) (string, cliResult, error) {
	var doc struct {
		Doctor struct {
			Findings []struct{ Severity, Problem, Fix string } `json:"findings"`
		} `json:"doctor"`
	}
	// The doctor's own bound, inside the caller's: a doctor that overruns it is a finding too.
	r, err := e.meshJSON(context.WithoutCancel(ctx), &doc, "doctor", "--timeout", "8s")
	if err != nil {
		return "", r, err
	}
	var b strings.Builder
	for _, f := range doc.Doctor.Findings {
		fmt.Fprintf(&b, "%s: %s — %s\n", f.Severity, f.Problem, f.Fix)
	}
	return b.String(), r, nil
}

// waitDoctor runs the doctor until a finding holds all of want (case-insensitive), and returns
// that finding and how long it took.
func (e *env) waitDoctor(ctx context.Context, timeout time.Duration, want ...string) (string, time.Duration, error) {
	var found string
	took, err := eventually(ctx, timeout, func(ctx context.Context) (bool, string) {
		text, r, err := e.doctorFindings(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(text, "\n") {
			l := strings.ToLower(line)
			all := line != ""
			for _, w := range want {
				all = all && strings.Contains(l, strings.ToLower(w))
			}
			if all {
				found = line
				return true, ""
			}
		}
		return false, fmt.Sprintf("no finding names %q; the doctor said (exit %d after %.1fs): %s %s", want, r.code, r.took.Seconds(), strings.TrimSpace(r.stdout), strings.TrimSpace(r.stderr))
	})
	return found, took, err
}
