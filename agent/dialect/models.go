package dialect

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// The model listings in each dialect: OpenAI's /v1/models, Ollama's /api/tags, /api/ps and
// /api/show, made from the placements serving a name.

// OAModel is a model in OpenAI's /v1/models.
type OAModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// OAModelList is OpenAI's GET /v1/models.
type OAModelList struct {
	Object string    `json:"object"`
	Data   []OAModel `json:"data"`
}

// OAModelOf is the model name in OpenAI's shape, served by placements (at least one): owned_by
// the hosts serving it, created when its oldest placement was.
func OAModelOf(name string, placements []api.Placement) OAModel {
	var hosts []string
	created := placements[0].CreatedAt
	for _, p := range placements {
		if !slices.Contains(hosts, p.Host) {
			hosts = append(hosts, p.Host)
		}
		if p.CreatedAt.Before(created) {
			created = p.CreatedAt
		}
	}
	return OAModel{ID: name, Object: "model", Created: created.Unix(), OwnedBy: strings.Join(hosts, ",")}
}

type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// OllamaTag is a model in Ollama's GET /api/tags.
type OllamaTag struct {
	Name       string        `json:"name"`
	Model      string        `json:"model"`
	ModifiedAt time.Time     `json:"modified_at"`
	Size       int64         `json:"size"`
	Digest     string        `json:"digest"`
	Details    ollamaDetails `json:"details"`
}

// OllamaRunning is a model in Ollama's GET /api/ps.
type OllamaRunning struct {
	Name          string        `json:"name"`
	Model         string        `json:"model"`
	Size          int64         `json:"size"`
	Digest        string        `json:"digest"`
	Details       ollamaDetails `json:"details"`
	ExpiresAt     time.Time     `json:"expires_at"`
	SizeVRAM      int64         `json:"size_vram"`
	ContextLength int           `json:"context_length"`
}

// digestOf stands in for Ollama's manifest digest, which clients show and some slice: a stable
// hash of the placement's source.
func digestOf(p api.Placement) string {
	sum := sha256.Sum256([]byte(p.Source))
	return hex.EncodeToString(sum[:])
}

// detailsOf is what the engine reported of p's model (family, parameter size, quantisation);
// the format follows from the runtime when the engine said nothing.
func detailsOf(p api.Placement) ollamaDetails {
	d := ollamaDetails{Format: "gguf", Families: []string{}}
	if p.Runtime == api.RuntimeHailoOllama {
		d.Format = "hef"
	}
	if md := p.Details; md != nil {
		if md.Format != "" {
			d.Format = md.Format
		}
		d.Family, d.ParameterSize, d.QuantizationLevel = md.Family, md.ParameterSize, md.QuantizationLevel
		if len(md.Families) > 0 {
			d.Families = md.Families
		} else if md.Family != "" {
			d.Families = []string{md.Family}
		}
	}
	return d
}

// diskSize is the size /api/tags shows: the model's files as the engine listed them, else the
// weights' estimate.
func diskSize(p api.Placement) int64 {
	if p.Details != nil && p.Details.Size > 0 {
		return p.Details.Size
	}
	if p.Memory.Weights > 0 {
		return p.Memory.Weights
	}
	return p.Memory.Bytes
}

// NeverExpires is the expiry /api/ps shows: a model stays loaded until it is deleted, or
// sleeps after its idle TTL when it has one. Ollama shows a model kept with
// keep_alive -1 the same way: now plus the longest duration (`ollama ps` prints "Forever").
func NeverExpires() time.Time { return time.Now().Add(math.MaxInt64).UTC().Truncate(time.Second) }

// OllamaShowAnswer is Ollama's POST /api/show.
type OllamaShowAnswer struct {
	Modelfile    string         `json:"modelfile"`
	Parameters   string         `json:"parameters"`
	Template     string         `json:"template"`
	Details      ollamaDetails  `json:"details"`
	ModelInfo    map[string]any `json:"model_info"`
	Capabilities []string       `json:"capabilities"`
	ModifiedAt   time.Time      `json:"modified_at"`
}

// capabilities are what Ollama's /api/show says a model can do through the gateway: tools on
// the runtimes that take them (hailo-ollama does not).
func capabilities(r api.Runtime) []string {
	if r == api.RuntimeHailoOllama {
		return []string{"completion"}
	}
	return []string{"completion", "tools"}
}

// OllamaTagOf is the model name, served by p, in /api/tags.
func OllamaTagOf(name string, p api.Placement) OllamaTag {
	return OllamaTag{Name: name, Model: name, ModifiedAt: p.CreatedAt, Size: diskSize(p), Digest: digestOf(p), Details: detailsOf(p)}
}

// OllamaRunningOf is the model name, served by p, in /api/ps, loaded until expires.
func OllamaRunningOf(name string, p api.Placement, expires time.Time) OllamaRunning {
	m := OllamaRunning{Name: name, Model: name, Size: p.Memory.Bytes, Digest: digestOf(p),
		Details: detailsOf(p), ExpiresAt: expires, ContextLength: p.Context}
	if p.Memory.Device == api.DeviceHailo {
		m.SizeVRAM = p.Memory.Bytes
	}
	return m
}

// OllamaShowOf is /api/show's answer for the model name, served by p: what the gateway knows of
// it.
func OllamaShowOf(name string, p api.Placement) OllamaShowAnswer {
	d := detailsOf(p)
	info := map[string]any{}
	if d.Family != "" {
		info["general.architecture"] = d.Family
		if p.Context > 0 {
			info[d.Family+".context_length"] = p.Context
		}
	}
	return OllamaShowAnswer{Modelfile: "# served by llmkube mesh on " + p.Host + "\nFROM " + name + "\n",
		Details: d, ModelInfo: info, Capabilities: capabilities(p.Runtime), ModifiedAt: p.CreatedAt}
}
