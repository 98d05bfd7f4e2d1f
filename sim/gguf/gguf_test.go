package gguf

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	parser "github.com/gpustack/gguf-parser-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteParsesWithGGUFParser(t *testing.T) {
	for _, spec := range Presets() {
		t.Run(spec.Name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), spec.Name+".gguf")
			require.NoError(t, Write(path, spec))

			gf, err := parser.ParseGGUFFile(path, parser.SkipLargeMetadata(), parser.UseMMap())
			require.NoError(t, err)
			a := gf.Architecture()
			assert.Equal(t, "llama", a.Architecture)
			assert.Equal(t, uint64(spec.BlockCount), a.BlockCount)
			assert.Equal(t, uint64(spec.EmbeddingLength), a.EmbeddingLength)
			assert.Equal(t, uint64(spec.HeadCount), a.AttentionHeadCount)
			assert.Equal(t, uint64(spec.HeadCountKV), a.AttentionHeadCountKV)
			assert.Equal(t, uint64(spec.ContextLength), a.MaximumContextLength)
			assert.Equal(t, uint64(spec.VocabSize), a.VocabularyLength)
			assert.Equal(t, uint64(spec.VocabSize), gf.Tokenizer().TokensLength)
			assert.Equal(t, spec.Name, gf.Metadata().Name)
			assert.Equal(t, uint64(9*spec.BlockCount+3), gf.Header.TensorCount)
			assert.Equal(t, spec.TensorBytes(), int64(gf.ModelSize))

			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, int64(gf.Size), fi.Size())
			// The data region is a hole: the disk holds little more than the header.
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				header := fi.Size() - spec.TensorBytes()
				assert.Less(t, st.Blocks*512, header+1<<20, "file should be sparse")
			}
		})
	}
}

func TestPresetSizesAreRealistic(t *testing.T) {
	const gib = 1 << 30
	want := map[string][2]float64{ // GiB bounds of the tensor data
		"sim-0.5b": {0.5, 0.7},
		"sim-1b":   {0.6, 0.8},
		"sim-3b":   {1.6, 2.0},
	}
	for name, b := range want {
		s, ok := Preset(name)
		require.True(t, ok, name)
		got := float64(s.TensorBytes()) / gib
		assert.True(t, got >= b[0] && got <= b[1], "%s: %.2f GiB, want %.2f..%.2f", name, got, b[0], b[1])
	}
	_, ok := Preset("sim-70b")
	assert.False(t, ok)
}

func TestEstimateScalesWithContext(t *testing.T) {
	spec, _ := Preset("sim-tiny")
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, Write(path, spec))
	gf, err := parser.ParseGGUFFile(path, parser.SkipLargeMetadata(), parser.UseMMap())
	require.NoError(t, err)

	kv := func(ctx int32) uint64 {
		e := gf.EstimateLLaMACppRun(parser.WithLLaMACppContextSize(ctx), parser.WithLLaMACppOffloadLayers(0))
		return uint64(e.Devices[0].KVCache.Sum())
	}
	// K and V, every layer, every position, the KV heads' width, f16.
	perToken := uint64(2 * spec.BlockCount * spec.EmbeddingLength / spec.HeadCount * spec.HeadCountKV * 2)
	assert.Equal(t, 2048*perToken, kv(2048))
	assert.Equal(t, 8192*perToken, kv(8192))
}

func TestWeightBytesPadsTheDataRegion(t *testing.T) {
	spec, _ := Preset("sim-tiny")
	spec.WeightBytes = 1 << 30
	path := filepath.Join(t.TempDir(), "big.gguf")
	require.NoError(t, Write(path, spec))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Greater(t, fi.Size(), int64(1<<30))
	gf, err := parser.ParseGGUFFile(path, parser.SkipLargeMetadata(), parser.UseMMap())
	require.NoError(t, err)
	// gguf-parser-go sizes the data region from the file; the weights it estimates come from
	// the tensor infos.
	assert.Equal(t, int64(1<<30), int64(gf.ModelSize))
	e := gf.EstimateLLaMACppRun(parser.WithLLaMACppOffloadLayers(0))
	assert.Equal(t, spec.TensorBytes(), int64(e.Devices[0].Weight.Sum()))
}

func TestWriteRefusesBadSpecs(t *testing.T) {
	base, _ := Preset("sim-tiny")
	cases := map[string]func(*Spec){
		"unsupported file type":  func(s *Spec) { s.FileType = "Q4_K_M" },
		"block count":            func(s *Spec) { s.BlockCount = 0 },
		"must be positive":       func(s *Spec) { s.VocabSize = 0 },
		"not a multiple of head": func(s *Spec) { s.HeadCount = 3 },
		"must divide head count": func(s *Spec) { s.HeadCountKV = 3 },
		"elements per block":     func(s *Spec) { s.FeedForwardLength = 700 },
	}
	dir := t.TempDir()
	for want, mutate := range cases {
		s := base
		mutate(&s)
		err := Write(filepath.Join(dir, "x.gguf"), s)
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), want)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "a refused spec leaves no file behind")
}
