package sizing

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strings"

	parser "github.com/gpustack/gguf-parser-go"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/engines/download"
)

// Media types in an Ollama registry manifest.
const (
	ollamaManifestType  = "application/vnd.docker.distribution.manifest.v2+json"
	ollamaModelLayer    = "application/vnd.ollama.image.model"
	ollamaProjectorType = "application/vnd.ollama.image.projector"
	maxOllamaDocument   = 4 << 20 // /api/show carries the whole Modelfile and template
)

// ollama sizes an ollama:// model: from the local daemon when it already has the model
// (/api/show for the architecture, /api/tags for the size), else from the registry manifest.
func (s *Sizer) ollama(ctx context.Context, src source.Source, contextSize int) (api.SizeEstimate, error) {
	if s.OllamaDaemon != "" {
		est, ok, err := s.ollamaShow(ctx, src, contextSize)
		if err == nil && ok {
			return est, nil
		}
		if err != nil {
			// The daemon is down or odd: the registry still knows the size.
			s.log().Warn("ollama daemon could not size the model; asking the registry", "model", src.Ref(), "err", err)
		}
	}
	if est, ok := s.ollamaPeer(ctx, src, contextSize); ok {
		return est, nil
	}
	return s.ollamaRegistry(ctx, src, contextSize)
}

// ollamaPeer sizes a model a peer's daemon holds from that peer's manifest, and the model blob's
// header from a peer holding the blob, so a host with no route to the registry sizes it as it
// would from there (and as the pull through the agent's mirror will get it). false when no peer
// answered: the registry is asked then. Neither is verified here (the pull checks every blob).
func (s *Sizer) ollamaPeer(ctx context.Context, src source.Source, contextSize int) (api.SizeEstimate, bool) {
	for _, p := range s.Guard.Peers.Manifests(src.Ref()) {
		var m ollamaManifest
		if err := getJSON(context.WithValue(ctx, peerKey{}, p), s.do, p.URL, ollamaManifestType, &m); err != nil {
			s.log().Info("a peer could not give an Ollama manifest to size from; trying the next", "peer", p.Name, "model", src.Ref(), "err", err)
			continue
		}
		est, err := s.ollamaManifestEstimate(ctx, src, contextSize, m, "peer "+p.Name, func(digest string) *parser.GGUFFile {
			for _, h := range s.Guard.Peers.Holders(strings.TrimPrefix(digest, "sha256:")) {
				if gf, _, _, err := s.remoteHeader(context.WithValue(ctx, peerKey{}, h), h.URL); err == nil && gf != nil {
					return gf
				}
			}
			return nil
		})
		if err != nil {
			s.log().Info("a peer's Ollama manifest could not be sized; trying the next", "peer", p.Name, "model", src.Ref(), "err", err)
			continue
		}
		return est, true
	}
	return api.SizeEstimate{}, false
}

// ollamaModelInfo is the part of /api/show's answer the sizer reads.
type ollamaModelInfo struct {
	ModelInfo map[string]any `json:"model_info"`
	Modelfile string         `json:"modelfile"` // its FROM line names the daemon's model blob
	Details   struct {
		ParameterSize     string `json:"parameter_size"`
		QuantizationLevel string `json:"quantization_level"`
	} `json:"details"`
}

