// Package gguf writes valid GGUF v3 model files for tests and the demo: a real header (metadata,
// a tokenizer vocabulary, tensor infos with the shapes and types of a llama-like model) followed
// by a tensor data region that is left sparse, so a "2 GiB" model costs a few megabytes of disk.
// Anything that reads only the header — gguf-parser-go, a sizer, a simulated llama-server —
// sees a real model; the weights are all zeros.
//
// It imports nothing of the product, like every simulator.
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// Spec describes the model to write. Zero fields take the defaults noted.
type Spec struct {
	Arch              string // "llama" when empty
	Name              string // general.name
	BlockCount        int
	EmbeddingLength   int
	HeadCount         int
	HeadCountKV       int // HeadCount when 0 (no grouped-query attention)
	ContextLength     int // trained context; 2048 when 0
	VocabSize         int
	FeedForwardLength int
	FileType          string // F32, F16, Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0; Q4_0 when empty
	// WeightBytes, when larger than the tensors need, pads the (sparse) data region up to this
	// many bytes: a large file around a small architecture, for tests about how much of a file
	// is read.
	WeightBytes int64
}

// ggml tensor types and their block layout: elements per block and bytes per block.
type ggmlType struct {
	id         uint32
	blockElems int64
	blockBytes int64
	fileType   uint32 // llama_ftype written as general.file_type for a model mostly of this type
}

var types = map[string]ggmlType{
	"F32":  {0, 1, 4, 0},
	"F16":  {1, 1, 2, 1},
	"Q4_0": {2, 32, 18, 2},
	"Q4_1": {3, 32, 20, 3},
	"Q5_0": {6, 32, 22, 8},
	"Q5_1": {7, 32, 24, 9},
	"Q8_0": {8, 32, 34, 7},
}

const alignment = 32 // GGUF's default general.alignment

// tensor is one tensor info: name, dimensions (innermost first, as GGUF stores them) and type.
type tensor struct {
	name string
	dims []int64
	typ  ggmlType
}

func (t tensor) bytes() int64 {
	n := int64(1)
	for _, d := range t.dims {
		n *= d
	}
	return n / t.typ.blockElems * t.typ.blockBytes
}

func (s Spec) withDefaults() Spec {
	if s.Arch == "" {
		s.Arch = "llama"
	}
	if s.HeadCountKV == 0 {
		s.HeadCountKV = s.HeadCount
	}
	if s.ContextLength == 0 {
		s.ContextLength = 2048
	}
	if s.FileType == "" {
		s.FileType = "Q4_0"
	}
	return s
}

// Validate says what is wrong with the spec, if anything.
func (s Spec) Validate() error {
	s = s.withDefaults()
	t, ok := types[s.FileType]
	switch {
	case !ok:
		return fmt.Errorf("gguf: unsupported file type %q (want F32, F16, Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0)", s.FileType)
	case s.BlockCount <= 0 || s.BlockCount > 1024:
		return fmt.Errorf("gguf: block count %d out of range 1..1024", s.BlockCount)
	case s.EmbeddingLength <= 0 || s.HeadCount <= 0 || s.VocabSize <= 0 || s.FeedForwardLength <= 0:
		return errors.New("gguf: embedding length, head count, vocabulary size and feed-forward length must be positive")
	case s.EmbeddingLength%s.HeadCount != 0:
		return fmt.Errorf("gguf: embedding length %d is not a multiple of head count %d", s.EmbeddingLength, s.HeadCount)
	case s.HeadCountKV < 0 || s.HeadCountKV > s.HeadCount || s.HeadCount%s.HeadCountKV != 0:
		return fmt.Errorf("gguf: KV head count %d must divide head count %d", s.HeadCountKV, s.HeadCount)
	case int64(s.EmbeddingLength)%t.blockElems != 0 || int64(s.FeedForwardLength)%t.blockElems != 0 ||
		int64(s.EmbeddingLength/s.HeadCount*s.HeadCountKV)%t.blockElems != 0:
		return fmt.Errorf("gguf: %s packs %d elements per block: embedding, KV and feed-forward widths must be multiples of it", s.FileType, t.blockElems)
	case s.ContextLength < 0 || s.WeightBytes < 0:
		return errors.New("gguf: negative context length or weight bytes")
	}
	return nil
}

