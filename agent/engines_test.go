package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/engines/hailo"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/sim/gguf"
	hailosim "github.com/llmkube/mesh/sim/hailo"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// tinyEstimate is about what the sizer says a sim-tiny GGUF costs with a 2048 context
// (weights, KV cache, compute buffer and the 512 MiB overhead): 552 MiB.
const tinyEstimate = 552 << 20

// tinyModel writes a small valid GGUF file named name.gguf and returns its path.
func tinyModel(t testing.TB, dir, name string) string {
	t.Helper()
	spec, _ := gguf.Preset("sim-tiny")
	p := filepath.Join(dir, name+".gguf")
	if err := gguf.Write(p, spec); err != nil {
		t.Fatal(err)
	}
	return p
}

// llamaDriver is the real llama-server driver running the simulator binary, with no load delay.
func llamaDriver(t testing.TB, dir string, extraEnv ...string) *llamaserver.Driver {
	t.Helper()
	d, err := llamaserver.New(llamaserver.Config{
		Binary:    llamaSimBin,
		ModelsDir: filepath.Join(dir, "models"),
		LogDir:    filepath.Join(dir, "logs"),
		StopGrace: 2 * time.Second,
		Env:       append([]string{"LLAMA_SIM_LOAD_DELAY=0"}, extraEnv...),
		Download:  download.Options{AllowPrivate: true},
	}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.StopAll(context.Background()) })
	return d
}

// fast are supervision timings for tests.
func fast(c *Config) {
	c.HealthInterval = 50 * time.Millisecond
	c.HealthTimeout = 2 * time.Second
	c.RestartBackoff = 20 * time.Millisecond
	c.RestartBackoffMax = 200 * time.Millisecond
	c.DetectInterval = time.Second
}

// engineAgent builds an agent on a fixture host with the given drivers, sharing dir.
func engineAgent(t testing.TB, dir, fixture string, drivers []engines.Driver, mod func(*Config)) *Agent {
	t.Helper()
	cfg := Config{
		State:          openState(t, filepath.Join(dir, "state")),
		ModelsDir:      filepath.Join(dir, "models"),
		AllowTempStore: true,
		Host:           probeFixture(t, fixture),
		Drivers:        drivers,
		Sizer:          &sizing.Sizer{Guard: download.Options{AllowPrivate: true}}, // the tests' servers are on loopback
		Log:            testLog(t),
	}
	fast(&cfg)
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// waitState waits for a placement to reach want, failing at once if it fails instead.
func waitState(t testing.TB, c *apiclient.Client, id string, want api.PlacementState) api.Placement {
	t.Helper()
	var p api.Placement
	waitFor(t, func() bool {
		var err error
		p, err = c.Placement(context.Background(), id)
		if err != nil {
			t.Fatalf("placement %s: %v", id, err)
		}
		if p.State == api.StateFailed && want != api.StateFailed {
			t.Fatalf("placement %s failed: %s %s", id, p.Code, p.Reason)
		}
		return p.State == want
	}, "placement "+id+" to be "+string(want))
	return p
}

// chat asks a local placement something through its driver and returns the answer. It asks
// greedily: sampled, a real engine's tiny test model can end its answer at once, which the
// callers would read as an empty answer.
func chat(t testing.TB, a *Agent, ns, model string) string {
	t.Helper()
	l, ok := serving(t, a, ns, model)
	if !ok {
		t.Fatalf("%s/%s is not served", ns, model)
	}
	var b strings.Builder
	err := l.Driver.Chat(context.Background(), l.Model, engines.ChatRequest{
		Messages:    []engines.Message{{Role: "user", Content: "Say hello."}},
		MaxTokens:   16,
		Temperature: new(0.0),
	}, func(c engines.ChatChunk) error {
		b.WriteString(c.Content)
		return nil
	})
	if err != nil {
		t.Fatalf("chat with %s: %v", model, err)
	}
	return b.String()
}

// serving finds what the gateway would route a request for model in namespace ns to ("" for
// the admin's view of every namespace), and fails t unless Serving, the gateway's look-up,
// lists what ServingAll does for model.
func serving(t testing.TB, a *Agent, ns, model string) (Local, bool) {
	t.Helper()
	who := api.Principal{Admin: ns == "", Namespace: ns}
	var all []Local
	for _, l := range a.ServingAll(who) {
		if l.Placement.Model == model {
			all = append(all, l)
		}
	}
	if got := a.Serving(who, model); !reflect.DeepEqual(got, all) {
		t.Fatalf("Serving(%+v, %q) = %+v, ServingAll has %+v", who, model, got, all)
	}
	if len(all) == 0 {
		return Local{}, false
	}
	return all[0], true
}

func TestPlaceReadyChatDelete(t *testing.T) {
	dir := t.TempDir()
	ld := llamaDriver(t, dir)
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, nil)
	s := serve(t, a, nil)
	ctx := context.Background()

	evCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	var mu sync.Mutex
	var states []api.PlacementState
	go s.admin.Events(evCtx, 0, nil, func(ev api.Event) error {
		if ev.Type == api.EventPlacement && ev.Placement != nil {
			mu.Lock()
			if n := len(states); n == 0 || states[n-1] != ev.Placement.State {
				states = append(states, ev.Placement.State)
			}
			mu.Unlock()
		}
		return nil
	})
	waitFor(t, func() bool { return s.srv.subs.open() == 1 }, "the event stream")

	model := tinyModel(t, dir, "tiny")
	p, err := s.admin.Place(ctx, api.PlacementRequest{Source: model})
	if err != nil {
		t.Fatal(err)
	}
	if p.State != api.StatePulling || p.Model != "tiny" || p.Runtime != api.RuntimeLlamaServer || p.Memory.Method != api.SizeHeader || p.Memory.Bytes == 0 {
		t.Fatalf("admitted placement = %+v", p)
	}
	p = waitState(t, s.admin, p.ID, api.StateReady)
	if !strings.HasPrefix(p.Engine, "http://127.0.0.1:") || p.LogPath == "" {
		t.Fatalf("ready placement: engine %q log %q", p.Engine, p.LogPath)
	}
	h, _ := s.admin.Host(ctx)
	if runtime.GOOS == "linux" {
		// Once measured, the placement holds what its engine was seen to hold, well under the
		// estimate (see TestMeasuredMemoryCorrectsTheBudget).
		p = waitMeasured(t, s.admin, p.ID)
		h, _ = s.admin.Host(ctx)
	}
	if h.Memory.Committed != heldOf(p) || h.Memory.Reserved != 0 || h.Placements != 1 {
		t.Fatalf("host memory after ready: %+v, placement holds %d", h.Memory, heldOf(p))
	}
	if answer := chat(t, a, "default", "tiny"); answer == "" {
		t.Fatal("empty answer")
	}

	// The engine's log tail, for the console: llama-server's own lines, and none of it for a
	// namespace that may not see the placement.
	tail, err := s.admin.PlacementLog(ctx, p.ID, 0)
	if err != nil || !strings.Contains(tail, "model loaded") {
		t.Fatalf("log tail: %v\n%s", err, tail)
	}
	short, err := s.admin.PlacementLog(ctx, p.ID, 40)
	if err != nil || len(short) > 40 || !strings.HasSuffix(tail, short) {
		t.Fatalf("40-byte tail %q of %q: %v", short, tail, err)
	}
	if _, err := s.nsClient(t, "team-b").PlacementLog(ctx, p.ID, 0); codeOfErr(err) != api.CodeNotFound {
		t.Fatalf("another namespace read the log: %v", err)
	}

	if err := s.admin.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin.Placement(ctx, p.ID); codeOfErr(err) != api.CodeNotFound {
		t.Fatalf("deleted placement still there: %v", err)
	}
	if loaded, _ := ld.Loaded(ctx); len(loaded) != 0 {
		t.Fatalf("llama-server still running after delete: %v", loaded)
	}
	h, _ = s.admin.Host(ctx)
	if h.Memory.Committed != 0 || h.Placements != 0 {
		t.Fatalf("memory not released: %+v", h.Memory)
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(states) >= 5
	}, "the placement's events")
	mu.Lock()
	got := fmtStates(states)
	mu.Unlock()
	if !strings.HasPrefix(got, "sizing pulling loading ready stopping") {
		t.Fatalf("events went through %s", got)
	}
}

