package gateway_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/gateway"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/hailo"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/hwprobe"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh"
	hailosim "github.com/llmkube/mesh/sim/hailo"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// secret is the test mesh's secret: every node shares it, as a real mesh does.
var secret = func() []byte {
	s := make([]byte, api.SecretSize)
	for i := range s {
		s[i] = byte(i * 7)
	}
	return s
}()

var adminToken = api.AdminToken(secret)

func nsToken(t testing.TB, ns string) string {
	t.Helper()
	tok, err := api.NamespaceToken(adminToken, ns)
	require.NoError(t, err)
	return tok
}

// testLog shows logs when GATEWAY_TEST_LOG is set.
func testLog() *slog.Logger {
	if os.Getenv("GATEWAY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// nodeOpts shape one test agent.
type nodeOpts struct {
	name    string
	fixture string // hwprobe fixture: x86-nvidia (default) or pi5-hailo
	drivers []engines.Driver
	sizer   *sizing.Sizer
	gateway func(*gateway.Config)
	agent   func(*agent.Config)
	// listener is the API's, made by the test (in a network namespace); a loopback port when
	// nil. lanHTTP serves it as --lan-http does: plain HTTP to other hosts too (the node needs
	// a sealed identity, set by the gateway option).
	listener net.Listener
	lanHTTP  bool
}

// node is an agent with its API server, the gateway mounted, on a loopback port.
type node struct {
	name string
	a    *agent.Agent
	g    *gateway.Gateway
	url  string
	addr string
	m    *mesh.Mesh // nil until join
	view func() gateway.View
	// advertise is the API address the node announces to the mesh when join runs (a proxy in
	// front of it); addr when empty.
	advertise string
	// seal is the node's side of the sealed channel when its gateway config has one: its API
	// then listens as an agent's does (internal/seal), and join gossips its key.
	seal *seal.Identity
}

// newNode starts an agent and its API server until the test ends. The gateway reads the mesh
// view once join has run, and this host alone before.
func newNode(t testing.TB, o nodeOpts) *node {
	t.Helper()
	if o.fixture == "" {
		o.fixture = "x86-nvidia"
	}
	if o.name == "" {
		o.name = "node-a"
	}
	if o.sizer == nil {
		o.sizer = &sizing.Sizer{}
	}
	arch := "amd64"
	if o.fixture == "pi5-hailo" {
		arch = "arm64"
	}
	dir := t.TempDir()
	sd, err := state.Open(filepath.Join(dir, "state"))
	require.NoError(t, err)
	t.Cleanup(func() { sd.Close() })
	ln := o.listener
	if ln == nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
	}
	ac := agent.Config{
		State: sd, ModelsDir: filepath.Join(dir, "models"), AllowTempStore: true, NodeName: o.name,
		Host:    hwprobe.Probe(context.Background(), hwprobe.Options{Root: filepath.Join("..", "..", "hwprobe", "testdata", o.fixture), OS: "linux", Arch: arch}),
		Drivers: o.drivers, Sizer: o.sizer, Budget: 32 << 30, APIAddr: ln.Addr().String(), Version: api.Version,
		LANHTTP: o.lanHTTP, Log: testLog().With("node", o.name),
	}
	if o.agent != nil {
		o.agent(&ac)
	}
	a, err := agent.New(ac)
	require.NoError(t, err)
	n := &node{name: o.name, a: a, url: "http://" + ln.Addr().String(), addr: ln.Addr().String()}
	gc := gateway.Config{Agent: a, Self: o.name, Log: testLog().With("node", o.name),
		View: func() gateway.View {
			if n.view == nil {
				return nil
			}
			return n.view()
		},
		Liveness: func(host string) (api.Liveness, bool) {
			if n.m == nil {
				return api.Alive, true
			}
			return n.m.Liveness(host)
		}}
	if o.gateway != nil {
		o.gateway(&gc)
	}
	n.g, err = gateway.New(gc)
	require.NoError(t, err)
	require.False(t, o.lanHTTP && gc.Seal == nil, "lanHTTP needs a sealed identity (sealedAs)")
	var served net.Listener = ln
	if gc.Seal != nil {
		n.seal = gc.Seal
		served = seal.Listen(ln, seal.ListenConfig{TLS: gc.Seal.ServerConfig(), LANPlain: o.lanHTTP})
	}
	srv := agent.NewServer(agent.ServerConfig{Agent: a, Secret: secret, MeshID: "test", Log: gc.Log})
	n.g.Register(srv.Mount)

	ctx, cancel := context.WithCancel(context.Background())
	runDone, srvDone := make(chan error, 1), make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	go func() { srvDone <- srv.Serve(ctx, served) }()
	t.Cleanup(func() {
		cancel()
		<-srvDone
		<-runDone
	})
	require.Eventually(t, func() bool { return a.Ready() == nil }, 10*time.Second, 5*time.Millisecond, "agent ready")
	return n
}

// join puts the nodes in one mesh (local profile, loopback) and publishes each agent's state
// whenever it changes, until the test ends; it returns once every node sees every other's
// placements ready.
func join(t testing.TB, nodes ...*node) {
	t.Helper()
	joinWith(t, mesh.ProfileLocal, nodes...)
}

// joinWith is join with a memberlist profile: benchmarks that load the machine use the LAN
// profile, whose failure detector tolerates a busy host as a real LAN deployment does.
func joinWith(t testing.TB, profile string, nodes ...*node) {
	t.Helper()
	var seed string
	for _, n := range nodes {
		cfg := mesh.Config{MeshID: "test", Secret: secret, NodeName: n.name, Role: api.RoleAgent,
			BindAddr: "127.0.0.1", BindPort: 0, APIAddr: cmp.Or(n.advertise, n.addr), Profile: profile, Seal: n.seal, Log: testLog().With("node", n.name)}
		if seed != "" {
			cfg.Seeds = []string{seed}
		}
		m, err := mesh.Start(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			m.Close(ctx)
		})
		if seed == "" {
			seed = m.GossipAddr()
		}
		n.m = m
		n.view = func() gateway.View { return m }
		publish(t, n)
	}
	want := 0
	for _, n := range nodes {
		for _, p := range n.a.Placements() {
			if p.State == api.StateReady {
				want++
			}
		}
	}
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			ready := 0
			v := n.m.View()
			for _, p := range v.Placements() {
				for _, q := range v.Ready(p.Namespace, p.Model) {
					if q.Host == p.Host && q.ID == p.ID {
						ready++
					}
				}
			}
			if ready < want {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "every node sees every ready placement")
}

