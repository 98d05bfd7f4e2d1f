package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// put adds a placement in a given state straight into the agent's books.
func put(a *Agent, id, model string, st api.PlacementState, bytes int64, prio api.Priority, mod func(*placement)) *placement {
	pl := &placement{p: api.Placement{
		ID: id, Model: model, Namespace: "default", Runtime: api.RuntimeLlamaServer, Priority: prio, State: st,
		Memory:    api.SizeEstimate{Bytes: bytes, Method: api.SizeHeader, Device: api.DeviceHost},
		CreatedAt: time.Now().Add(-time.Hour),
	}, deleted: make(chan struct{})}
	pl.ctx, pl.cancel = context.WithCancel(context.Background())
	if st == api.StateReady {
		pl.healthyAt = time.Now()
		pl.readyAt = time.Now().Add(-time.Hour)
	}
	if mod != nil {
		mod(pl)
	}
	a.mu.Lock()
	a.placements[id] = pl
	a.mu.Unlock()
	return pl
}

func candidate(prio api.Priority) *placement {
	pl := &placement{p: api.Placement{ID: "new", Model: "new", Namespace: "default", Runtime: api.RuntimeLlamaServer, Priority: prio, State: api.StateSizing}}
	pl.ctx, pl.cancel = context.WithCancel(context.Background())
	return pl
}

func admit(a *Agent, pl *placement, bytes int64, serr error, warn, mayEvict bool) (verdict, *api.Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.admitLocked(pl, api.SizeEstimate{Bytes: bytes, Method: api.SizeHeader, Device: api.DeviceHost}, serr, warn, mayEvict)
}

func TestBudgetDefaults(t *testing.T) {
	pi := probeFixture(t, "pi5-hailo") // 15.8 GiB
	if got, want := budgetFor(pi, 0, 0), int64(float64(pi.Memory.Total)*0.67); got != want {
		t.Errorf("16 GB host budget = %d, want 0.67 × total = %d", got, want)
	}
	big := probeFixture(t, "x86-nvidia") // 62.7 GiB
	if got, want := budgetFor(big, 0, 0), int64(float64(big.Memory.Total)*0.75); got != want {
		t.Errorf("64 GB host budget = %d, want 0.75 × total = %d", got, want)
	}
	box := probeFixture(t, "container-2g")
	if got, want := budgetFor(box, 0, 0), int64(float64(box.Memory.Total)*0.67); got != want || box.Memory.Total != 2<<30 {
		t.Errorf("cgroup-limited budget = %d, want 0.67 × the 2 GiB limit", got)
	}
	if got := budgetFor(pi, 12<<30, 0.5); got != 12<<30 {
		t.Errorf("override = %d, want 12 GiB", got)
	}
	if got := budgetFor(pi, 0, 0.5); got != pi.Memory.Total/2 {
		t.Errorf("fraction 0.5 = %d", got)
	}
	unknown := pi
	unknown.Unknown = []string{"memory.total"}
	if got := budgetFor(unknown, 0, 0); got != 0 {
		t.Errorf("unknown total gives budget %d, want 0 (fail closed)", got)
	}
}

func TestAdmissionCountsCommittedAndReserved(t *testing.T) {
	a := newBareAgent(t, "pi5-hailo", func(c *Config) { c.Budget = 10 << 30 })
	put(a, "ready", "a", api.StateReady, 4<<30, api.PriorityNormal, nil)
	put(a, "pulling", "b", api.StatePulling, 3<<30, api.PriorityNormal, nil)
	put(a, "failed", "c", api.StateFailed, 8<<30, api.PriorityNormal, nil) // holds nothing
	m := a.Host().Memory
	if m.Committed != 4<<30 || m.Reserved != 3<<30 || m.Free() != 3<<30 {
		t.Fatalf("memory = %+v", m)
	}
	if v, err := admit(a, candidate(api.PriorityNormal), 3<<30, nil, false, true); err != nil {
		t.Fatalf("3 GiB into 3 GiB free: %v", err)
	} else if !strings.HasPrefix(v.reason, "fits:") {
		t.Fatalf("reason %q", v.reason)
	}
	_, err := admit(a, candidate(api.PriorityNormal), 3<<30+1, nil, false, true)
	if err == nil || err.Code != api.CodeInsufficientMemory {
		t.Fatalf("one byte too many: %v", err)
	}
	// The refusal says what would have to go, and how.
	if !strings.Contains(err.Fix, "delete a (ready") || !strings.Contains(err.Fix, "--evict") {
		t.Fatalf("fix = %q", err.Fix)
	}
}

