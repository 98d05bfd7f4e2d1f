package models

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// A split is one row, its hosts the members, its memory theirs too; its parts are not rows.
func TestSplitIsOneRow(t *testing.T) {
	ctx := testCtx()
	plan := &api.SplitPlan{Fits: true, Layers: 8, Members: []api.SplitMember{
		{Host: "tower", Main: true, Layers: 2, Share: 0.25, Need: 100 << 20, MainNeed: 600 << 20},
		{Host: "pi4", Layers: 6, Share: 0.75, Need: 300 << 20},
	}}
	for i, m := range ctx.Mesh.Members {
		switch m.Name {
		case "tower":
			ctx.Mesh.Members[i].Placements = append(m.Placements,
				api.Placement{ID: "p-s", Host: "tower", Model: "big", Runtime: api.RuntimeLlamaServer, State: api.StateReady, Memory: api.SizeEstimate{Bytes: 600 << 20}, Split: plan},
				api.Placement{ID: "p-a", Host: "tower", Model: "big.part.p-s", Runtime: api.RuntimeRPCServer, State: api.StateReady, Part: &api.SplitPart{Parent: "p-s", Main: "tower"}})
		case "pi4":
			ctx.Mesh.Members[i].Placements = append(m.Placements,
				api.Placement{ID: "p-b", Host: "pi4", Model: "big.part.p-s", Runtime: api.RuntimeRPCServer, State: api.StateReady, Part: &api.SplitPart{Parent: "p-s", Main: "tower"}})
		}
	}
	m := New(ctx)
	m.SetSize(160, 40)
	var split []api.Placement
	for _, p := range m.Rows() {
		assert.Nil(t, p.Part, "a part is a row: %s", p.Model)
		if p.Split != nil {
			split = append(split, p)
		}
	}
	require.Len(t, split, 1)
	assert.Equal(t, "tower+pi4", hostOf(split[0]))
	assert.Equal(t, int64(1000<<20), memoryOf(split[0]))
	assert.Contains(t, Detail(split[0]), "split: tower main 700 MiB: 2/8 layers (0.25), pi4 300 MiB: 6/8 layers (0.75)",
		"each member's figure is what it reserves, the main's llama-server with its layers")
	assert.True(t, strings.Contains(m.View(), "tower+pi4"), "the row names the members")

	// While it starts, what the main has sent its members of their weights.
	starting := split[0]
	starting.State, starting.Progress, starting.PulledBytes, starting.TotalBytes = api.StateLoading, 0.25, 1<<30, 4<<30
	assert.Contains(t, Detail(starting), "1.0 GiB of 4.0 GiB sent to the members")
}