func fmtStates(s []api.PlacementState) string {
	var out []string
	for _, x := range s {
		out = append(out, string(x))
	}
	return strings.Join(out, " ")
}

func TestConcurrentPlacementsExactlyOneWins(t *testing.T) {
	dir := t.TempDir()
	ld := llamaDriver(t, dir)
	// Room for one sim-tiny model, not two.
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, func(c *Config) { c.Budget = tinyEstimate * 3 / 2 })
	s := serve(t, a, nil)
	models := []string{tinyModel(t, dir, "left"), tinyModel(t, dir, "right")}
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		ids := make([]string, 2)
		start := make(chan struct{})
		for i := range models {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				p, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: models[i]})
				errs[i], ids[i] = err, p.ID
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch codeOfErr(err) {
			case "":
				won++
				waitState(t, s.admin, ids[i], api.StateReady)
				if err := s.admin.Delete(context.Background(), ids[i]); err != nil {
					t.Fatal(err)
				}
			case api.CodeInsufficientMemory:
				if !strings.Contains(err.Error(), "free") {
					t.Fatalf("refusal does not say what is free: %v", err)
				}
			default:
				t.Fatalf("placement %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d placements won, want exactly 1 (%v)", round, won, errs)
		}
	}
}

func TestKilledEngineIsRestarted(t *testing.T) {
	dir := t.TempDir()
	ld := llamaDriver(t, dir)
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, nil)
	s := serve(t, a, nil)
	p, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: tinyModel(t, dir, "tiny")})
	if err != nil {
		t.Fatal(err)
	}
	p = waitState(t, s.admin, p.ID, api.StateReady)
	pid := enginePid(t, a, p.ID)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		q, _ := s.admin.Placement(context.Background(), p.ID)
		return q.Restarts >= 1 && q.State == api.StateReady
	}, "the engine to be restarted")
	if newPid := enginePid(t, a, p.ID); newPid == pid {
		t.Fatal("ready again on the killed process")
	}
	if answer := chat(t, a, "default", "tiny"); answer == "" {
		t.Fatal("no answer after the restart")
	}
	fams := scrape(t, s.url, api.AdminToken(s.secret))
	var restarts float64
	for _, m := range fams["llmkube_engine_restarts_total"].GetMetric() {
		restarts += m.GetCounter().GetValue()
	}
	if restarts < 1 {
		t.Fatal("the restart was not counted")
	}
}