func TestUnknownSizeFailsClosedUnlessWarn(t *testing.T) {
	a := newBareAgent(t, "pi5-hailo", func(c *Config) { c.Budget = 10 << 30 })
	serr := api.Errorf(api.CodeMemoryCheckFailed, "no Content-Length")
	if _, err := admit(a, candidate(api.PriorityNormal), 0, serr, false, false); err == nil || err.Code != api.CodeMemoryCheckFailed {
		t.Fatalf("unsized model: %v, want MemoryCheckFailed", err)
	}
	if _, err := admit(a, candidate(api.PriorityNormal), 0, errors.New("connection refused"), false, false); err == nil || err.Code != api.CodeMemoryCheckFailed {
		t.Fatalf("sizer transport error: %v, want MemoryCheckFailed", err)
	}
	if _, err := admit(a, candidate(api.PriorityNormal), 0, nil, false, false); err == nil || err.Code != api.CodeMemoryCheckFailed {
		t.Fatalf("zero-byte estimate: %v, want MemoryCheckFailed", err)
	}
	v, err := admit(a, candidate(api.PriorityNormal), 0, serr, true, false)
	if err != nil || !v.warned || v.estimate.Method != api.SizeUnknown {
		t.Fatalf("warn: %+v %v", v, err)
	}
	// A source that names nothing stays refused whatever the mode.
	if _, err := admit(a, candidate(api.PriorityNormal), 0, api.Errorf(api.CodeNotFound, "no such model"), true, false); err == nil || err.Code != api.CodeNotFound {
		t.Fatalf("not found under warn: %v", err)
	}
	// Over budget under warn: admitted, flagged.
	v, err = admit(a, candidate(api.PriorityNormal), 20<<30, nil, true, false)
	if err != nil || !v.warned || !strings.Contains(v.reason, "over budget") {
		t.Fatalf("over budget under warn: %+v %v", v, err)
	}
}

func TestUnknownTotalFailsClosed(t *testing.T) {
	a := newBareAgent(t, "pi5-hailo", func(c *Config) { c.Host.Unknown = []string{"memory.total"} })
	_, err := admit(a, candidate(api.PriorityNormal), 1<<30, nil, false, false)
	if err == nil || err.Code != api.CodeMemoryCheckFailed || !strings.Contains(err.Fix, "--memory-budget") {
		t.Fatalf("unknown total: %v", err)
	}
}

func TestEvictionPicksIdleLowerPriorityLRUFirst(t *testing.T) {
	a := newBareAgent(t, "pi5-hailo", func(c *Config) {
		c.Budget = 10 << 30
		c.Evict = true
		c.IdleAfter = time.Minute
	})
	old := time.Now().Add(-2 * time.Hour)
	recent := time.Now().Add(-30 * time.Minute)
	put(a, "low-recent", "low-recent", api.StateReady, 2<<30, api.PriorityLow, func(p *placement) { p.p.LastUsed = recent })
	put(a, "low-old", "low-old", api.StateReady, 2<<30, api.PriorityLow, func(p *placement) { p.p.LastUsed = old })
	put(a, "batch", "batch", api.StateReady, 1<<30, api.PriorityBatch, func(p *placement) { p.p.LastUsed = recent })
	put(a, "busy", "busy", api.StateReady, 1<<30, api.PriorityBatch, func(p *placement) { p.p.LastUsed = time.Now() })
	put(a, "prot", "prot", api.StateReady, 1<<30, api.PriorityBatch, func(p *placement) { p.p.Protected = true; p.p.LastUsed = old })
	put(a, "equal", "equal", api.StateReady, 1<<30, api.PriorityNormal, func(p *placement) { p.p.LastUsed = old })
	// Free: 10 − 8 = 2 GiB. A 4.5 GiB model needs 2.5 GiB more: batch (1) then low-old (2).
	v, err := admit(a, candidate(api.PriorityNormal), 9<<29, nil, false, true)
	if err != nil {
		t.Fatalf("admission with eviction: %v", err)
	}
	var got []string
	for _, x := range v.victims {
		got = append(got, x.p.ID)
	}
	if strings.Join(got, ",") != "batch,low-old" {
		t.Fatalf("victims %v, want batch then low-old (never busy, protected or equal priority)", got)
	}
	// Without --evict the same request is refused, naming what would have to go.
	a.cfg.Evict = false
	_, e := admit(a, candidate(api.PriorityNormal), 9<<29, nil, false, true)
	if e == nil || e.Code != api.CodeInsufficientMemory || !strings.Contains(e.Fix, "--evict") {
		t.Fatalf("without --evict: %v", e)
	}
	// More than every evictable placement frees: refused even with --evict.
	a.cfg.Evict = true
	_, e = admit(a, candidate(api.PriorityNormal), 8<<30, nil, false, true)
	if e == nil || e.Code != api.CodeInsufficientMemory || !strings.Contains(e.Fix, "eviction found no") {
		t.Fatalf("too big to make room for: %v", e)
	}
}

