package sizing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	parser "github.com/gpustack/gguf-parser-go"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/download"
)

// remoteBufferSize is the first range request of a remote header. A header is a few kilobytes
// to a few megabytes (the tokenizer's vocabulary); 1 MiB reads it in a handful of requests
// while the weights, gigabytes further on, are never touched.
const remoteBufferSize = 1 << 20

// ggufMagic opens every GGUF file.
const ggufMagic = "GGUF"

// readOptions keep gguf-parser-go from holding the tokenizer's strings in memory
// (SkipLargeMetadata: the estimate needs only the vocabulary's length, which it keeps). It
// reads local files only (remote headers are fetched into one first), so none of its cache,
// DNS or buffer options apply.
func readOptions() []parser.GGUFReadOption {
	return []parser.GGUFReadOption{parser.SkipLargeMetadata()}
}

// localGGUF sizes a GGUF file on this host from its header.
func (s *Sizer) localGGUF(ctx context.Context, path string, contextSize int, run Run) (api.SizeEstimate, error) {
	gf, size, perr, err := openGGUF(ctx, path)
	if err != nil {
		return api.SizeEstimate{}, err
	}
	if gf == nil {
		// A GGUF this parser cannot read (a newer version, a damaged header) is still a GGUF:
		// size it by the file, and say so.
		return fallback(size, fmt.Sprintf("GGUF header of %s could not be parsed (%v)", path, perr)), nil
	}
	return fromHeader(gf, contextSize, run, "header read from "+path)
}

// openGGUF parses the header of the GGUF file at path, a regular file on this host. A header
// this parser cannot read gives a nil gf, the parser's error as perr, and the file's size.
func openGGUF(ctx context.Context, path string) (gf *parser.GGUFFile, size int64, perr, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil, api.Errorf(api.CodeNotFound, "model file %s does not exist", path)
	}
	if err != nil {
		return nil, 0, nil, failed("cannot read model file: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, nil, failed("cannot read model file: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, nil, api.Errorf(api.CodeInvalidSource, "%s is not a regular file", path)
	}
	if err := CheckMagic(f, path); err != nil {
		return nil, 0, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, nil, failed("sizing %s: %v", path, err)
	}
	// mmap: the header is a few hundred thousand small reads (one per vocabulary token), ~20×
	// faster from a mapping than by read calls. A file truncated while mapped cannot crash the
	// agent: gguf-parser-go copies out of the mapping with debug.SetPanicOnFault and reports a
	// fault as an error.
	gf, perr = safeParse(func() (*parser.GGUFFile, error) {
		return parser.ParseGGUFFile(path, append(readOptions(), parser.UseMMap())...)
	})
	if perr != nil {
		return nil, fi.Size(), perr, nil
	}
	return gf, fi.Size(), nil, nil
}

// remoteGGUF sizes a GGUF behind an HTTP URL from its header, fetched by range requests.
// The estimate records the file's length (FileBytes): the download stops there, and the agent
// re-sizes the finished file before it counts, so the file that runs is the file that was sized.
func (s *Sizer) remoteGGUF(ctx context.Context, url string, contextSize int, run Run) (api.SizeEstimate, error) {
	gf, total, why, err := s.remoteHeader(ctx, url)
	var est api.SizeEstimate
	switch {
	case err != nil:
		return api.SizeEstimate{}, err
	case gf == nil:
		est = fallback(total, why)
	default:
		if est, err = fromHeader(gf, contextSize, run, "header read by HTTP range requests"); err != nil {
			return api.SizeEstimate{}, err
		}
	}
	est.FileBytes = total
	return est, nil
}

// maxRemoteHeader bounds how much of a remote file is read for its header: the largest
// vocabularies make headers of a few tens of megabytes; a "header" that goes on past this is
// not one.
const maxRemoteHeader = 128 << 20

