package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	hailosim "github.com/llmkube/mesh/sim/hailo"
)

// On hailo-ollama 5.3.0 the swap estimate states what a swap costs beyond the load.
func TestHailoSwapEstimateStatesTheCost(t *testing.T) {
	_, s, _ := hailoRigWith(t, func(c *hailosim.Config) { c.Version = "5.3.0" }, nil)
	ctx := context.Background()
	first, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s.admin, first.ID, api.StateReady)
	e, err := s.admin.Estimate(ctx, api.PlacementRequest{Source: "hailo://qwen2.5-coder:1.5b"})
	if err != nil || e.Verdict != api.VerdictSwap {
		t.Fatalf("estimate: %+v %v", e, err)
	}
	if !strings.Contains(e.Reason, "hailo-ollama 5.3.0 keeps the device between loads: answers degrade after this swap") {
		t.Errorf("the swap's cost is not stated: %s", e.Reason)
	}
}

// A placement made under 5.1.1's name keeps running on 5.3.0, and the ready event says which
// name ran.
func TestHailoRenamedModelPlacesAndSaysItsName(t *testing.T) {
	a, s, sim := hailoRigWith(t, func(c *hailosim.Config) { c.Version = "5.3.0" }, nil)
	ctx := context.Background()
	_, sub := a.Events().Subscribe(0, nil)
	defer sub.Close()
	p, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2.5-instruct:1.5b"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s.admin, p.ID, api.StateReady)
	if got := sim.Stats().Loaded; got != "qwen2.5:1.5b" {
		t.Fatalf("loaded %q", got)
	}
	var seen []string
	for {
		select {
		case ev := <-sub.C():
			if strings.Contains(ev.Message, "as qwen2.5:1.5b, the engine's name for qwen2.5-instruct:1.5b") {
				return
			}
			seen = append(seen, ev.Message)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event names the daemon's name: %q", seen)
		}
	}
}

// The doctor's own findings name a hailo-ollama 5.3.0 left on every interface, with its fix.
func TestDoctorNamesAnExposedHailoOllama(t *testing.T) {
	a, _, sim := hailoRigWith(t, func(c *hailosim.Config) { c.Version, c.Listen = "5.3.0", "0.0.0.0:0" }, nil)
	var found []api.Finding
	for _, f := range a.Findings(context.Background()) {
		if strings.Contains(f.Problem, "beyond loopback") {
			found = append(found, f)
		}
	}
	if len(found) != 1 || !strings.Contains(found[0].Problem, "engine hailo-ollama") ||
		!strings.Contains(found[0].Fix, "OLLAMA_HOST=127.0.0.1:"+strings.TrimPrefix(sim.URL(), "http://127.0.0.1:")) {
		t.Fatalf("findings %+v", found)
	}
}