func TestEngineCrashAfterRequestsIsRestarted(t *testing.T) {
	dir := t.TempDir()
	ld := llamaDriver(t, dir, "LLAMA_SIM_CRASH_AFTER=1")
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, nil)
	s := serve(t, a, nil)
	p, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: tinyModel(t, dir, "tiny")})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s.admin, p.ID, api.StateReady)
	chat(t, a, "default", "tiny") // the simulator exits after answering
	waitFor(t, func() bool {
		q, _ := s.admin.Placement(context.Background(), p.ID)
		return q.Restarts == 1 && q.State == api.StateReady
	}, "the crashed engine to be restarted")
}

// enginePid is the process id behind a ready llama-server placement.
func enginePid(t testing.TB, a *Agent, id string) int {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	inst, ok := a.placements[id].inst.(interface{ Pid() int })
	if !ok {
		t.Fatalf("placement %s has no process", id)
	}
	return inst.Pid()
}

func TestRestartRestoresPlacements(t *testing.T) {
	dir := t.TempDir()
	model := tinyModel(t, dir, "tiny")
	secret, _ := api.NewSecret()

	a1, c1, stop1, done1 := startPersisted(t, dir, secret)
	p, err := c1.Place(context.Background(), api.PlacementRequest{Source: model, Namespace: "team-a", Priority: api.PriorityHigh})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c1, p.ID, api.StateReady)
	pid := enginePid(t, a1, p.ID)
	stop1()
	<-done1
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatal("the engine process outlived the agent")
	}

	// A download left half-done before the placement existed belongs to nothing: cleaned.
	orphan := filepath.Join(dir, "models", "https", "old.gguf.partial")
	if err := os.MkdirAll(filepath.Dir(orphan), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(orphan, []byte("GGUF"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := p.CreatedAt.Add(-time.Hour)
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}

	_, c2, stop2, done2 := startPersisted(t, dir, secret)
	defer func() { stop2(); <-done2 }()
	q := waitState(t, c2, p.ID, api.StateReady)
	if q.Namespace != "team-a" || q.Priority != api.PriorityHigh || q.Memory != p.Memory || !q.CreatedAt.Equal(p.CreatedAt) {
		t.Fatalf("restored placement differs: %+v\nwas %+v", q, p)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphaned partial download not cleaned: %v", err)
	}
}

// startPersisted runs an agent on dir's models and state with llama-server, served with
// secret, as a restart test starts it again and again: stop cancels it and closes its state,
// and done has what Run returned.
func startPersisted(t *testing.T, dir string, secret []byte) (a *Agent, c *apiclient.Client, stop context.CancelFunc, done chan error) {
	t.Helper()
	cfg := Config{
		ModelsDir: filepath.Join(dir, "models"), AllowTempStore: true,
		Host:    probeFixture(t, "x86-nvidia"),
		Drivers: []engines.Driver{llamaDriver(t, dir)}, Sizer: &sizing.Sizer{}, Log: testLog(t),
	}
	fast(&cfg)
	sd := openState(t, filepath.Join(dir, "state"))
	cfg.State = sd
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c = serveWith(t, a, secret)
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitReady(t, a)
	return a, c, func() { cancel(); sd.Close() }, done
}

// serveWith serves a's API with a given secret (Run is the caller's).
func serveWith(t testing.TB, a *Agent, secret []byte) *apiclient.Client {
	t.Helper()
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerConfig{Agent: a, Secret: secret, Log: a.log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return apiclient.New("http://"+ln.Addr().String(), api.AdminToken(secret))
}

func TestNamespaceTokenSeesOnlyItsNamespace(t *testing.T) {
	dir := t.TempDir()
	ld := llamaDriver(t, dir)
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, nil)
	s := serve(t, a, nil)
	ctx := context.Background()
	teamA, teamB := s.nsClient(t, "team-a"), s.nsClient(t, "team-b")
	// A namespace token places into its own namespace without naming it (a file of the store).
	store := filepath.Join(dir, "models")
	if err := os.MkdirAll(store, 0o750); err != nil {
		t.Fatal(err)
	}
	p, err := teamA.Place(ctx, api.PlacementRequest{Source: tinyModel(t, store, "tiny")})
	if err != nil {
		t.Fatal(err)
	}
	if p.Namespace != "team-a" {
		t.Fatalf("namespace %q, want team-a", p.Namespace)
	}
	waitState(t, teamA, p.ID, api.StateReady)
	if ps, err := teamB.Placements(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("team-b lists %v (%v)", ps, err)
	}
	if _, err := teamB.Placement(ctx, p.ID); codeOfErr(err) != api.CodeNotFound {
		t.Fatalf("team-b get: %v, want NotFound", err)
	}
	if err := teamB.Delete(ctx, p.ID); codeOfErr(err) != api.CodeNotFound {
		t.Fatalf("team-b delete: %v, want NotFound", err)
	}
	v, err := teamB.Mesh(ctx)
	if err != nil || len(v.Members) != 1 || len(v.Members[0].Placements) != 0 {
		t.Fatalf("team-b mesh view shows placements: %+v %v", v, err)
	}
	if ps, _ := teamA.Placements(ctx); len(ps) != 1 {
		t.Fatalf("team-a lists %d placements", len(ps))
	}
	if q, err := s.admin.Placement(ctx, p.ID); err != nil || q.State != api.StateReady {
		t.Fatalf("team-b's attempt changed the placement: %+v %v", q, err)
	}
	if _, ok := serving(t, a, "team-b", "tiny"); ok {
		t.Fatal("served to another namespace")
	}
	for _, c := range []struct {
		who    api.Principal
		models []string
		want   bool
	}{
		{api.Principal{Namespace: "team-a"}, []string{"tiny"}, true},
		{api.Principal{Namespace: "team-a"}, []string{"other", "tiny"}, true},
		{api.Principal{Namespace: "team-a"}, []string{"other"}, false},
		{api.Principal{Namespace: "team-b"}, []string{"tiny"}, false},
		{api.Principal{Admin: true}, []string{"tiny"}, true},
		{api.Principal{Namespace: "team-a"}, nil, false},
	} {
		if got := a.Names(c.who, c.models...); got != c.want {
			t.Errorf("Names(%+v, %q) = %v, want %v", c.who, c.models, got, c.want)
		}
	}
	fams := scrape(t, s.url, api.AdminToken(s.secret))
	for _, m := range fams["llmkube_placements"].GetMetric() {
		if m.GetLabel()[0].GetValue() == "ready" && m.GetGauge().GetValue() != 1 {
			t.Fatalf("placements{state=ready} = %v", m.GetGauge().GetValue())
		}
	}
	if runtime.GOOS == "linux" {
		p = waitMeasured(t, s.admin, p.ID)
		fams = scrape(t, s.url, api.AdminToken(s.secret))
	}
	if got := fams["llmkube_memory_committed_bytes"].GetMetric()[0].GetGauge().GetValue(); got != float64(heldOf(p)) {
		t.Fatalf("committed gauge %v, want %d", got, heldOf(p))
	}
}

// unmeasured hides its instances' resident memory, so a placement holds its estimate: for tests
// of the arithmetic of admission.
type unmeasured struct{ *llamaserver.Driver }

func (u unmeasured) Load(ctx context.Context, m engines.Model) (engines.Instance, error) {
	inst, err := u.Driver.Load(ctx, m)
	if inst == nil {
		return nil, err
	}
	return struct{ engines.Instance }{inst}, err
}

// waitMeasured waits for a placement's engine memory to be measured.
func waitMeasured(t testing.TB, c *apiclient.Client, id string) api.Placement {
	t.Helper()
	var p api.Placement
	waitFor(t, func() bool {
		var err error
		p, err = c.Placement(context.Background(), id)
		return err == nil && p.Held > 0
	}, "the engine's memory measured")
	return p
}

// Once an engine is loaded its measured memory replaces the estimate in the budget (bounded by
// the estimate, raised by what the engine grows to): two models that each estimate at 557 MiB
// fit a budget of 1.5 × that when the first turns out to hold far less.
func TestMeasuredMemoryCorrectsTheBudget(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("resident memory is measured on Linux only")
	}
	dir := t.TempDir()
	ld := llamaDriver(t, dir)
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, func(c *Config) { c.Budget = tinyEstimate * 3 / 2 })
	s := serve(t, a, nil)
	ctx := context.Background()
	first, err := s.admin.Place(ctx, api.PlacementRequest{Source: tinyModel(t, dir, "first")})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s.admin, first.ID, api.StateReady)
	p := waitMeasured(t, s.admin, first.ID)
	if p.Resident <= 0 || p.Held < p.Resident || p.Held >= p.Memory.Bytes {
		t.Fatalf("measured: resident %d, holds %d, estimate %d", p.Resident, p.Held, p.Memory.Bytes)
	}
	second, err := s.admin.Place(ctx, api.PlacementRequest{Source: tinyModel(t, dir, "second")})
	if err != nil {
		t.Fatalf("a second model after the first was measured: %v", err)
	}
	waitState(t, s.admin, second.ID, api.StateReady)
}