// ollamaShow asks the local daemon; ok is false when the daemon does not have the model.
func (s *Sizer) ollamaShow(ctx context.Context, src source.Source, contextSize int) (api.SizeEstimate, bool, error) {
	base := strings.TrimRight(s.OllamaDaemon, "/")
	var show ollamaModelInfo
	status, err := s.postJSON(ctx, base+"/api/show", map[string]string{"model": src.Ref()}, &show)
	if err != nil {
		return api.SizeEstimate{}, false, err
	}
	if status == http.StatusNotFound {
		return api.SizeEstimate{}, false, nil
	}
	var tags struct {
		Models []struct {
			Name  string `json:"name"`
			Model string `json:"model"`
			Size  int64  `json:"size"`
		} `json:"models"`
	}
	if err := getJSON(ctx, daemonClient.Do, base+"/api/tags", "", &tags); err != nil {
		return api.SizeEstimate{}, false, err
	}
	var size int64
	for _, m := range tags.Models {
		if sameOllamaModel(m.Name, src) || sameOllamaModel(m.Model, src) {
			size = m.Size
			break
		}
	}
	if size <= 0 {
		return api.SizeEstimate{}, false, fmt.Errorf("the daemon shows %s but lists no size for it in /api/tags", src.Ref())
	}
	est := api.SizeEstimate{
		TrainContext: ollamaTrainContext(show.ModelInfo),
		Weights:      size,
		Overhead:     Overhead,
		Method:       api.SizeShow,
		Device:       api.DeviceHost,
	}
	// The daemon's own blob holds the GGUF header the registry path reads by range requests:
	// read here, the model sizes the same before its pull and after.
	blob := ollamaBlob(show.Modelfile)
	p, err := blobParts(ctx, blob, contextSize)
	if err == nil {
		est.KV, est.Compute, est.TrainContext = p.kv, p.compute, cmp.Or(p.trainContext, est.TrainContext)
		est.Bytes = size + p.kv + p.compute + Overhead
		est.Detail = fmt.Sprintf("weights %s + %s + compute %s + overhead %s; weights from the local Ollama daemon (/api/tags), the rest from its model blob's GGUF header (%s)",
			api.FormatBytes(size), p.kvWords, api.FormatBytes(p.compute), api.FormatBytes(Overhead), blob)
		return est, true, nil
	}
	s.log().Info("the Ollama daemon's model blob not read; compute buffers not counted", "model", src.Ref(), "err", err)
	kv, kvWords := ollamaKV(show.ModelInfo, contextSize)
	est.KV, est.Bytes = kv, size+kv+Overhead
	est.Detail = fmt.Sprintf("weights %s + %s + overhead %s; from the local Ollama daemon (/api/show, /api/tags); compute unknown: %v",
		api.FormatBytes(size), kvWords, api.FormatBytes(Overhead), err)
	return est, true, nil
}

// ollamaBlob is the model blob a daemon's Modelfile names ("FROM <models>/blobs/sha256-<hex>",
// as /api/show writes it), or "" when its first FROM line names no such file (a model the
// Modelfile builds FROM another by name).
func ollamaBlob(modelfile string) string {
	for line := range strings.Lines(modelfile) {
		path, ok := strings.CutPrefix(strings.TrimSpace(line), "FROM ")
		if !ok {
			continue
		}
		path = strings.TrimSpace(path)
		hex, ok := strings.CutPrefix(filepath.Base(path), "sha256-")
		if filepath.IsAbs(path) && ok && isSHA256Hex(hex) && filepath.Base(filepath.Dir(path)) == "blobs" {
			return path
		}
		return ""
	}
	return ""
}

// blobParts reads the KV cache and compute buffers from the GGUF header of the daemon's blob
// at path, on this host (the agent and the daemon share it).
func blobParts(ctx context.Context, path string, contextSize int) (parts, error) {
	if path == "" {
		return parts{}, errors.New("the daemon's Modelfile names no model blob")
	}
	gf, _, perr, err := openGGUF(ctx, path)
	var ae *api.Error
	switch {
	case errors.As(err, &ae): // openGGUF's every error
		return parts{}, errors.New(ae.Message) // said in the estimate's words, without a code
	case gf == nil:
		return parts{}, fmt.Errorf("the GGUF header of %s could not be parsed (%v)", path, perr)
	}
	return headerParts(gf, contextSize, Run{})
}