func TestEvictionSparesDaemonsOutsideTheCgroup(t *testing.T) {
	a := newBareAgent(t, "container-2g", func(c *Config) {
		c.Budget = 2 << 30
		c.Evict = true
		c.IdleAfter = time.Minute
	})
	put(a, "ollama", "o", api.StateReady, 1<<30, api.PriorityBatch, func(p *placement) { p.p.Runtime = api.RuntimeOllama })
	put(a, "llama", "l", api.StateReady, 512<<20, api.PriorityBatch, nil)
	// Free 512 MiB; needing 1 GiB takes the llama-server one, never the daemon's.
	v, err := admit(a, candidate(api.PriorityNormal), 1<<30, nil, false, true)
	if err != nil || len(v.victims) != 1 || v.victims[0].p.ID != "llama" {
		t.Fatalf("victims %+v err %v", v.victims, err)
	}
	// Needing more than the llama-server one frees is refused: the daemon's model is not evictable here.
	if _, err := admit(a, candidate(api.PriorityNormal), 1<<30+512<<20, nil, false, true); err == nil {
		t.Fatal("evicted a model served by a daemon outside the agent's cgroup")
	}
}

func TestHailoSwapAndDeviceMemory(t *testing.T) {
	a := newBareAgent(t, "pi5-hailo", func(c *Config) { c.Budget = 1 << 30 })
	hailo := func(id string, prio api.Priority, mod func(*placement)) *placement {
		return put(a, id, id, api.StateReady, 2<<30, prio, func(p *placement) {
			p.p.Runtime = api.RuntimeHailoOllama
			p.p.Memory.Device = api.DeviceHailo
			if mod != nil {
				mod(p)
			}
		})
	}
	newHailo := func(prio api.Priority) *placement {
		pl := candidate(prio)
		pl.p.Runtime = api.RuntimeHailoOllama
		return pl
	}
	admitHailo := func(pl *placement, bytes int64) (verdict, *api.Error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.admitLocked(pl, api.SizeEstimate{Bytes: bytes, Method: api.SizeHead, Device: api.DeviceHailo}, nil, false, false)
	}
	// The device is free: fits, and host RAM (1 GiB budget) is not what counts.
	v, err := admitHailo(newHailo(api.PriorityNormal), 2<<30)
	if err != nil || v.swap != nil {
		t.Fatalf("free device: %+v %v", v, err)
	}
	if _, err := admitHailo(newHailo(api.PriorityNormal), 9<<30); err == nil || err.Code != api.CodeInsufficientMemory {
		t.Fatalf("a 9 GiB HEF on an 8 GiB device: %v", err)
	}
	cur := hailo("qwen", api.PriorityNormal, nil)
	if a.Host().Memory.Committed != 0 {
		t.Fatal("a Hailo model is counted against host RAM")
	}
	if got := a.Host().Accelerators[0].Loaded; got != "qwen" {
		t.Fatalf("accelerator shows loaded %q, want qwen", got)
	}
	pl := newHailo(api.PriorityNormal)
	v, err = admitHailo(pl, 2<<30)
	if err != nil || v.swap != cur {
		t.Fatalf("second Hailo model: %+v %v, want a swap of qwen", v, err)
	}
	a.mu.Lock()
	a.evictLocked(pl, v)
	a.mu.Unlock()
	// The model on the device keeps answering while the new one is pulled.
	if cur.p.State != api.StateReady || pl.swapOut != cur || cur.swapIn != pl || len(pl.victims) != 0 {
		t.Fatalf("placement to be swapped out, before the pull: %+v", cur.p)
	}
	// A pull that fails leaves it there.
	a.mu.Lock()
	unswapLocked(pl)
	a.mu.Unlock()
	if cur.p.State != api.StateReady || cur.swapIn != nil || pl.swapOut != nil {
		t.Fatalf("after a failed pull: %+v", cur.p)
	}
	// Pulled: now it goes.
	a.mu.Lock()
	a.evictLocked(pl, v)
	gone := a.swapLocked(pl)
	a.mu.Unlock()
	if gone != cur || cur.p.State != api.StateEvicted || cur.p.ReplacedBy != "new" {
		t.Fatalf("swapped-out placement: %+v", cur.p)
	}
	// A protected model on the device is not swapped out.
	hailo("keep", api.PriorityNormal, func(p *placement) { p.p.Protected = true })
	if _, err := admitHailo(newHailo(api.PriorityCritical), 2<<30); err == nil || !strings.Contains(err.Fix, "delete keep") {
		t.Fatalf("swap of a protected model: %v", err)
	}
}