// remoteHeader probes url and reads its GGUF header by range requests, every one through the
// guarded client. When the header cannot be read but the file's size is known, gf is nil and
// why says what happened, for the fallback.
//
// It first probes with one small range GET (bytes 0-7, the magic and version):
//   - 206: the server honours ranges; the magic is checked, then the header is read (readHeader).
//   - 200: the server ignores ranges and started sending the whole file. The body is closed at
//     once (never downloaded) and the model is sized by Content-Length with the fallback
//     formula, Method SizeFallback, and a Detail that says so.
func (s *Sizer) remoteHeader(ctx context.Context, url string) (gf *parser.GGUFFile, total int64, why string, err error) {
	resp, err := s.rangeGet(ctx, url, 0, len(ggufMagic)+4)
	if err != nil {
		return nil, 0, "", err
	}
	defer resp.Body.Close() // closing unread is the point when the server ignores the range

	total = -1
	switch resp.StatusCode {
	case http.StatusPartialContent:
		total = contentRangeTotal(resp.Header.Get("Content-Range"))
	case http.StatusOK:
		total = resp.ContentLength
	case http.StatusNotFound, http.StatusGone:
		return nil, 0, "", api.Errorf(api.CodeNotFound, "%s", httpStatusError("GET", url, resp))
	default:
		return nil, 0, "", failed("cannot size: %s", httpStatusError("GET", url, resp))
	}
	magic := make([]byte, len(ggufMagic))
	if _, err := io.ReadFull(resp.Body, magic); err != nil || string(magic) != ggufMagic {
		return nil, 0, "", notGGUF(url, err)
	}
	if total <= 0 {
		return nil, 0, "", failed("cannot size %s: the server gives no total size", url)
	}
	if resp.StatusCode == http.StatusOK {
		return nil, total, "server ignores range requests; sized by Content-Length " + api.FormatBytes(total), nil
	}
	resp.Body.Close()

	gf, err = s.readHeader(ctx, url, total)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, "", failed("sizing %s: %v", url, ctx.Err())
		}
		var ae *api.Error
		if errors.As(err, &ae) {
			return nil, 0, "", ae
		}
		return nil, total, fmt.Sprintf("GGUF header could not be read by range requests (%v)", err), nil
	}
	return gf, total, "", nil
}

// rangeGet asks for n bytes of url from byte from.
func (s *Sizer) rangeGet(ctx context.Context, url string, from int64, n int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, failed("sizing %s: %v", url, err)
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", from, from+int64(n)-1))
	// A compressed answer has no byte ranges of the file; ask for the bytes themselves.
	req.Header.Set("Accept-Encoding", "identity")
	return s.do(req)
}

