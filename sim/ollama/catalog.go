package ollama

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Media types of an Ollama manifest's parts.
const (
	MediaTypeManifest = "application/vnd.docker.distribution.manifest.v2+json"
	MediaTypeConfig   = "application/vnd.docker.container.image.v1+json"
	MediaTypeModel    = "application/vnd.ollama.image.model"
	MediaTypeTemplate = "application/vnd.ollama.image.template"
	MediaTypeLicense  = "application/vnd.ollama.image.license"
	MediaTypeParams   = "application/vnd.ollama.image.params"
	MediaTypeSystem   = "application/vnd.ollama.image.system"
)

// modelSpec is one catalogue model: its library figures and the parts of its manifest.
type modelSpec struct {
	name      string // canonical "name:tag"
	arch      string // GGUF general.architecture, also the Ollama family
	paramSize string // "1.2B"
	params    int64  // parameter count
	quant     string // "Q8_0"
	fileType  uint32 // GGUF general.file_type for quant
	weights   int64  // bytes of the model layer
	ctxLen    int
	blocks    int
	embed     int
	ffn       int
	heads     int
	headsKV   int
	headDim   int
	vocab     int
	ropeBase  float64
	template  string
	system    string
	license   string
	paramsDoc string // the params layer (JSON), "" when the model has none

	// Derived by build.
	layers   []layer
	config   layer
	manifest []byte
	digest   string // sha256 hex of manifest, as /api/tags reports it
	ggufHead []byte // the model blob's first bytes: a GGUF header with the model's metadata
}

// layer is a blob of a manifest. Small layers carry their content (and its real digest); the
// model layer has none, its bytes are generated on demand (see blob).
type layer struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	content   []byte
}

var catalogue = []*modelSpec{
	{
		name: "llama3.2:1b", arch: "llama", paramSize: "1.2B", params: 1235814432, quant: "Q8_0", fileType: 7,
		weights: 1321082688, ctxLen: 131072, blocks: 16, embed: 2048, ffn: 8192, heads: 32, headsKV: 8,
		headDim: 64, vocab: 128256, ropeBase: 500000,
		template: llamaTemplate, license: llamaLicense, paramsDoc: llamaParams,
	},
	{
		name: "llama3.2:3b", arch: "llama", paramSize: "3.2B", params: 3212749888, quant: "Q4_K_M", fileType: 15,
		weights: 2019377376, ctxLen: 131072, blocks: 28, embed: 3072, ffn: 8192, heads: 24, headsKV: 8,
		headDim: 128, vocab: 128256, ropeBase: 500000,
		template: llamaTemplate, license: llamaLicense, paramsDoc: llamaParams,
	},
	{
		name: "qwen2.5:0.5b", arch: "qwen2", paramSize: "494.03M", params: 494032768, quant: "Q4_K_M", fileType: 15,
		weights: 397807936, ctxLen: 32768, blocks: 24, embed: 896, ffn: 4864, heads: 14, headsKV: 2,
		headDim: 64, vocab: 151936, ropeBase: 1000000,
		template: qwenTemplate, system: "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
		license: "Apache License\nVersion 2.0, January 2004\nhttp://www.apache.org/licenses/\n",
	},
	{
		name: "gemma3:1b", arch: "gemma3", paramSize: "999.89M", params: 999885952, quant: "Q4_K_M", fileType: 15,
		weights: 815310528, ctxLen: 32768, blocks: 26, embed: 1152, ffn: 6912, heads: 4, headsKV: 1,
		headDim: 256, vocab: 262144, ropeBase: 1000000,
		template: gemmaTemplate, license: "Gemma Terms of Use\n\nLast modified: March 24, 2025\n",
		paramsDoc: `{"stop":["<end_of_turn>"],"temperature":1,"top_k":64,"top_p":0.95}`,
	},
}

// aliases are other names of catalogue models, as in the library ("llama3.2" is the 3b).
var aliases = map[string]string{"llama3.2:latest": "llama3.2:3b"}

const (
	llamaTemplate = `<|start_header_id|>system<|end_header_id|>

Cutting Knowledge Date: December 2023

{{ if .System }}{{ .System }}{{ end }}<|eot_id|>
{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>

{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>

`
	llamaLicense = "LLAMA 3.2 COMMUNITY LICENSE AGREEMENT\nLlama 3.2 Version Release Date: September 25, 2024\n"
	llamaParams  = `{"stop":["<|start_header_id|>","<|end_header_id|>","<|eot_id|>"]}`
	qwenTemplate = `{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
`
	gemmaTemplate = `{{- range .Messages }}<start_of_turn>{{ if eq .Role "assistant" }}model{{ else }}{{ .Role }}{{ end }}
{{ .Content }}<end_of_turn>
{{ end }}<start_of_turn>model
`
)

