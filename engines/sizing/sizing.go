// Package sizing tells what a model will cost before a byte of it is pulled: a GGUF from its
// header (read locally, or by HTTP range requests), a hailo:// HEF from the library's blob
// size, an ollama:// model from the registry manifest or the local daemon. Every estimate says
// how it was obtained (api.SizeHeader, SizeHead, SizeRange, SizeRegistry, SizeShow,
// SizeFallback) and shows its arithmetic, so the console can show why a model fits or not.
//
// When the size cannot be known the error is an *api.Error with code MemoryCheckFailed (the
// agent decides between failing closed and warning); a source that names nothing is NotFound;
// a file that is not a GGUF model is InvalidSource.
package sizing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/source"
)

// Defaults for the Sizer's endpoints.
const (
	DefaultOllamaRegistry  = "https://registry.ollama.ai"
	DefaultHailoLibraryURL = "https://dev-public.hailo.ai"
	// DefaultHailoVersion is the hailo-ollama release whose blob folder (/v<version>/blob/<file>)
	// holds HEFs named by a newer manifest's hef_filename; only those manifests use it.
	DefaultHailoVersion = "5.4.0"
)

// Overhead is what every engine process costs beyond weights, KV cache and compute buffers
// (runtime, allocator slack, the HTTP server): the ~512 MiB that held up in LLMKube.
const Overhead int64 = 512 << 20

// Sizer estimates models. The zero value works against the public defaults; tests and the
// agent set the endpoints.
type Sizer struct {
	// HTTP makes every request of the sizer's own (probes, HEADs, manifests). nil = a client with
	// a 30 s timeout and at most 5 redirects. (gguf-parser-go reads GGUF headers with its own
	// client: see remoteGGUF.)
	HTTP *http.Client
	// HFBase is where hf:// sources resolve; "" = source.DefaultHFBase.
	HFBase string
	// OllamaRegistry is the registry's base URL; "" = DefaultOllamaRegistry.
	OllamaRegistry string
	// OllamaDaemon is the local Ollama daemon ("http://127.0.0.1:11434"), asked first with
	// /api/show; "" = don't ask.
	OllamaDaemon string
	// HailoManifestsDir is hailo-ollama's manifests folder; "" = hailo-ollama's own lookup
	// (HailoManifestsDir).
	HailoManifestsDir string
	// HailoLibraryURL is Hailo's model library; "" = DefaultHailoLibraryURL.
	HailoLibraryURL string
	// HailoVersion is the installed hailo-ollama's version, for hef_filename manifests;
	// "" = DefaultHailoVersion.
	HailoVersion string
	// Log receives what the sizer did; nil = discard.
	Log *slog.Logger
	// Getenv reads the environment for the default hailo-ollama lookup; nil = os.Getenv.
	Getenv func(string) string
}

// Estimate sizes src for a context of contextSize tokens (0 or less = api.DefaultContext).
func (s *Sizer) Estimate(ctx context.Context, src source.Source, contextSize int) (api.SizeEstimate, error) {
	if contextSize <= 0 {
		contextSize = api.DefaultContext
	}
	var (
		est api.SizeEstimate
		err error
	)
	switch src.Kind {
	case source.KindFile:
		est, err = s.localGGUF(ctx, src.Path, contextSize)
	case source.KindHTTPS, source.KindHF:
		est, err = s.remoteGGUF(ctx, src.DownloadURL(s.HFBase), contextSize)
	case source.KindHailo:
		est, err = s.hailo(ctx, src)
	case source.KindOllama:
		est, err = s.ollama(ctx, src, contextSize)
	default:
		err = api.Errorf(api.CodeInvalidSource, "source %q has no kind; parse it with source.Parse first", src.Raw)
	}
	if err != nil {
		s.log().Info("sizing failed", "source", src.String(), "err", err)
		return api.SizeEstimate{Method: api.SizeUnknown}, err
	}
	s.log().Info("sized", "source", src.String(), "context", contextSize, "bytes", est.Bytes, "method", est.Method, "detail", est.Detail)
	return est, nil
}

func (s *Sizer) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

func (s *Sizer) client() *http.Client {
	if s.HTTP != nil {
		return s.HTTP
	}
	return defaultClient
}

// defaultClient follows at most 5 redirects (a CDN hop or two is normal; a loop is not).
var defaultClient = &http.Client{
	Timeout: 30 * time.Second,
	CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("stopped after 5 redirects")
		}
		return nil
	},
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return strings.TrimRight(v, "/")
}

// fallback is the estimate when only a file's size is known: 1.2 × file + overhead.
func fallback(fileBytes int64, why string) api.SizeEstimate {
	weights := fileBytes + fileBytes/5
	return api.SizeEstimate{
		Bytes:    weights + Overhead,
		Weights:  weights,
		Overhead: Overhead,
		Method:   api.SizeFallback,
		Device:   api.DeviceHost,
		Detail: fmt.Sprintf("%s: fallback 1.2 × file %s = %s + overhead %s (header not read)",
			why, Bytes(fileBytes), Bytes(weights), Bytes(Overhead)),
	}
}

// kvBytes is the KV cache of a llama-style model: K and V (2) × layers × context × the width
// of the KV heads (embedding / heads × KV heads) × 2 bytes (f16, llama.cpp's default cache
// type). Without a KV head count it assumes one per attention head (no grouped-query
// attention), which over-estimates rather than under-.
func kvBytes(layers, context, embedding, heads, kvHeads int64) int64 {
	width := embedding
	if heads > 0 && kvHeads > 0 && kvHeads <= heads {
		width = embedding / heads * kvHeads
	}
	return 2 * layers * context * width * 2
}

// Bytes formats n for people: "1.9 GiB", "224 MiB", "512 B".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	f, i := float64(n), -1
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	suffix := [...]string{"KiB", "MiB", "GiB", "TiB", "PiB"}[i]
	if f >= 100 || f == float64(int64(f)) {
		return fmt.Sprintf("%.0f %s", f, suffix)
	}
	return fmt.Sprintf("%.1f %s", f, suffix)
}

// failed is a MemoryCheckFailed error.
func failed(format string, args ...any) error {
	return api.Errorf(api.CodeMemoryCheckFailed, format, args...)
}

// httpStatusError describes an unexpected answer, with the start of its body.
func httpStatusError(method, url string, resp *http.Response) string {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	msg := fmt.Sprintf("%s %s: HTTP %s", method, url, resp.Status)
	if b := strings.TrimSpace(string(body)); b != "" && isPrintable(b) {
		msg += ": " + b
	}
	return msg
}

func isPrintable(s string) bool {
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r == 0xfffd {
			return false
		}
	}
	return true
}
