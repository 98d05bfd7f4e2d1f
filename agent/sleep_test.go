package agent

import (
	"context"
	"syscall"
	"testing"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// A placement idle for its TTL sleeps: its engine process ends and its budget is freed, the
// record stays; a request wakes it (admitted again, loaded), and it sleeps again once idle.
func TestIdlePlacementSleepsAndWakes(t *testing.T) {
	dir := t.TempDir()
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{llamaDriver(t, dir)}, nil)
	s := serve(t, a, nil)
	p, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: tinyModel(t, dir, "tiny"), TTL: "150ms"})
	if err != nil {
		t.Fatal(err)
	}
	if p.TTL != "150ms" {
		t.Fatalf("ttl %q kept, want 150ms", p.TTL)
	}
	waitState(t, s.admin, p.ID, api.StateReady)
	pid := enginePid(t, a, p.ID)
	if a.Host().Memory.Committed == 0 {
		t.Fatal("a ready placement commits nothing")
	}
	q := waitState(t, s.admin, p.ID, api.StateSleeping)
	if q.Engine != "" || q.Reason != "idle for 150ms" {
		t.Fatalf("sleeping placement: engine %q, reason %q", q.Engine, q.Reason)
	}
	waitFor(t, func() bool { return a.Host().Memory.Committed == 0 }, "the budget to be freed")
	waitFor(t, func() bool { return syscall.Kill(pid, 0) != nil }, "the engine process to end")

	release, wait, err := a.Acquire(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if wait == nil {
		t.Fatal("waking a sleeping placement gave nothing to wait on")
	}
	if err := wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l, ok := a.ServingID(p.ID); !ok || l.Placement.State != api.StateReady {
		t.Fatalf("woken placement not serving: %+v", l.Placement)
	}
	if a.Host().Memory.Committed == 0 {
		t.Fatal("a woken placement commits nothing")
	}
	// In flight, it does not sleep however long it takes; released, it does.
	release()
	waitState(t, s.admin, p.ID, api.StateSleeping)
}

// A placement's ttl is checked: 0 would unload it as soon as it loaded, garbage is refused.
func TestPlacementTTLChecked(t *testing.T) {
	dir := t.TempDir()
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{llamaDriver(t, dir)}, nil)
	s := serve(t, a, nil)
	for _, ttl := range []string{"0", "soon", "1e300"} {
		_, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: tinyModel(t, dir, "tiny"), TTL: ttl})
		if codeOfErr(err) != api.CodeBadRequest {
			t.Errorf("ttl %q: %v, want BadRequest", ttl, err)
		}
	}
	p, err := s.admin.Place(context.Background(), api.PlacementRequest{Source: tinyModel(t, dir, "tiny"), TTL: "-1"})
	if err != nil {
		t.Fatal(err)
	}
	if p.TTL != "-1s" {
		t.Fatalf("ttl -1 kept as %q, want -1s (never)", p.TTL)
	}
}

// A placement sleeping when the agent stopped is restored asleep: nothing loads at start, and
// the first request wakes it.
func TestRestartKeepsASleepingPlacementAsleep(t *testing.T) {
	dir := t.TempDir()
	model := tinyModel(t, dir, "tiny")
	secret, _ := api.NewSecret()

	a1, c1, stop1, done1 := startPersisted(t, dir, secret)
	p, err := c1.Place(context.Background(), api.PlacementRequest{Source: model})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c1, p.ID, api.StateReady)
	if err := a1.SetTTL(p.ID, 0); err != nil { // keep_alive 0: unload now
		t.Fatal(err)
	}
	waitState(t, c1, p.ID, api.StateSleeping)
	stop1()
	<-done1

	a2, c2, stop2, done2 := startPersisted(t, dir, secret)
	defer func() { stop2(); <-done2 }()
	q, err := c2.Placement(context.Background(), p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if q.State != api.StateSleeping || a2.Host().Memory.Committed != 0 {
		t.Fatalf("restored placement is %s, committing %d; want sleeping, nothing", q.State, a2.Host().Memory.Committed)
	}
	if _, ok := a2.ServingID(p.ID); ok {
		t.Fatal("a restored sleeping placement serves")
	}
	// keep_alive 0 stays its TTL; a longer one lets the woken placement stay up.
	if err := a2.SetTTL(p.ID, -1); err != nil {
		t.Fatal(err)
	}
	release, wait, err := a2.Acquire(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitState(t, c2, p.ID, api.StateReady)
}