// readHeader reads the GGUF header of a remote file of total bytes into a sparse temporary
// file of the same length, one range request at a time (1 MiB, growing by a quarter of what is
// read once that is larger, so a big header takes tens of requests, not hundreds, and at most
// a quarter more than it needs), and parses it there. gguf-parser-go reads remote files with
// its own HTTP client, which would bypass the guard, so the agent fetches the bytes itself. A
// parse is complete when the header it found ends within the bytes fetched so far (what lies
// beyond them reads as zeros): the parser reads the header front to back.
func (s *Sizer) readHeader(ctx context.Context, url string, total int64) (*parser.GGUFFile, error) {
	f, err := os.CreateTemp("", "llmkube-gguf-header-*")
	if err != nil {
		return nil, failed("sizing %s: %v", url, err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	if err := f.Truncate(total); err != nil {
		return nil, fmt.Errorf("a file of %s cannot be represented here: %v", api.FormatBytes(total), err)
	}
	var have int64
	for {
		want := min(max(remoteBufferSize, have/4), total-have)
		resp, err := s.rangeGet(ctx, url, have, int(want))
		if err != nil {
			return nil, err
		}
		first, size, ok := download.ParseContentRange(resp.Header.Get("Content-Range"))
		if resp.StatusCode != http.StatusPartialContent || !ok || first != have || size != total {
			resp.Body.Close()
			return nil, errors.New("the server stopped answering the range requests consistently (the file changed, or it is not one file)")
		}
		n, err := io.Copy(io.NewOffsetWriter(f, have), io.LimitReader(resp.Body, want))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading bytes %d-%d: %v", have, have+want-1, download.Redact(err))
		}
		if n == 0 {
			return nil, fmt.Errorf("the server sent no bytes from %d", have)
		}
		have += n
		gf, perr := safeParse(func() (*parser.GGUFFile, error) {
			return parser.ParseGGUFFile(f.Name(), append(readOptions(), parser.UseMMap())...)
		})
		if perr == nil && gf.TensorDataStartOffset <= have {
			return gf, nil
		}
		if have >= total || have >= maxRemoteHeader {
			if perr == nil {
				perr = fmt.Errorf("the header does not end within the first %s", api.FormatBytes(have))
			}
			return nil, perr
		}
	}
}

// fromHeader turns a parsed header into the estimate for run.Slots contexts of contextSize
// tokens each.
//
// Which of gguf-parser-go's estimates: EstimateLLaMACppRun with the whole context (every
// slot's), run's cache types and batch sizes, and WithLLaMACppOffloadLayers(0), then the host
// device's (Devices[0]) own parts — weights, KV cache, computation buffers and footprint
// (metadata, tokenizer, output buffer) — with mmap counted as resident. Why:
//   - The agent's budget is host RAM. On the hosts we target (a Raspberry Pi, CPU-only Linux
//     boxes) llama-server runs on the CPU, so the CPU-only figure is the real one. On Apple
//     silicon the GPU shares that same RAM, and the sum barely moves with offload. On a host
//     with a discrete GPU, counting everything against RAM is the conservative side (so -ngl
//     changes nothing here).
//   - The summary's RAM "UMA" figure subtracts mmap'd weights (page cache can be reclaimed),
//     but under load those pages are resident, and a budget that ignores them is how a host
//     gets wired to death (LLMKube #640): weights are counted in full (so --mlock and
//     --no-mmap change nothing here either).
//   - Flash attention: llama-server's default (auto) turns it on wherever the backend has it
//     (CPU, Metal, CUDA, Vulkan). Without it (-fa off) the engine holds every head's
//     attention scores for a micro-batch, which gguf-parser-go does not count on the host:
//     attentionScores adds them.
//
// gguf-parser-go includes no process overhead, so Overhead (512 MiB) is added on top.
func fromHeader(gf *parser.GGUFFile, contextSize int, run Run, how string) (api.SizeEstimate, error) {
	p, err := headerParts(gf, contextSize, run)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return api.SizeEstimate{}, err
		}
		return fallback(int64(gf.Size), fmt.Sprintf("the GGUF header cannot be estimated (%v)", err)), nil
	}
	cache := promptCache(p.kv)
	return api.SizeEstimate{
		Bytes:        p.weights + p.kv + p.compute + cache + Overhead,
		Weights:      p.weights,
		KV:           p.kv,
		Compute:      p.compute,
		Cache:        cache,
		Overhead:     Overhead,
		Method:       api.SizeHeader,
		Device:       api.DeviceHost,
		TrainContext: p.trainContext,
		Layers:       p.layers,
		InputWeights: p.input, OutputWeights: p.output,
		Detail: fmt.Sprintf("weights %s + %s + compute %s%s + prompt cache %s + overhead %s; %s",
			api.FormatBytes(p.weights), p.kvWords, api.FormatBytes(p.compute), p.computeWords, api.FormatBytes(cache), api.FormatBytes(Overhead), how),
	}, nil
}

// promptCache is the bound given to llama-server's host prompt cache (--cache-ram, whole MiB):
// as much as the KV cache itself, so one context's worth of past prompts can be reused. Left
// alone the cache grows up to 8 GiB, far beyond any estimate (measured: a model estimated at
// 847 MiB reached 1.1 GiB of RSS over 16 prompts). Under 1 MiB it is off.
func promptCache(kv int64) int64 {
	return kv >> 20 << 20
}

// parts are gguf-parser-go's figures for the host device.
type parts struct {
	weights, kv, compute int64
	input, output        int64  // of weights: the token embeddings and the output layer
	kvWords              string // "KV 224 MiB (28 layers × 2048 ctx, f16)"
	computeWords         string // " (flash attention off: attention scores 1 GiB)", or ""
	trainContext         int    // the header's context_length; 0 when absent
	layers               int    // the header's block_count
}

