package state

import (
	"strings"
	"testing"

	"github.com/llmkube/mesh/agent/api"
)

// A split's part (runtime rpc-server) is saved and read back, so a restart restores it; an
// rpc-server placement that is no part is still refused.
func TestSplitPartRoundTrip(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s := sample()
	s.Placements = append(s.Placements, api.Placement{ID: "p2", Model: "x.part.p9", Source: "/m/x.gguf", Runtime: api.RuntimeRPCServer,
		State: api.StateReady, Part: &api.SplitPart{Parent: "p9", Main: "main", Member: api.SplitMember{Layers: 4, Need: 1 << 30}}})
	if err := d.Save(s); err != nil {
		t.Fatal(err)
	}
	got, ok, err := d.Load()
	if err != nil || !ok || len(got.Placements) != 2 || got.Placements[1].Part == nil || got.Placements[1].Part.Parent != "p9" {
		t.Fatalf("a part did not survive a restart: ok=%v err=%v %+v", ok, err, got.Placements)
	}
	s.Placements[1].Part = nil
	if err := d.Save(s); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Load(); err == nil || !strings.Contains(err.Error(), `unknown runtime "rpc-server"`) {
		t.Fatalf("an rpc-server placement that is no part: %v", err)
	}
}
