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
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/engines/download"
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
	// Guard is what every request for a source must pass — probes, header reads, HEADs,
	// manifests and their redirects all go through one client built from it
	// (download.NewClient), the same policy the download then meets. The zero value refuses
	// loopback, private and link-local addresses: a source is user input, and sizing it is the
	// first request the agent makes for it. Guard.HTTP nil = a 30 s timeout.
	Guard download.Options
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

	once     sync.Once
	guarded  *http.Client
	guardErr error
}

// Estimate sizes src for a context of contextSize tokens (0 or less = api.DefaultContext),
// run as the engine runs it by default.
func (s *Sizer) Estimate(ctx context.Context, src source.Source, contextSize int) (api.SizeEstimate, error) {
	return s.EstimateRun(ctx, src, contextSize, Run{})
}

// EstimateRun sizes src for run.Slots contexts of contextSize tokens each (0 or less =
// api.DefaultContext), run with the engine arguments run describes.
func (s *Sizer) EstimateRun(ctx context.Context, src source.Source, contextSize int, run Run) (api.SizeEstimate, error) {
	if contextSize <= 0 {
		contextSize = api.DefaultContext
	}
	var est api.SizeEstimate
	err := run.check()
	switch {
	case err != nil:
	case src.Kind == source.KindFile:
		est, err = s.localGGUF(ctx, src.Path, contextSize, run)
	case src.Kind == source.KindHTTPS, src.Kind == source.KindHF:
		var fromPeer bool
		if run.SHA256 != "" {
			est, fromPeer = s.peerGGUF(ctx, run.SHA256, contextSize, run)
		}
		if !fromPeer {
			est, err = s.remoteGGUF(ctx, src.DownloadURL(s.HFBase), contextSize, run)
		}
	case src.Kind == source.KindHailo:
		est, err = s.hailo(ctx, src)
	case src.Kind == source.KindOllama:
		est, err = s.ollama(ctx, src, contextSize*run.slots())
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

// do sends a request for a source through the guarded client. A refusal by the guard is
// InvalidSource: the source names a place this agent does not fetch from.
func (s *Sizer) do(req *http.Request) (*http.Response, error) {
	if resp, ok, err := viaPeer(req); ok {
		return resp, err
	}
	s.once.Do(func() {
		g := s.Guard
		if g.HTTP == nil {
			g.HTTP = &http.Client{Timeout: 30 * time.Second}
		}
		s.guarded, s.guardErr = download.NewClient(g)
	})
	if s.guardErr != nil {
		return nil, failed("sizing: %v", s.guardErr)
	}
	resp, err := s.guarded.Do(req)
	if err == nil {
		return resp, nil
	}
	if cerr := req.Context().Err(); cerr != nil {
		return nil, failed("sizing %s: %v", req.URL.Redacted(), cerr)
	}
	// The asker gets the agent's words only; the operator's log keeps what happened.
	s.log().Info("sizing request failed", "method", req.Method, "url", req.URL.Redacted(), "err", err)
	err = download.Redact(err)
	if errors.Is(err, download.ErrRefused) {
		return nil, api.Errorf(api.CodeInvalidSource, "%v", err)
	}
	return nil, failed("cannot size: %s %s: %v", req.Method, req.URL.Redacted(), err)
}

// daemonClient talks to the local Ollama daemon the operator configured: not a source, and on
// loopback by design, so it does not go through the guard.
var daemonClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}

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
			why, api.FormatBytes(fileBytes), api.FormatBytes(weights), api.FormatBytes(Overhead)),
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

// failed is a MemoryCheckFailed error.
func failed(format string, args ...any) error {
	return api.Errorf(api.CodeMemoryCheckFailed, format, args...)
}

// httpStatusError describes an unexpected answer by its status code only: the body (and the
// status text) are the remote's words, and a refusal must not carry them back to whoever asked
// — that would make sizing a way to read pages the asker cannot reach.
func httpStatusError(method, url string, resp *http.Response) string {
	return fmt.Sprintf("%s %s: HTTP %d", method, url, resp.StatusCode)
}
