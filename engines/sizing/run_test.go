package sizing

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// Each of llama-server's arguments that changes memory changes the estimate: the cache types
// scale the KV cache by their bytes per element, the micro-batch scales the buffers, flash
// attention off adds every head's scores, slots multiply the context.
func TestEstimateFollowsTheRun(t *testing.T) {
	path, _ := writeModel(t, "sim-1b", nil)
	s := &Sizer{}
	const ctx = 8192
	est := func(r Run) api.SizeEstimate {
		t.Helper()
		e, err := s.EstimateRun(context.Background(), parse(t, path), ctx, r)
		require.NoError(t, err)
		assert.Equal(t, e.Weights+e.KV+e.Compute+e.Cache+e.Overhead, e.Bytes)
		return e
	}
	base := est(Run{})
	def, err := s.Estimate(context.Background(), parse(t, path), ctx)
	require.NoError(t, err)
	assert.Equal(t, base, def, "the zero Run is the default")
	assert.Equal(t, base, est(Run{Slots: 1, CacheK: "f16", CacheV: "f16", Batch: 2048, UBatch: 512, FlashAttn: "auto"}), "the defaults spelled out")

	f32 := est(Run{CacheK: "f32", CacheV: "f32"})
	assert.Equal(t, 2*base.KV, f32.KV, "f32 is twice f16")
	assert.Contains(t, f32.Detail, "× 8192 ctx, f32)")
	kOnly := est(Run{CacheK: "f32"})
	assert.Equal(t, 3*base.KV/2, kOnly.KV)
	assert.Contains(t, kOnly.Detail, "K f32, V f16")
	// q8_0: 34 bytes a block of 32; q4_0: 18 (the V cache quantized needs flash attention,
	// which is the default).
	assert.Equal(t, base.KV*34/64, est(Run{CacheK: "q8_0", CacheV: "q8_0"}).KV)
	assert.Equal(t, base.KV*18/64, est(Run{CacheK: "q4_0", CacheV: "q4_0"}).KV)

	big := est(Run{Batch: 4096, UBatch: 4096})
	assert.Greater(t, big.Compute, 4*base.Compute, "8× the micro-batch: buffers several times larger")
	assert.Equal(t, base.KV, big.KV)
	assert.Equal(t, base, est(Run{Batch: 4096}), "a larger logical batch alone changes no buffer")
	assert.Less(t, est(Run{UBatch: 128}).Compute, base.Compute)
	assert.Equal(t, base.Compute, est(Run{Batch: 512, UBatch: 4096}).Compute, "the micro-batch is never larger than the batch")

	noFA := est(Run{FlashAttn: "off"})
	// 32 heads + the mask × 8192 × 512 × 4 bytes.
	assert.Equal(t, base.Compute+33*ctx*512*4, noFA.Compute)
	assert.Contains(t, noFA.Detail, "flash attention off: attention scores 528 MiB")
	assert.Equal(t, base, est(Run{FlashAttn: "on"}))

	slots := est(Run{Slots: 3})
	assert.Equal(t, 3*base.KV, slots.KV, "each slot holds the whole context")
	// Without flash attention the scores are of one slot's context, not all of them.
	assert.Equal(t, slots.Compute+33*ctx*512*4, est(Run{Slots: 3, FlashAttn: "off"}).Compute)
}

// What the estimate cannot count is refused, before anything is read.
func TestEstimateRefusesARunItCannotSize(t *testing.T) {
	path, _ := writeModel(t, "sim-tiny", nil)
	s := &Sizer{}
	for _, r := range []Run{{CacheK: "q2_k"}, {CacheV: "F16"}, {FlashAttn: "maybe"}, {UBatch: -1}, {Slots: -2}} {
		_, err := s.EstimateRun(context.Background(), parse(t, path), 0, r)
		requireCode(t, err, api.CodeInvalidSource, "cannot be sized")
	}
}