// tensors lists the tensor infos of a llama-like model, in llama.cpp's names and order.
func (s Spec) tensors() []tensor {
	w := types[s.FileType]
	f32 := types["F32"]
	e, ff, v := int64(s.EmbeddingLength), int64(s.FeedForwardLength), int64(s.VocabSize)
	kv := e / int64(s.HeadCount) * int64(s.HeadCountKV)
	ts := []tensor{{"token_embd.weight", []int64{e, v}, w}}
	for i := range s.BlockCount {
		p := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			tensor{p + "attn_norm.weight", []int64{e}, f32},
			tensor{p + "attn_q.weight", []int64{e, e}, w},
			tensor{p + "attn_k.weight", []int64{e, kv}, w},
			tensor{p + "attn_v.weight", []int64{e, kv}, w},
			tensor{p + "attn_output.weight", []int64{e, e}, w},
			tensor{p + "ffn_norm.weight", []int64{e}, f32},
			tensor{p + "ffn_gate.weight", []int64{e, ff}, w},
			tensor{p + "ffn_up.weight", []int64{e, ff}, w},
			tensor{p + "ffn_down.weight", []int64{ff, e}, w},
		)
	}
	return append(ts,
		tensor{"output_norm.weight", []int64{e}, f32},
		tensor{"output.weight", []int64{e, v}, w},
	)
}

// TensorBytes is the size of the tensor data the spec's shapes need (before any WeightBytes padding).
func (s Spec) TensorBytes() int64 {
	s = s.withDefaults()
	if s.Validate() != nil {
		return 0
	}
	var off int64
	for _, t := range s.tensors() {
		off = alignUp(off, alignment) + t.bytes()
	}
	return off
}