func TestHeldArithmetic(t *testing.T) {
	est := api.SizeEstimate{Bytes: 600 << 20, Weights: 10 << 20, Cache: 4 << 20}
	atLoad := engines.Resident{RSS: 30 << 20, Anon: 12 << 20}
	// base = max(30, 12 + 10) = 30 MiB; + cache 4 + slack 64 + 30/8.
	want := int64(30<<20 + 4<<20 + measureSlack + (30<<20)/8)
	if got := held(est, atLoad, atLoad); got != want {
		t.Fatalf("held = %d, want %d", got, want)
	}
	// The mapped weights count in full even when the page cache dropped them.
	if got := held(est, engines.Resident{RSS: 13 << 20, Anon: 12 << 20}, atLoad); got != int64(22<<20+4<<20+measureSlack+(22<<20)/8) {
		t.Fatalf("held with weights evicted = %d", got)
	}
	// Never above the estimate, unless the engine is seen to hold more.
	big := engines.Resident{RSS: 580 << 20, Anon: 570 << 20}
	if got := held(est, big, big); got != est.Bytes {
		t.Fatalf("held near the estimate = %d, want the estimate %d", got, est.Bytes)
	}
	if got := held(est, atLoad, engines.Resident{RSS: 700 << 20}); got != 700<<20 {
		t.Fatalf("held past the estimate = %d, want what it holds", got)
	}
	// No estimate (memory check warn): the measurement is all there is.
	if got := held(api.SizeEstimate{}, atLoad, atLoad); got != int64(30<<20+measureSlack+(30<<20)/8) {
		t.Fatalf("held without an estimate = %d", got)
	}
}

