package hailozoo_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/internal/hailozoo"
	hailosim "github.com/llmkube/mesh/sim/hailo"
)

func TestOffers(t *testing.T) {
	zoo530 := hailosim.ZooModelsOf("5.3.0")
	for ref, want := range map[string]string{
		"qwen2.5-instruct:1.5b":         "qwen2.5:1.5b",
		"deepseek_r1_distill_qwen:1.5b": "deepseek_r1:1.5b",
		"qwen3:1.7b":                    "qwen3:1.7b",
		"llama3.2:3b":                   "",
	} {
		got, ok := hailozoo.Offers(zoo530, ref)
		assert.Equal(t, want, got, ref)
		assert.Equal(t, want != "", ok, ref)
	}
	got, ok := hailozoo.Offers(hailosim.ZooModels(), "qwen2.5:1.5b")
	assert.True(t, ok)
	assert.Equal(t, "qwen2.5-instruct:1.5b", got)
	_, ok = hailozoo.Offers(hailosim.ZooModels(), "qwen3:1.7b")
	assert.False(t, ok, "qwen3 came with 5.3.0")
}

func TestReleaseOf(t *testing.T) {
	for reported, tools := range map[string]bool{"0.5.1": false, "": false, "5.2.0": false, "5.3.0": true, "v5.4.0": true, "6.0": true, "junk": false} {
		r := hailozoo.ReleaseOf(reported)
		assert.Equal(t, tools, r.ToolsByTemplate(), reported)
		assert.Equal(t, tools, r.SwapDefect(), reported)
		assert.Equal(t, tools, r.BindsByEnv(), reported)
	}
}