// headerParts runs the estimate fromHeader describes. A GGUF that is not a model is an
// InvalidSource *api.Error; a panic in the estimator is a plain error.
func headerParts(gf *parser.GGUFFile, contextSize int, run Run) (parts, error) {
	a := gf.Architecture()
	if a.Type != "" && a.Type != "model" {
		return parts{}, api.Errorf(api.CodeInvalidSource, "the GGUF is of type %q (%s), not a model llama-server can serve alone", a.Type, a.Architecture)
	}
	total := int64(contextSize) * int64(run.slots())
	ctxTokens := int32(min(total, math.MaxInt32))
	opts := []parser.GGUFRunEstimateOption{parser.WithLLaMACppContextSize(ctxTokens), parser.WithLLaMACppOffloadLayers(0),
		parser.WithLLaMACppCacheKeyType(cacheType(run.CacheK)), parser.WithLLaMACppCacheValueType(cacheType(run.CacheV))}
	batch, ubatch := run.batches()
	opts = append(opts, parser.WithLLaMACppLogicalBatchSize(int32(batch)), parser.WithLLaMACppPhysicalBatchSize(int32(ubatch)))
	if run.flashAttention() {
		opts = append(opts, parser.WithFlashAttention())
	}
	var e parser.LLaMACppRunEstimate
	if err := safely(func() { e = gf.EstimateLLaMACppRun(opts...) }); err != nil {
		return parts{}, err
	}
	if len(e.Devices) == 0 {
		return parts{}, errors.New("the estimator returned no device")
	}
	d := e.Devices[0]
	kv := int64(d.KVCache.Sum())
	p := parts{
		trainContext: int(min(a.MaximumContextLength, math.MaxInt32)),
		layers:       int(min(a.BlockCount, math.MaxInt32)),
		weights:      int64(d.Weight.Sum()),
		input:        int64(d.Weight.Input),
		output:       int64(d.Weight.Output),
		kv:           kv,
		compute:      int64(d.Computation.Sum()) + int64(d.Footprint),
		kvWords:      fmt.Sprintf("KV %s (%d layers × %d ctx, %s)", api.FormatBytes(kv), a.BlockCount, e.ContextSize, run.cacheWords()),
	}
	if !run.flashAttention() {
		scores := attentionScores(contextSize, min(ubatch, int(min(total, math.MaxInt32))), int64(a.AttentionHeadCount))
		p.compute += scores
		p.computeWords = " (flash attention off: attention scores " + api.FormatBytes(scores) + ")"
	}
	return p, nil
}

// attentionScores is what llama-server without flash attention holds for one micro-batch's
// attention: every head's f32 scores of ubatch tokens against a slot's context, and the f32
// mask beside them ((heads + 1) × context × ubatch × 4 bytes). Measured on llama-server 9749
// (2 layers, 4 heads, 4096 ctx): the compute buffer grew by 36 MiB at -ub 512 and 287 MiB at
// -ub 4096 when flash attention was turned off; this counts 40 MiB and 320 MiB.
func attentionScores(slotContext, ubatch int, heads int64) int64 {
	return (max(heads, 1) + 1) * int64(slotContext) * int64(ubatch) * 4
}

// Run is what of llama-server's arguments changes the memory a model takes (the engine driver
// reads them from a placement's arguments); the zero value is the driver's defaults: one slot,
// f16 cache, batches of 2048 and 512 tokens, flash attention auto.
type Run struct {
	Slots          int    // contexts held, each of the asked size (-np); 0 = 1
	CacheK, CacheV string // KV cache types as llama-server spells them (-ctk, -ctv); "" = f16
	Batch, UBatch  int    // logical and physical batch sizes (-b, -ub); 0 = 2048, 512
	FlashAttn      string // -fa: "on", "off" or "auto"; "" = auto
	// SHA256 is the file's digest when the placement names it: a peer that holds the file
	// answers the header reads first (Guard.Peers).
	SHA256 string
}