// sameOllamaModel compares a daemon's model name with the source, ignoring the default
// registry host and namespace ("registry.ollama.ai/library/qwen2:1.5b" is "qwen2:1.5b").
func sameOllamaModel(name string, src source.Source) bool {
	name = strings.TrimPrefix(name, "registry.ollama.ai/")
	name = strings.TrimPrefix(name, "library/")
	if !strings.Contains(name, ":") {
		name += ":latest"
	}
	return strings.EqualFold(name, src.Ref())
}

// ollamaKV computes the KV cache from /api/show's model_info (<arch>.block_count,
// .embedding_length, .attention.head_count, .attention.head_count_kv), and says how in words.
func ollamaKV(info map[string]any, contextSize int) (int64, string) {
	arch, _ := info["general.architecture"].(string)
	num := func(key string) int64 {
		if f, ok := info[arch+"."+key].(float64); ok && f > 0 && f < 1<<40 {
			return int64(f)
		}
		return 0
	}
	layers, embd := num("block_count"), num("embedding_length")
	heads, kvHeads := num("attention.head_count"), num("attention.head_count_kv")
	if arch == "" || layers == 0 || embd == 0 {
		return 0, "KV unknown (no architecture in model_info; covered by the overhead)"
	}
	kv := kvBytes(layers, int64(contextSize), embd, heads, kvHeads)
	return kv, fmt.Sprintf("KV %s (%d layers × %d ctx, f16)", api.FormatBytes(kv), layers, contextSize)
}

// ollamaTrainContext is model_info's <arch>.context_length, the context the model was trained
// for; 0 when absent or absurd.
func ollamaTrainContext(info map[string]any) int {
	arch, _ := info["general.architecture"].(string)
	if f, ok := info[arch+".context_length"].(float64); ok && f > 0 && f <= math.MaxInt32 {
		return int(f)
	}
	return 0
}

// ollamaManifest is a registry manifest (Docker distribution v2).
type ollamaManifest struct {
	Layers []struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	} `json:"layers"`
}

// ollamaRegistry reads the model's manifest from the registry: the weights are the model
// layer (and a vision projector, which is loaded beside it). The manifest does not say the
// architecture, so the sizer then reads the model blob's GGUF header by range requests
// (<registry>/v2/<repo>/blobs/<digest>, as gguf-parser-go does for Ollama models) for the KV
// cache and compute buffers. When that header cannot be read the estimate stays the weights
// plus the overhead, which covers the KV cache of a small model at the default context, and
// the Detail says the KV is unknown.
func (s *Sizer) ollamaRegistry(ctx context.Context, src source.Source, contextSize int) (api.SizeEstimate, error) {
	reg := orDefault(s.OllamaRegistry, DefaultOllamaRegistry)
	repo := src.Name
	if !strings.Contains(repo, "/") {
		repo = "library/" + repo
	}
	url := reg + "/v2/" + repo + "/manifests/" + src.Tag
	var m ollamaManifest
	if err := getJSON(ctx, s.do, url, ollamaManifestType, &m); err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
			// The cause in the user's terms; the URL is in the agent's log, not the advice.
			s.log().Info("the Ollama registry has no such model", "model", src.Ref(), "err", err)
			return api.SizeEstimate{}, api.Errorf(api.CodeNotFound, "the Ollama registry has no model %s: check its name and tag", src.Ref())
		}
		return api.SizeEstimate{}, err
	}
	return s.ollamaManifestEstimate(ctx, src, contextSize, m, "the registry manifest "+url, func(digest string) *parser.GGUFFile {
		blob := reg + "/v2/" + repo + "/blobs/" + digest
		gf, _, why, err := s.remoteHeader(ctx, blob)
		if err != nil || gf == nil {
			s.log().Info("ollama model blob header not read; KV unknown", "blob", blob, "err", err, "why", why)
			return nil
		}
		return gf
	})
}