func TestEvictionMakesRoomForHigherPriority(t *testing.T) {
	dir := t.TempDir()
	ld := unmeasured{llamaDriver(t, dir)}
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, func(c *Config) {
		c.Budget = tinyEstimate * 3 / 2
		c.Evict = true
		c.IdleAfter = time.Millisecond
	})
	s := serve(t, a, nil)
	ctx := context.Background()
	low, err := s.admin.Place(ctx, api.PlacementRequest{Source: tinyModel(t, dir, "low"), Priority: api.PriorityLow})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s.admin, low.ID, api.StateReady)
	// Same priority: not evictable, refused with what would have to go.
	_, err = s.admin.Place(ctx, api.PlacementRequest{Source: tinyModel(t, dir, "same"), Priority: api.PriorityLow})
	if codeOfErr(err) != api.CodeInsufficientMemory || !strings.Contains(err.(*api.Error).Fix, "low (") {
		t.Fatalf("same priority: %v", err)
	}
	highModel := tinyModel(t, dir, "high")
	e, err := s.admin.Estimate(ctx, api.PlacementRequest{Source: highModel, Priority: api.PriorityHigh})
	if err != nil || e.Verdict != api.VerdictFits || !strings.Contains(e.Reason, "evicting low") {
		t.Fatalf("estimate with --evict: %+v %v", e, err)
	}
	if q, _ := s.admin.Placement(ctx, low.ID); q.State != api.StateReady {
		t.Fatalf("the estimate evicted something: low is %s", q.State)
	}
	high, err := s.admin.Place(ctx, api.PlacementRequest{Source: highModel, Priority: api.PriorityHigh})
	if err != nil {
		t.Fatalf("higher priority with --evict: %v", err)
	}
	waitState(t, s.admin, high.ID, api.StateReady)
	gone, _ := s.admin.Placement(ctx, low.ID)
	if gone.State != api.StateEvicted || !strings.Contains(gone.Reason, high.ID) {
		t.Fatalf("low placement: %s %q", gone.State, gone.Reason)
	}
	if loaded, _ := ld.Loaded(ctx); len(loaded) != 1 || loaded[0] != "high" {
		t.Fatalf("running engines %v, want only high", loaded)
	}
}

// hailoRig is a simulated Pi 5 with a Hailo-10H running hailo-ollama.
func hailoRig(t testing.TB, mod func(*Config)) (*Agent, *served, *hailosim.Server) {
	t.Helper()
	return hailoRigWith(t, nil, mod)
}

// hailoRigWith is hailoRig with the simulator's configuration tuned.
func hailoRigWith(t testing.TB, tune func(*hailosim.Config), mod func(*Config)) (*Agent, *served, *hailosim.Server) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	simCfg := hailosim.FastConfig(filepath.Join(dir, "hailo-data"))
	if tune != nil {
		tune(&simCfg)
	}
	sim, err := hailosim.Start(ctx, simCfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); sim.Close() })
	hd, err := hailo.New(hailo.Config{URL: sim.URL()}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, dir, "pi5-hailo", []engines.Driver{hd}, func(c *Config) {
		c.Sizer = &sizing.Sizer{
			Guard:             download.Options{AllowPrivate: true},
			HailoManifestsDir: filepath.Join(dir, "hailo-data", "models", "manifests"),
			HailoLibraryURL:   sim.LibraryURL(),
		}
		if mod != nil {
			mod(c)
		}
	})
	return a, serve(t, a, nil), sim
}

func TestHailoPlaceChatAndSwap(t *testing.T) {
	// A switch that takes a while, so the host's measure of it has something to show.
	const switchDelay = 300 * time.Millisecond
	a, s, sim := hailoRigWith(t, func(c *hailosim.Config) { c.SwitchDelay = switchDelay }, nil)
	ctx := context.Background()
	first, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Runtime != api.RuntimeHailoOllama || first.Memory.Device != api.DeviceHailo {
		t.Fatalf("placement = %+v", first)
	}
	waitState(t, s.admin, first.ID, api.StateReady)
	if chat(t, a, "default", "qwen2:1.5b") == "" {
		t.Fatal("empty answer")
	}
	if h, _ := s.admin.Host(ctx); h.Memory.Committed != 0 || h.Accelerators[0].Loaded != "qwen2:1.5b" {
		t.Fatalf("host after a Hailo placement: memory %+v accelerators %+v", h.Memory, h.Accelerators)
	}
	// The estimate says a second model is a swap.
	e, err := s.admin.Estimate(ctx, api.PlacementRequest{Source: "hailo://llama3.2:3b"})
	if err != nil || e.Verdict != api.VerdictSwap {
		t.Fatalf("estimate of a second Hailo model: %+v %v", e, err)
	}
	second, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://llama3.2:3b"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s.admin, second.ID, api.StateReady)
	old, _ := s.admin.Placement(ctx, first.ID)
	if old.State != api.StateEvicted || old.ReplacedBy != second.ID {
		t.Fatalf("swapped-out placement: %s replaced by %q", old.State, old.ReplacedBy)
	}
	if got := sim.Stats().Loaded; got != "llama3.2:3b" {
		t.Fatalf("device holds %q", got)
	}
	// The host says how long its last switch took: what the next swap leaves unanswered.
	if h, _ := s.admin.Host(ctx); h.Accelerators[0].LastLoadMillis < switchDelay.Milliseconds() {
		t.Fatalf("last load on the Hailo-10H: %d ms, want at least the switch's %v", h.Accelerators[0].LastLoadMillis, switchDelay)
	}

	// Swapping back places the first model again: one row for it, not its evicted record beside
	// the new placement.
	again, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s.admin, again.ID, api.StateReady)
	list, err := s.admin.Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, p := range list {
		rows = append(rows, p.Model+" "+string(p.State))
	}
	slices.Sort(rows)
	if want := []string{"llama3.2:3b evicted", "qwen2:1.5b ready"}; !slices.Equal(rows, want) {
		t.Fatalf("placements after swapping back: %q, want %q", rows, want)
	}
}