// CacheTypes are the KV cache types llama-server takes and the estimate can count, in
// llama-server's spelling.
var CacheTypes = []string{"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}

// cacheTypes are CacheTypes as gguf-parser-go names them, in the same order.
var cacheTypes = []parser.GGMLType{parser.GGMLTypeF32, parser.GGMLTypeF16, parser.GGMLTypeBF16, parser.GGMLTypeQ8_0,
	parser.GGMLTypeQ4_0, parser.GGMLTypeQ4_1, parser.GGMLTypeIQ4_NL, parser.GGMLTypeQ5_0, parser.GGMLTypeQ5_1}

// cacheType is a checked cache type's gguf-parser-go name ("" is f16).
func cacheType(name string) parser.GGMLType {
	if i := slices.Index(CacheTypes, name); i >= 0 {
		return cacheTypes[i]
	}
	return parser.GGMLTypeF16
}

// check refuses what the estimate cannot count (InvalidSource: the request is wrong, not the
// model).
func (r Run) check() error {
	for _, t := range []string{r.CacheK, r.CacheV} {
		if t != "" && !slices.Contains(CacheTypes, t) {
			return api.Errorf(api.CodeInvalidSource, "KV cache type %q cannot be sized: want one of %s", t, strings.Join(CacheTypes, ", "))
		}
	}
	if r.Slots < 0 || r.Batch < 0 || r.UBatch < 0 || r.Batch > math.MaxInt32 || r.UBatch > math.MaxInt32 {
		return api.Errorf(api.CodeInvalidSource, "slots %d, batch %d, micro-batch %d cannot be sized", r.Slots, r.Batch, r.UBatch)
	}
	if !slices.Contains([]string{"", "on", "off", "auto"}, r.FlashAttn) {
		return api.Errorf(api.CodeInvalidSource, "flash attention %q cannot be sized: want on, off or auto", r.FlashAttn)
	}
	return nil
}

func (r Run) slots() int { return max(r.Slots, 1) }

// batches are the logical and physical batch sizes llama-server runs with: the physical one is
// never larger than the logical one (llama.cpp lowers it).
func (r Run) batches() (batch, ubatch int) {
	batch, ubatch = 2048, 512
	if r.Batch > 0 {
		batch = r.Batch
	}
	if r.UBatch > 0 {
		ubatch = r.UBatch
	}
	batch = max(batch, 32) // gguf-parser-go raises it so, as llama.cpp once did
	return batch, min(ubatch, batch)
}

func (r Run) flashAttention() bool { return r.FlashAttn != "off" }

// cacheWords names the KV cache's types: "f16", or "K f32, V q8_0".
func (r Run) cacheWords() string {
	k, v := cmp.Or(r.CacheK, "f16"), cmp.Or(r.CacheV, "f16")
	if k == v {
		return k
	}
	return "K " + k + ", V " + v
}

// CheckMagic reads the start of r, a model file at where, and refuses it (InvalidSource) when it
// is not a GGUF: an engine handed one exits, and does not always manage to say why first.
func CheckMagic(r io.Reader, where string) error {
	magic := make([]byte, len(ggufMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != ggufMagic {
		return notGGUF(where, err)
	}
	return nil
}

// notGGUF refuses what does not start with the GGUF magic. The bytes it does start with are not
// shown: for a URL they are a remote's answer, and a refusal must not carry it back.
func notGGUF(where string, err error) error {
	if err != nil {
		return api.Errorf(api.CodeInvalidSource, "%s is not a GGUF file: it is too short to hold a header", where)
	}
	return api.Errorf(api.CodeInvalidSource, "%s is not a GGUF file: it does not start with %q", where, ggufMagic)
}

// contentRangeTotal reads the total of "bytes 0-7/12345"; -1 when absent or "*".
func contentRangeTotal(h string) int64 {
	rest, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes ")
	if !ok {
		return -1
	}
	_, total, ok := strings.Cut(rest, "/")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(total), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// safeParse runs a gguf-parser-go parse, turning a panic on a hostile header into an error.
func safeParse(parse func() (*parser.GGUFFile, error)) (gf *parser.GGUFFile, err error) {
	if perr := safely(func() { gf, err = parse() }); perr != nil {
		return nil, perr
	}
	return gf, err
}

// safely runs f and reports a panic as an error: the header is untrusted input.
func safely(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parser panicked: %v", r)
		}
	}()
	f()
	return nil
}

// DescribeGGUF reads what a local GGUF file says it is (architecture, parameter count, the
// tensors' main type), in the words Ollama's model details use: "llama", "494.03M", "Q4_K_M".
func DescribeGGUF(path string) (api.ModelDetails, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return api.ModelDetails{}, err
	}
	gf, err := safeParse(func() (*parser.GGUFFile, error) {
		return parser.ParseGGUFFile(path, append(readOptions(), parser.UseMMap())...)
	})
	if err != nil {
		return api.ModelDetails{}, fmt.Errorf("reading the GGUF header of %s: %w", path, err)
	}
	md := gf.Metadata()
	d := api.ModelDetails{Format: "gguf", Family: md.Architecture, Size: fi.Size(),
		QuantizationLevel: strings.TrimPrefix(md.FileType.String(), "MOSTLY_")}
	if md.Architecture != "" {
		d.Families = []string{md.Architecture}
	}
	if md.Parameters > 0 {
		d.ParameterSize = strings.ReplaceAll(md.Parameters.String(), " ", "")
	}
	return d, nil
}