// publish sends the agent's state to the mesh now and on every change, as the agent program does.
func publish(t testing.TB, n *node) {
	ch, stop := n.a.Watch()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		stop()
		<-done
	})
	send := func() {
		if err := n.m.SetLocal(n.a.Host(), n.a.Placements()); err != nil {
			t.Logf("%s: SetLocal: %v", n.name, err)
		}
	}
	send()
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				send()
			}
		}
	}()
}

// place puts a model on the node's agent and waits until it serves.
func place(t testing.TB, n *node, req api.PlacementRequest) api.Placement {
	t.Helper()
	p, err := n.a.Place(context.Background(), api.Principal{Admin: true}, req)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := n.a.Get(api.Principal{Admin: true}, p.ID)
		require.NoError(t, err)
		require.False(t, got.State.Terminal(), "placement failed: %s %s", got.Code, got.Reason)
		return got.State == api.StateReady
	}, 20*time.Second, 5*time.Millisecond, "placement ready")
	got, _ := n.a.Get(api.Principal{Admin: true}, p.ID)
	return got
}

// ollamaSim starts a simulated Ollama daemon with models pulled.
func ollamaSim(t testing.TB, tune func(*ollamasim.Config), models ...string) *ollamasim.Server {
	t.Helper()
	cfg := ollamasim.DefaultConfig()
	cfg.Preloaded = models
	cfg.KeepAlive = ollamasim.Forever
	if tune != nil {
		tune(&cfg)
	}
	s, err := ollamasim.Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// ollamaNode is a node whose agent drives sim's Ollama daemon.
func ollamaNode(t testing.TB, name string, sim *ollamasim.Server, gw func(*gateway.Config), ag ...func(*agent.Config)) *node {
	t.Helper()
	o := ollamaOpts(t, name, sim)
	o.gateway = gw
	if len(ag) > 0 {
		o.agent = ag[0]
	}
	return newNode(t, o)
}

// ollamaOpts are the options of a node whose agent drives sim's Ollama daemon.
func ollamaOpts(t testing.TB, name string, sim *ollamasim.Server) nodeOpts {
	t.Helper()
	d, err := ollama.New(ollama.Config{URL: sim.URL()}, nil)
	require.NoError(t, err)
	return nodeOpts{name: name, drivers: []engines.Driver{d},
		sizer: &sizing.Sizer{Guard: download.Options{AllowPrivate: true}, OllamaDaemon: sim.URL(), OllamaRegistry: sim.RegistryURL()}}
}

// hailoSim starts a simulated hailo-ollama with the zoo models downloaded.
func hailoSim(t testing.TB, tune func(*hailosim.Config), models ...string) *hailosim.Server {
	t.Helper()
	cfg := hailosim.FastConfig(t.TempDir())
	cfg.Preloaded = models
	if tune != nil {
		tune(&cfg)
	}
	s, err := hailosim.Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// hailoNode is a Pi 5 with a Hailo-10H whose agent drives sim.
func hailoNode(t testing.TB, name string, sim *hailosim.Server, dataDir string, gw func(*gateway.Config)) *node {
	t.Helper()
	return hailoNodeAt(t, name, sim.URL(), sim.LibraryURL(), dataDir, gw)
}

// hailoNodeAt is hailoNode for a simulator at url whose model library is at library.
func hailoNodeAt(t testing.TB, name, url, library, dataDir string, gw func(*gateway.Config)) *node {
	t.Helper()
	d, err := hailo.New(hailo.Config{URL: url}, nil)
	require.NoError(t, err)
	return newNode(t, nodeOpts{name: name, fixture: "pi5-hailo", drivers: []engines.Driver{d}, gateway: gw,
		sizer: &sizing.Sizer{Guard: download.Options{AllowPrivate: true}, HailoManifestsDir: filepath.Join(dataDir, "models", "manifests"), HailoLibraryURL: library}})
}

// call sends a request with a token and a body, and returns the answer, read whole.
func call(t testing.TB, method, url, token, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// oaErr decodes an OpenAI error body.
func oaErr(t testing.TB, b []byte) (code, typ, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(b, &e), "body %s", b)
	return e.Error.Code, e.Error.Type, e.Error.Message
}

// ndjson splits an NDJSON body into objects.
func ndjson(t testing.TB, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		out = append(out, m)
	}
	return out
}

// sseData returns the data of each server-sent event in b.
func sseData(b []byte) []string {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func chatBody(model, prompt string, stream bool, extra string) string {
	m, _ := json.Marshal(model)
	p, _ := json.Marshal(prompt)
	s := `{"model":` + string(m) + `,"messages":[{"role":"user","content":` + string(p) + `}],"stream":` + map[bool]string{true: "true", false: "false"}[stream]
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// families scrapes the node's metrics as a scraper reads them.
func families(t testing.TB, n *node) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	n.a.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	require.NoError(t, err)
	return fams
}

// metricSum adds up a metric's samples (counters' values, histograms' counts) over the series
// that have a label with value label ("" for all).
func metricSum(t testing.TB, n *node, name, label string) float64 {
	t.Helper()
	families := families(t, n)
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetValue() == label
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
