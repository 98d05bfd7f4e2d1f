package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// A namespace token's engine arguments that change memory change what admission counts: the
// engine it runs is the engine that was sized (issue 42: -ctk f32 and -ub 4096 ran a cache
// twice and buffers eight times what was counted).
func TestEngineArgumentsChangeTheEstimate(t *testing.T) {
	dir := t.TempDir()
	model := tinyModel(t, dir, "m")
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{llamaDriver(t, dir)}, func(c *Config) { c.GGUFDirs = []string{dir} })
	s := serve(t, a, nil)
	team := s.nsClient(t, "team-a")
	ctx := context.Background()
	estimate := func(args ...string) api.Estimation {
		t.Helper()
		e, err := team.Estimate(ctx, api.PlacementRequest{Source: model, Context: 1024, Args: args})
		if err != nil || e.Verdict != api.VerdictFits {
			t.Fatalf("%q: %+v %v", args, e, err)
		}
		return e
	}
	base := estimate()
	if f32 := estimate("-ctk", "f32", "-ctv", "f32"); f32.Estimate.KV != 2*base.Estimate.KV || f32.Estimate.Bytes <= base.Estimate.Bytes {
		t.Errorf("-ctk f32 -ctv f32: KV %d, bytes %d; defaults KV %d, bytes %d", f32.Estimate.KV, f32.Estimate.Bytes, base.Estimate.KV, base.Estimate.Bytes)
	}
	if ub := estimate("-b", "4096", "-ub", "4096"); ub.Estimate.Compute <= base.Estimate.Compute*3/2 {
		t.Errorf("-ub 4096: compute %d, defaults %d", ub.Estimate.Compute, base.Estimate.Compute)
	}
	if fa := estimate("-fa", "off"); fa.Estimate.Compute <= base.Estimate.Compute || !strings.Contains(fa.Estimate.Detail, "flash attention off") {
		t.Errorf("-fa off: compute %d, defaults %d: %s", fa.Estimate.Compute, base.Estimate.Compute, fa.Estimate.Detail)
	}
}