// byName indexes the catalogue by canonical name and alias.
var byName = func() map[string]*modelSpec {
	m := map[string]*modelSpec{}
	for _, spec := range catalogue {
		spec.build()
		m[spec.name] = spec
	}
	for alias, name := range aliases {
		m[alias] = m[name]
	}
	return m
}()

// CatalogueNames lists every model name the simulator knows, sorted.
func CatalogueNames() []string {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// canonical normalizes a model name as Ollama does: case-insensitive, the default registry and
// "library/" namespace implied, ":latest" when no tag is given.
func canonical(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	n = strings.TrimPrefix(n, "registry.ollama.ai/")
	n = strings.TrimPrefix(n, "library/")
	if n != "" && !strings.Contains(n, ":") {
		n += ":latest"
	}
	return n
}

// lookup finds a catalogue model by any of its names, or nil.
func lookup(name string) *modelSpec { return byName[canonical(name)] }

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func smallLayer(mediaType, content string) layer {
	return layer{MediaType: mediaType, Digest: "sha256:" + sha([]byte(content)), Size: int64(len(content)), content: []byte(content)}
}

// build derives the manifest and its layers. The model layer's digest is not the sha256 of its
// (generated) bytes: hashing gigabytes at start-up would defeat the point of simulating them.
func (m *modelSpec) build() {
	m.ggufHead = ggufHeader(m)
	m.layers = []layer{{
		MediaType: MediaTypeModel,
		Digest:    "sha256:" + sha([]byte("llmkube-sim model blob "+m.name)),
		Size:      m.weights,
	}}
	m.layers = append(m.layers, smallLayer(MediaTypeTemplate, m.template))
	if m.system != "" {
		m.layers = append(m.layers, smallLayer(MediaTypeSystem, m.system))
	}
	m.layers = append(m.layers, smallLayer(MediaTypeLicense, m.license))
	if m.paramsDoc != "" {
		m.layers = append(m.layers, smallLayer(MediaTypeParams, m.paramsDoc))
	}
	diffIDs := make([]string, len(m.layers))
	for i, l := range m.layers {
		diffIDs[i] = l.Digest
	}
	cfg, _ := json.Marshal(map[string]any{
		"model_format": "gguf", "model_family": m.arch, "model_families": []string{m.arch},
		"model_type": m.paramSize, "file_type": m.quant, "architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	m.config = smallLayer(MediaTypeConfig, string(cfg))
	m.manifest, _ = json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": MediaTypeManifest, "config": m.config, "layers": m.layers,
	})
	m.digest = sha(m.manifest)
}

// totalSize is what /api/tags reports: every layer plus the config.
func (m *modelSpec) totalSize() int64 {
	n := m.config.Size
	for _, l := range m.layers {
		n += l.Size
	}
	return n
}

// blobs are the manifest's parts in the order a pull fetches them: layers, then the config.
func (m *modelSpec) blobs() []layer { return append(append([]layer{}, m.layers...), m.config) }

func (m *modelSpec) details() map[string]any {
	return map[string]any{
		"parent_model": "", "format": "gguf", "family": m.arch, "families": []string{m.arch},
		"parameter_size": m.paramSize, "quantization_level": m.quant,
	}
}

// modelInfo is /api/show's model_info: the GGUF metadata, keyed as in the file.
func (m *modelSpec) modelInfo() map[string]any {
	a := m.arch + "."
	return map[string]any{
		"general.architecture":            m.arch,
		"general.basename":                strings.SplitN(m.name, ":", 2)[0],
		"general.file_type":               m.fileType,
		"general.parameter_count":         m.params,
		"general.quantization_version":    2,
		a + "context_length":              m.ctxLen,
		a + "block_count":                 m.blocks,
		a + "embedding_length":            m.embed,
		a + "feed_forward_length":         m.ffn,
		a + "attention.head_count":        m.heads,
		a + "attention.head_count_kv":     m.headsKV,
		a + "attention.key_length":        m.headDim,
		a + "attention.value_length":      m.headDim,
		a + "rope.freq_base":              m.ropeBase,
		a + "vocab_size":                  m.vocab,
		"tokenizer.ggml.model":            "gpt2",
		"tokenizer.ggml.bos_token_id":     1,
		"tokenizer.ggml.eos_token_id":     2,
		"tokenizer.ggml.tokens":           nil, // arrays are elided unless verbose, as in Ollama
		"tokenizer.ggml.token_type":       nil,
		"tokenizer.ggml.merges":           nil,
		"tokenizer.ggml.add_bos_token":    true,
		"tokenizer.ggml.add_eos_token":    false,
		"tokenizer.ggml.padding_token_id": 0,
	}
}

// memory is what a loaded model holds: weights, an f16 KV cache for numCtx tokens and a compute
// graph. The graph term (128 MiB plus a tenth of the weights) is the simulator's approximation.
func (m *modelSpec) memory(numCtx int) int64 {
	kv := int64(2*2) * int64(m.blocks) * int64(numCtx) * int64(m.headsKV) * int64(m.headDim)
	return m.weights + kv + 128<<20 + m.weights/10
}

// GGUF value types used in the header.
const (
	ggufUint32  = 4
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
)

// ggufHeader writes a GGUF v3 header carrying the model's metadata (no tensor infos), so a
// client that reads the start of the model blob by range sees a real GGUF with the right
// architecture figures.
func ggufHeader(m *modelSpec) []byte {
	type kv struct {
		key string
		typ uint32
		val any
	}
	a := m.arch + "."
	kvs := []kv{
		{"general.architecture", ggufString, m.arch},
		{"general.name", ggufString, m.name},
		{"general.file_type", ggufUint32, m.fileType},
		{"general.quantization_version", ggufUint32, uint32(2)},
		{a + "context_length", ggufUint32, uint32(m.ctxLen)},
		{a + "block_count", ggufUint32, uint32(m.blocks)},
		{a + "embedding_length", ggufUint32, uint32(m.embed)},
		{a + "feed_forward_length", ggufUint32, uint32(m.ffn)},
		{a + "attention.head_count", ggufUint32, uint32(m.heads)},
		{a + "attention.head_count_kv", ggufUint32, uint32(m.headsKV)},
		{a + "attention.key_length", ggufUint32, uint32(m.headDim)},
		{a + "attention.value_length", ggufUint32, uint32(m.headDim)},
		{a + "rope.freq_base", ggufFloat32, float32(m.ropeBase)},
		{a + "vocab_size", ggufUint32, uint32(m.vocab)},
		{"tokenizer.ggml.add_bos_token", ggufBool, true},
	}
	var b []byte
	b = append(b, "GGUF"...)
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, 0) // tensor count
	b = binary.LittleEndian.AppendUint64(b, uint64(len(kvs)))
	str := func(s string) {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, e := range kvs {
		str(e.key)
		b = binary.LittleEndian.AppendUint32(b, e.typ)
		switch v := e.val.(type) {
		case string:
			str(v)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case float32:
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		case bool:
			if v {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		default:
			panic(fmt.Sprintf("gguf header: unsupported value %T", v))
		}
	}
	for len(b)%32 != 0 { // general.alignment defaults to 32
		b = append(b, 0)
	}
	return b
}

// blobPath is where the daemon keeps m's model blob, as Ollama names it: blobs/sha256-<hex>
// under its models folder.
func (s *Server) blobPath(m *modelSpec) string {
	dir := cmp.Or(s.cfg.ModelsDir, "/root/.ollama/models")
	return filepath.Join(dir, "blobs", strings.Replace(m.layers[0].Digest, ":", "-", 1))
}

// writeBlob keeps m's model blob in cfg.ModelsDir, when set: its GGUF header, then a hole up to
// the layer's size. Written whole before it is renamed into place, as Ollama's are.
func (s *Server) writeBlob(m *modelSpec) error {
	if s.cfg.ModelsDir == "" {
		return nil
	}
	path := s.blobPath(m)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("ollama sim: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "partial-")
	if err != nil {
		return fmt.Errorf("ollama sim: %w", err)
	}
	_, err = f.Write(m.ggufHead)
	if err == nil {
		err = f.Truncate(m.layers[0].Size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("ollama sim: writing the blob of %s: %w", m.name, err)
	}
	return nil
}

// blob serves a layer's bytes: a small layer's content, or for the model layer its GGUF header
// followed by zeros up to the layer's size, generated on demand.
type blob struct {
	head []byte
	size int64
}

func (m *modelSpec) blob(digest string) (io.ReaderAt, int64, bool) {
	for _, l := range m.blobs() {
		if l.Digest != digest {
			continue
		}
		if l.MediaType == MediaTypeModel {
			return blob{head: m.ggufHead, size: l.Size}, l.Size, true
		}
		return blob{head: l.content, size: l.Size}, l.Size, true
	}
	return nil, 0, false
}

func (b blob) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset")
	}
	if off >= b.size {
		return 0, io.EOF
	}
	n := len(p)
	if rest := b.size - off; int64(n) > rest {
		n = int(rest)
	}
	copied := 0
	if off < int64(len(b.head)) {
		copied = copy(p[:n], b.head[off:])
	}
	clear(p[copied:n])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
