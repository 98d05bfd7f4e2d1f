package detail

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/agent/api"
)

func TestModelCellNamesSplitShares(t *testing.T) {
	assert.Equal(t, "qwen", modelCell(api.Placement{Model: "qwen"}))
	assert.Equal(t, "big (split main, 2 members)", modelCell(api.Placement{Model: "big", Split: &api.SplitPlan{Members: make([]api.SplitMember, 2)}}))
	assert.Equal(t, "share of split p-1 on tower: 6 layers (75%)", modelCell(api.Placement{Model: "big.part.p-1",
		Part: &api.SplitPart{Parent: "p-1", Main: "tower", Member: api.SplitMember{Layers: 6, Share: 0.75}}}))
}
