package sizing

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/engines/enginetest"
)

// TestProjector sizes a projector by its tensors and refuses what is not one.
func TestProjector(t *testing.T) {
	var s Sizer
	src, err := source.Parse(enginetest.TinyMMProj(t, 64))
	require.NoError(t, err)
	weights, err := s.Projector(t.Context(), src)
	require.NoError(t, err)
	// make_mmproj.py's tensors: f16 weights (patch 32×3×8×8, positions 16×32, q/k/v/out 4×32×32,
	// ffn 2×64×32, mm.0 64×32, mm.2 64×64) and f32 biases and norms (4×32 + 2×2×32 + 64 + 32 +
	// 2×64): 2×20992 + 4×480 bytes.
	assert.Equal(t, int64(2*20992+4*480), weights)

	model, _ := writeModel(t, "sim-tiny", nil)
	src, err = source.Parse(model)
	require.NoError(t, err)
	_, err = s.Projector(t.Context(), src)
	requireCode(t, err, api.CodeInvalidSource, "not a multimodal projector")

	src, err = source.Parse("ollama://llava:7b")
	require.NoError(t, err)
	_, err = s.Projector(t.Context(), src)
	requireCode(t, err, api.CodeInvalidSource, "a projector is a GGUF file")
}