// A Hailo swap pulls first: the model on the device keeps answering while the new one
// downloads, goes only once the new one is on disk, and stays when the pull fails.
func TestHailoSwapPullsFirst(t *testing.T) {
	ctx := context.Background()
	t.Run("pull fails", func(t *testing.T) {
		a, s, sim := hailoRigWith(t, func(c *hailosim.Config) {
			c.Preloaded = []string{"qwen2:1.5b"}
			c.LibraryURL = "http://127.0.0.1:9" // nothing listens: every download fails
		}, nil)
		first, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, s.admin, first.ID, api.StateReady)
		second, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://llama3.2:3b"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			p, _ := s.admin.Placement(ctx, second.ID)
			return p.State == api.StateFailed
		}, "the second placement's pull to fail")
		if p, _ := s.admin.Placement(ctx, first.ID); p.State != api.StateReady || p.ReplacedBy != "" {
			t.Fatalf("after a failed swap the first placement is %s (replaced by %q)", p.State, p.ReplacedBy)
		}
		if got := sim.Stats().Loaded; got != "qwen2:1.5b" {
			t.Fatalf("device holds %q after a failed swap", got)
		}
		if chat(t, a, "default", "qwen2:1.5b") == "" {
			t.Fatal("empty answer after a failed swap")
		}
		// The model still on the device is the one a later placement replaces.
		if e, err := s.admin.Estimate(ctx, api.PlacementRequest{Source: "hailo://llama3.2:3b"}); err != nil || e.Verdict != api.VerdictSwap || !strings.Contains(e.Reason, first.ID) {
			t.Fatalf("estimate after a failed swap: %+v %v", e, err)
		}
	})
	t.Run("old model answers during the pull", func(t *testing.T) {
		release := make(chan struct{})
		var sim *hailosim.Server
		// The library, held until the test lets the download through.
		library := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			resp, err := http.Get(sim.LibraryURL() + r.URL.Path)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
		}))
		t.Cleanup(library.Close)
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
		a, s, sim0 := hailoRigWith(t, func(c *hailosim.Config) {
			c.Preloaded = []string{"qwen2:1.5b"}
			c.LibraryURL = library.URL
		}, nil)
		sim = sim0
		first, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, s.admin, first.ID, api.StateReady)
		second, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://llama3.2:3b"})
		if err != nil {
			t.Fatal(err)
		}
		if p, _ := s.admin.Placement(ctx, second.ID); p.State != api.StatePulling {
			t.Fatalf("second placement %s, want pulling", p.State)
		}
		if p, _ := s.admin.Placement(ctx, first.ID); p.State != api.StateReady {
			t.Fatalf("first placement %s while the second pulls, want ready", p.State)
		}
		if chat(t, a, "default", "qwen2:1.5b") == "" {
			t.Fatal("empty answer while the new model pulls")
		}
		close(release)
		waitState(t, s.admin, second.ID, api.StateReady)
		old, _ := s.admin.Placement(ctx, first.ID)
		if old.State != api.StateEvicted || old.ReplacedBy != second.ID {
			t.Fatalf("swapped-out placement: %s replaced by %q", old.State, old.ReplacedBy)
		}
		if got := sim.Stats().Loaded; got != "llama3.2:3b" {
			t.Fatalf("device holds %q", got)
		}
	})
}

func TestRefusedBeforeAnyBytePulled(t *testing.T) {
	t.Run("hailo device held by a protected model", func(t *testing.T) {
		_, s, sim := hailoRig(t, nil)
		ctx := context.Background()
		p, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b", Protected: true})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, s.admin, p.ID, api.StateReady)
		before := sim.Stats()
		_, err = s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://llama3.2:3b"})
		if codeOfErr(err) != api.CodeInsufficientMemory {
			t.Fatalf("second model over a protected one: %v", err)
		}
		after := sim.Stats()
		if after.Pulls != before.Pulls || after.LibraryBytes != before.LibraryBytes {
			t.Fatalf("the refused model was pulled: pulls %d→%d, library bytes %d→%d", before.Pulls, after.Pulls, before.LibraryBytes, after.LibraryBytes)
		}
	})
	t.Run("hailo size unknown fails closed", func(t *testing.T) {
		_, s, sim := hailoRig(t, func(c *Config) {
			c.Sizer.(*sizing.Sizer).HailoLibraryURL = "http://127.0.0.1:1" // nothing listens: the HEF's size cannot be known
		})
		_, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
		if codeOfErr(err) != api.CodeMemoryCheckFailed {
			t.Fatalf("unsized HEF: %v", err)
		}
		if st := sim.Stats(); st.Pulls != 0 || st.LibraryBytes != 0 {
			t.Fatalf("pulled anyway: %+v", st)
		}
	})
	t.Run("ollama model over budget", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sim, err := ollamasim.Start(ctx, ollamasim.DefaultConfig(), testLog(t))
		if err != nil {
			t.Fatal(err)
		}
		defer sim.Close()
		od, err := ollama.New(ollama.Config{URL: sim.URL()}, testLog(t))
		if err != nil {
			t.Fatal(err)
		}
		a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{od}, func(c *Config) {
			c.Budget = 256 << 20
			c.Sizer = &sizing.Sizer{Guard: download.Options{AllowPrivate: true}, OllamaRegistry: sim.RegistryURL(), OllamaDaemon: sim.URL()}
		})
		s := serve(t, a, nil)
		_, err = s.admin.Place(ctx, api.PlacementRequest{Source: "ollama://qwen2.5:0.5b"})
		if codeOfErr(err) != api.CodeInsufficientMemory {
			t.Fatalf("over budget: %v", err)
		}
		st := sim.Stats()
		if st.Pulls != 0 || st.Requests["POST /api/pull"] != 0 {
			t.Fatalf("the refused model was pulled: %+v", st)
		}
		// (The registry did see the sizer: a manifest request and ranged reads of the GGUF
		// header. The daemon saw no pull.)
		// Under the warn mode the same model is admitted, and pulled.
		p, err := s.admin.Place(ctx, api.PlacementRequest{Source: "ollama://qwen2.5:0.5b", MemoryCheck: api.MemoryCheckWarn})
		if err != nil {
			t.Fatalf("warn: %v", err)
		}
		waitState(t, s.admin, p.ID, api.StateReady)
		if n := sim.Stats().Pulls; n != 1 {
			t.Fatalf("warned placement ready after %d pulls, want 1", n)
		}
	})
}