// ollamaManifestEstimate sizes a model from its manifest (from names where it came from), and
// the model blob's GGUF header that header reads (nil: not read, the KV unknown).
func (s *Sizer) ollamaManifestEstimate(ctx context.Context, src source.Source, contextSize int, m ollamaManifest, from string,
	header func(digest string) *parser.GGUFFile) (api.SizeEstimate, error) {
	var weights int64
	var modelDigest string
	var hasModel bool
	for _, l := range m.Layers {
		switch l.MediaType {
		case ollamaModelLayer:
			if !hasModel {
				hasModel = true
				modelDigest = l.Digest
			}
			fallthrough
		case ollamaProjectorType:
			if l.Size < 0 {
				return api.SizeEstimate{}, failed("cannot size %s: the registry manifest has a layer of negative size", src)
			}
			weights += l.Size
		}
	}
	if !hasModel || weights == 0 {
		return api.SizeEstimate{}, failed("cannot size %s: %s has no %s layer", src, from, ollamaModelLayer)
	}
	est := api.SizeEstimate{
		Bytes:    weights + Overhead,
		Weights:  weights,
		Overhead: Overhead,
		Method:   api.SizeRegistry,
		Device:   api.DeviceHost,
		Detail: fmt.Sprintf("weights %s + overhead %s (KV for %d ctx unknown before the pull; covered by the overhead); from %s",
			api.FormatBytes(weights), api.FormatBytes(Overhead), contextSize, from),
	}
	if !validDigest(modelDigest) {
		return est, nil
	}
	gf := header(modelDigest)
	if gf == nil {
		return est, nil
	}
	p, err := headerParts(gf, contextSize, Run{})
	if err != nil {
		s.log().Info("ollama model blob header not estimated; KV unknown", "digest", modelDigest, "err", err)
		return est, nil
	}
	est.KV, est.Compute, est.TrainContext = p.kv, p.compute, p.trainContext
	est.Bytes = weights + p.kv + p.compute + Overhead
	est.Detail = fmt.Sprintf("weights %s + %s + compute %s + overhead %s; weights from %s, the rest from the model blob's GGUF header (range requests)",
		api.FormatBytes(weights), p.kvWords, api.FormatBytes(p.compute), api.FormatBytes(Overhead), from)
	return est, nil
}

// validDigest accepts "sha256:<64 hex>", the only digest form a blob URL is built from.
func validDigest(d string) bool {
	hex, ok := strings.CutPrefix(d, "sha256:")
	return ok && isSHA256Hex(hex)
}

// getJSON GETs url into v with do (the guarded client for a registry, the daemon's for the
// daemon). A 404 is NotFound; anything else unexpected is MemoryCheckFailed.
func getJSON(ctx context.Context, do func(*http.Request) (*http.Response, error), url, accept string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return failed("sizing: %v", err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := do(req)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return ae
		}
		return failed("cannot size: GET %s: %v", url, download.Redact(err))
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return api.Errorf(api.CodeNotFound, "%s", httpStatusError("GET", url, resp))
	default:
		return failed("cannot size: %s", httpStatusError("GET", url, resp))
	}
	return decodeJSON(resp.Body, url, v)
}

// postJSON POSTs body to url and decodes a 200 answer into v; it returns the status.
func (s *Sizer) postJSON(ctx context.Context, url string, body, v any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := daemonClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.StatusCode, decodeJSON(resp.Body, url, v)
	case http.StatusNotFound:
		return resp.StatusCode, nil
	}
	return resp.StatusCode, fmt.Errorf("%s", httpStatusError("POST", url, resp))
}

func decodeJSON(r io.Reader, url string, v any) error {
	data, err := io.ReadAll(io.LimitReader(r, maxOllamaDocument+1))
	if err != nil {
		return failed("cannot size: reading %s: %v", url, err)
	}
	if len(data) > maxOllamaDocument {
		return failed("cannot size: %s answered over %s", url, api.FormatBytes(maxOllamaDocument))
	}
	if json.Unmarshal(data, v) != nil {
		return failed("cannot size: %s answered something that is not the expected JSON", url)
	}
	return nil
}