func TestStaleReadyIsNotReady(t *testing.T) {
	a := newBareAgent(t, "pi5-hailo", func(c *Config) { c.ReadyTTL = time.Second })
	pl := put(a, "p", "m", api.StateReady, 1<<30, api.PriorityNormal, nil)
	if got, _ := a.Get(api.Principal{Admin: true}, "p"); got.State != api.StateReady {
		t.Fatalf("fresh: %s", got.State)
	}
	a.mu.Lock()
	pl.healthyAt = time.Now().Add(-time.Minute)
	a.mu.Unlock()
	got, _ := a.Get(api.Principal{Admin: true}, "p")
	if got.State != api.StateRestarting || !strings.Contains(got.Reason, "no health check") {
		t.Fatalf("stale ready shown as %s (%s)", got.State, got.Reason)
	}
	if _, ok := serving(t, a, "", "m"); ok {
		t.Fatal("the gateway would route to a placement with a stale health check")
	}
}

func TestDefaultNodeName(t *testing.T) {
	for in, want := range map[string]string{
		"raspberrypi":    "raspberrypi-abcd",
		"Mac-Mini.local": "mac-mini-local-abcd",
		"":               "host-abcd",
		"__":             "host-abcd",
	} {
		if got := defaultNodeName(in, "abcdef0123456789"); got != want {
			t.Errorf("defaultNodeName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The Hailo-10H is taken from the moment a model is admitted to it, not once it answers: a
// model loading after a swap shows as the device's, so the mesh ranks a second model a swap
// and never "the Hailo-10H is free". (A keeper saw it free while the newcomer loaded and put
// the model it had replaced back, which swapped the newcomer out, on and on.) While a
// replacer is pulled, the model still answering is the one shown.
func TestHailoLoadingTakesTheDevice(t *testing.T) {
	a := newBareAgent(t, "pi5-hailo", func(c *Config) { c.Budget = 1 << 30 })
	onHailo := func(p *placement) {
		p.p.Runtime = api.RuntimeHailoOllama
		p.p.Memory.Device = api.DeviceHailo
	}
	put(a, "old", "qwen", api.StateEvicted, 2<<30, api.PriorityNormal, onHailo)
	put(a, "new", "llama", api.StateLoading, 2<<30, api.PriorityNormal, onHailo)
	if got := a.Host().Accelerators[0].Loaded; got != "llama" {
		t.Fatalf("device with a model loading shows loaded %q, want llama", got)
	}
	put(a, "next", "deepseek", api.StatePulling, 2<<30, api.PriorityNormal, onHailo)
	a.mu.Lock()
	a.placements["new"].p.State = api.StateReady
	a.placements["new"].healthyAt = time.Now()
	a.mu.Unlock()
	if got := a.Host().Accelerators[0].Loaded; got != "llama" {
		t.Fatalf("device answering with llama while deepseek is pulled shows %q", got)
	}
}