func TestEngineUnavailableSaysHowToInstall(t *testing.T) {
	dir := t.TempDir()
	ld, err := llamaserver.New(llamaserver.Config{Binary: filepath.Join(dir, "no-such-llama-server"), LogDir: filepath.Join(dir, "logs")}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, nil)
	s := serve(t, a, nil)
	_, err = s.admin.Place(context.Background(), api.PlacementRequest{Source: tinyModel(t, dir, "tiny")})
	if codeOfErr(err) != api.CodeEngineUnavailable || !strings.Contains(err.(*api.Error).Fix, "llama.cpp") {
		t.Fatalf("missing llama-server: %v", err)
	}
}

func TestDownloadedModel(t *testing.T) {
	dir := t.TempDir()
	model := tinyModel(t, dir, "served")
	mirror := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer mirror.Close()
	ld := llamaDriver(t, dir)
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, func(c *Config) { c.AllowHTTP = true })
	s := serve(t, a, nil)
	src := mirror.URL + "/" + filepath.Base(model)
	p, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	if p.Memory.Method != api.SizeHeader {
		t.Fatalf("sized by %q, want the GGUF header read over HTTP", p.Memory.Method)
	}
	waitState(t, s.admin, p.ID, api.StateReady)
	a.mu.Lock()
	path := a.placements[p.ID].model.Path
	a.mu.Unlock()
	if !strings.HasPrefix(path, filepath.Join(dir, "models", "https")) {
		t.Fatalf("model path %q, want under the store", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, s.url, api.AdminToken(s.secret))
	if got := fams["llmkube_pull_bytes_total"].GetMetric()[0].GetCounter().GetValue(); got != float64(fi.Size()) {
		t.Fatalf("pull bytes %v, want the file's %d", got, fi.Size())
	}
	// A download counts only when it matches the checksum it was placed with.
	sum, err := fileSHA256(model)
	if err != nil {
		t.Fatal(err)
	}
	other := tinyModel(t, dir, "served-too")
	srcOther := mirror.URL + "/" + filepath.Base(other)
	bad, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: srcOther, SHA256: strings.Repeat("0", 64)})
	if err != nil {
		t.Fatal(err)
	}
	bad = waitState(t, s.admin, bad.ID, api.StateFailed)
	if bad.Code != api.CodePullFailed || !strings.Contains(bad.Reason, "sha256") {
		t.Fatalf("checksum mismatch: %s %q", bad.Code, bad.Reason)
	}
	good, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: src, Name: "served-checked", SHA256: strings.ToUpper(sum)})
	if err != nil {
		t.Fatal(err)
	}
	if good.SHA256 != sum {
		t.Fatalf("placement keeps checksum %q, want %q", good.SHA256, sum)
	}
	waitState(t, s.admin, good.ID, api.StateReady)
	for _, req := range []api.PlacementRequest{
		{Source: src, Name: "x1", SHA256: "abc"},
		{Source: model, Name: "x2", SHA256: sum},
	} {
		if _, err := s.admin.Place(context.Background(), req); codeOfErr(err) != api.CodeBadRequest {
			t.Fatalf("%+v: %v", req, err)
		}
	}

	// Without --allow-http a plain http:// source is refused before anything happens.
	b := engineAgent(t, t.TempDir(), "x86-nvidia", []engines.Driver{ld}, nil)
	sb := serve(t, b, nil)
	if _, err := sb.admin.Place(context.Background(), api.PlacementRequest{Source: src}); codeOfErr(err) != api.CodeInvalidSource {
		t.Fatalf("plain http without the flag: %v", err)
	}
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Extra engine arguments reach llama-server only through its allowlist; a daemon runtime takes
// none.
func TestEngineArgs(t *testing.T) {
	dir := t.TempDir()
	ld := llamaDriver(t, dir)
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, nil)
	s := serve(t, a, nil)
	ctx := context.Background()
	model := tinyModel(t, dir, "tiny")

	if _, err := s.admin.Place(ctx, api.PlacementRequest{Source: model, Args: []string{"--api-key-file", "/etc/shadow"}}); codeOfErr(err) != api.CodeBadRequest {
		t.Fatalf("an argument off the allowlist: %v", err)
	}
	p, err := s.admin.Place(ctx, api.PlacementRequest{Source: model, Args: []string{"-ngl", "33"}})
	if err != nil {
		t.Fatal(err)
	}
	p = waitState(t, s.admin, p.ID, api.StateReady)
	resp, err := http.Get(p.Engine + "/_sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Settings struct {
			GPULayers int `json:"n_gpu_layers"`
			CtxSize   int `json:"ctx_size"`
			Parallel  int `json:"parallel"`
			CacheRAM  int `json:"cache_ram"`
		} `json:"settings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Settings.GPULayers != 33 {
		t.Fatalf("llama-server was launched with -ngl %d, want 33", st.Settings.GPULayers)
	}
	if st.Settings.Parallel != 1 || st.Settings.CtxSize != api.DefaultContext || int64(st.Settings.CacheRAM) != p.Memory.Cache>>20 {
		t.Fatalf("launched with -np %d -c %d --cache-ram %d; want -np 1 -c %d --cache-ram %d (the estimate's cache %d)",
			st.Settings.Parallel, st.Settings.CtxSize, st.Settings.CacheRAM, api.DefaultContext, p.Memory.Cache>>20, p.Memory.Cache)
	}

	// Slots each hold the whole context, and the estimate counts them all.
	one, err := s.admin.Estimate(ctx, api.PlacementRequest{Source: model, Context: 1024})
	if err != nil {
		t.Fatal(err)
	}
	four, err := s.admin.Estimate(ctx, api.PlacementRequest{Source: model, Context: 1024, Args: []string{"-np", "4"}})
	if err != nil {
		t.Fatal(err)
	}
	if four.Estimate.KV != 4*one.Estimate.KV || !strings.Contains(four.Estimate.Detail, "4 slots of 1024 tokens each") {
		t.Fatalf("4 slots: KV %d (one slot %d), detail %q", four.Estimate.KV, one.Estimate.KV, four.Estimate.Detail)
	}
	// Past the model's training context (2048 for sim-tiny) llama-server would cap each request.
	over, err := s.admin.Estimate(ctx, api.PlacementRequest{Source: model, Context: 4096})
	if err != nil || over.Verdict != api.VerdictRefused || over.Code != api.CodeContextLimit || !strings.Contains(over.Reason, "trained for a 2048-token context") {
		t.Fatalf("a context past the training context: %+v %v", over, err)
	}

	// llama-server splits --alias on commas: such a name is refused before anything is sized.
	_, err = s.admin.Place(ctx, api.PlacementRequest{Source: model, Name: "a,b"})
	if codeOfErr(err) != api.CodeBadRequest || !strings.Contains(err.Error(), "splits its --alias on commas") {
		t.Fatalf("a name with a comma: %v", err)
	}
}

// A model made with `ollama create` on the real Ollama (no registry knows it, and nothing here
// can reach one) is sized by the daemon and placed without a pull, then answers.
func TestRealOllamaCreatedModelPlaces(t *testing.T) {
	gguf := enginetest.TinyGGUF(t)
	daemon := enginetest.StartOllama(t)
	daemon.Create(t, "tiny", gguf)
	od, err := ollama.New(ollama.Config{URL: daemon.URL}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{od}, func(c *Config) {
		// A registry on a closed loopback port: were the sizer to ask one, it would fail.
		c.Sizer = &sizing.Sizer{Guard: download.Options{AllowPrivate: true}, OllamaRegistry: "http://127.0.0.1:9", OllamaDaemon: daemon.URL}
	})
	s := serve(t, a, nil)
	p, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: "ollama://tiny", Context: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if p.Memory.Method != api.SizeShow {
		t.Fatalf("sized by %q, want the daemon's /api/show: %s", p.Memory.Method, p.Memory.Detail)
	}
	waitState(t, s.admin, p.ID, api.StateReady)
	if answer := chat(t, a, "default", p.Model); answer == "" {
		t.Fatal("empty answer")
	}
}

// TestReadyMeansServing: whenever the agent shows a placement ready, its engine is there for
// the gateway's look-up — a client that polls for "ready" and asks at once is served, not told
// 503 "not ready (ready)". A checker looks at every placement under the agent's lock as often
// as it can get it, so it holds the lock next whenever the lifecycle lets it go, over several
// loads.
func TestReadyMeansServing(t *testing.T) {
	dir := t.TempDir()
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{llamaDriver(t, dir)}, nil)
	s := serve(t, a, nil)
	model := tinyModel(t, dir, "tiny")
	for range 5 {
		quit, done := make(chan struct{}), make(chan string, 1)
		go func() {
			var bad string
			defer func() { done <- bad }()
			for {
				select {
				case <-quit:
					return
				default:
				}
				a.mu.RLock()
				for id, pl := range a.placements {
					if a.viewLocked(pl).State == api.StateReady && pl.inst == nil && bad == "" {
						bad = id
					}
				}
				a.mu.RUnlock()
			}
		}()
		p, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: model})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, s.admin, p.ID, api.StateReady)
		close(quit)
		if id := <-done; id != "" {
			t.Fatalf("placement %s was shown ready with no engine serving it", id)
		}
		if err := s.admin.Delete(context.Background(), p.ID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return len(a.List(api.Principal{Admin: true})) == 0 }, "the placement gone")
	}
}