// Write writes the model described by spec to path, atomically (a temporary file in the same
// folder, synced, then renamed). The tensor data region is a hole: the file's size is that of
// a real model, its disk usage only the header's.
func Write(path string, spec Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	s := spec.withDefaults()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	size, err := writeTo(tmp, s)
	if err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err := tmp.Truncate(size); err != nil {
		return fmt.Errorf("gguf: extend %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("gguf: sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("gguf: close %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	tmp = nil
	return nil
}

// writeTo writes the header and returns the size the whole file must have.
func writeTo(f *os.File, s Spec) (int64, error) {
	bw := bufio.NewWriterSize(f, 1<<20)
	w := &writer{w: bw}
	ts := s.tensors()
	arch := s.Arch
	kvs := []func(){
		func() { w.kvString("general.architecture", arch) },
		func() { w.kvString("general.name", s.Name) },
		func() { w.kvU32("general.file_type", types[s.FileType].fileType) },
		func() { w.kvU32("general.alignment", alignment) },
		func() { w.kvU32(arch+".block_count", uint32(s.BlockCount)) },
		func() { w.kvU32(arch+".context_length", uint32(s.ContextLength)) },
		func() { w.kvU32(arch+".embedding_length", uint32(s.EmbeddingLength)) },
		func() { w.kvU32(arch+".feed_forward_length", uint32(s.FeedForwardLength)) },
		func() { w.kvU32(arch+".attention.head_count", uint32(s.HeadCount)) },
		func() { w.kvU32(arch+".attention.head_count_kv", uint32(s.HeadCountKV)) },
		func() { w.kvU32(arch+".rope.dimension_count", uint32(s.EmbeddingLength/s.HeadCount)) },
		func() { w.kvF32(arch+".rope.freq_base", 10000) },
		func() { w.kvF32(arch+".attention.layer_norm_rms_epsilon", 1e-5) },
		func() { w.kvU32(arch+".vocab_size", uint32(s.VocabSize)) },
		func() { w.kvString("tokenizer.ggml.model", "llama") },
		func() { w.kvTokens("tokenizer.ggml.tokens", s.VocabSize) },
		func() { w.kvTokenTypes("tokenizer.ggml.token_type", s.VocabSize) },
		func() { w.kvU32("tokenizer.ggml.bos_token_id", 1) },
		func() { w.kvU32("tokenizer.ggml.eos_token_id", 2) },
	}

	w.raw([]byte("GGUF"))
	w.u32(3) // version
	w.u64(uint64(len(ts)))
	w.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		kv()
	}
	var off int64
	for _, t := range ts {
		off = alignUp(off, alignment)
		w.str(t.name)
		w.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			w.u64(uint64(d))
		}
		w.u32(t.typ.id)
		w.u64(uint64(off))
		off += t.bytes()
	}
	if w.err != nil {
		return 0, w.err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	header, err := f.Seek(0, 1)
	if err != nil {
		return 0, err
	}
	data := alignUp(header, alignment)
	return data + max(off, s.WeightBytes), nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// writer writes GGUF's little-endian encoding, keeping the first error.
type writer struct {
	w   *bufio.Writer
	err error
	buf [8]byte
}

// GGUF metadata value types.
const (
	typeUint32  = 4
	typeInt32   = 5
	typeFloat32 = 6
	typeString  = 8
	typeArray   = 9
)

func (w *writer) raw(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}
func (w *writer) u32(v uint32) { binary.LittleEndian.PutUint32(w.buf[:4], v); w.raw(w.buf[:4]) }
func (w *writer) u64(v uint64) { binary.LittleEndian.PutUint64(w.buf[:8], v); w.raw(w.buf[:8]) }
func (w *writer) str(s string) { w.u64(uint64(len(s))); w.raw([]byte(s)) }

func (w *writer) kvString(k, v string) { w.str(k); w.u32(typeString); w.str(v) }
func (w *writer) kvU32(k string, v uint32) {
	w.str(k)
	w.u32(typeUint32)
	w.u32(v)
}
func (w *writer) kvF32(k string, v float32) {
	w.str(k)
	w.u32(typeFloat32)
	w.u32(math.Float32bits(v))
}

// kvTokens writes a vocabulary of n distinct placeholder tokens: the size of a real tokenizer
// block, which a reader must skip over to reach the tensor infos.
func (w *writer) kvTokens(k string, n int) {
	w.str(k)
	w.u32(typeArray)
	w.u32(typeString)
	w.u64(uint64(n))
	special := []string{"<unk>", "<s>", "</s>"}
	tok := make([]byte, 0, 32)
	for i := range n {
		tok = tok[:0]
		if i < len(special) {
			tok = append(tok, special[i]...)
		} else {
			tok = strconv.AppendInt(append(tok, "tok"...), int64(i), 10)
		}
		w.u64(uint64(len(tok)))
		w.raw(tok)
	}
}

func (w *writer) kvTokenTypes(k string, n int) {
	w.str(k)
	w.u32(typeArray)
	w.u32(typeInt32)
	w.u64(uint64(n))
	for i := range n {
		t := uint32(1) // normal
		if i < 3 {
			t = 3 // control
		}
		w.u32(t)
	}
}

// Presets are llama-like specs of common sizes for the demo and tests, smallest first.
func Presets() []Spec {
	return []Spec{
		// A few megabytes: for tests that want a real header and a quick write.
		{Name: "sim-tiny", BlockCount: 4, EmbeddingLength: 256, HeadCount: 4, HeadCountKV: 2,
			ContextLength: 2048, VocabSize: 4096, FeedForwardLength: 704, FileType: "Q8_0"},
		// Shaped like Qwen2.5-0.5B (with an untied output matrix): ~0.6 B parameters, Q8_0 ≈ 0.6 GiB.
		{Name: "sim-0.5b", BlockCount: 24, EmbeddingLength: 896, HeadCount: 14, HeadCountKV: 2,
			ContextLength: 32768, VocabSize: 151936, FeedForwardLength: 4864, FileType: "Q8_0"},
		// Shaped like Llama-3.2-1B: ~1.2 B parameters, Q4_0 ≈ 0.7 GiB.
		{Name: "sim-1b", BlockCount: 16, EmbeddingLength: 2048, HeadCount: 32, HeadCountKV: 8,
			ContextLength: 131072, VocabSize: 128256, FeedForwardLength: 8192, FileType: "Q4_0"},
		// Shaped like Llama-3.2-3B: ~3.2 B parameters, Q4_0 ≈ 1.9 GiB.
		{Name: "sim-3b", BlockCount: 28, EmbeddingLength: 3072, HeadCount: 24, HeadCountKV: 8,
			ContextLength: 131072, VocabSize: 128256, FeedForwardLength: 8192, FileType: "Q4_0"},
	}
}

// Preset returns the preset named name ("sim-tiny", "sim-0.5b", "sim-1b", "sim-3b").
func Preset(name string) (Spec, bool) {
	for _, s := range Presets() {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}
