package gateway_test

// BenchmarkCompare is `make bench-compare`: the gateway's cost measured beside its baselines in
// one run, against one llama-server simulator (a real process, launched by the agent's driver,
// no pacing, so the paths' own cost dominates). Paths, all OpenAI server-sent events:
//
//	direct    client → engine
//	bare      client → a bare Go httputil.ReverseProxy (FlushInterval -1) → engine, on a
//	          connection per request as llama-server needs (see bareProxy)
//	one hop   client → agent A → engine
//	two hops  client → agent B → agent A → engine
//	two bare proxies  client → bare proxy → bare proxy → engine: what a second hop costs
//	          a proxy that does nothing else, beside two hops (the first-token target is
//	          per hop)
//
// and the dialect adaptations, each beside a bare proxy in front of its own engine: an Ollama
// NDJSON client on llama-server (SSE), an OpenAI client on the Ollama simulator (NDJSON), and
// an OpenAI client on the hailo-ollama simulator (NDJSON, nanosecond created); and an Ollama
// client on the Ollama simulator, the agent between two ends of one dialect (it passes the
// engine's lines on with the model renamed as the client asked for it).
//
// Paths alternate within each round, so a noisy neighbour hits them alike. Per path it prints
// the per-token cost (the slope of answer time over answer length, 8 to cmpLongest tokens,
// through the median time of each length; beside it the same ratio on the even and on the odd
// rounds alone, which says how precise it is), time to first token p50/p99, and tokens/s at 64
// and 256 concurrent streams (answers of 8 to 39 tokens) with error counts, each with its ratio
// to the bare proxy. It asserts no time: only errors fail it.
//
//	go test -run '^$' -bench '^BenchmarkCompare$' -benchtime 1x ./agent/gateway/

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/mesh"
	"github.com/llmkube/mesh/sim/gguf"
	hailosim "github.com/llmkube/mesh/sim/hailo"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
	"github.com/llmkube/mesh/sim/simtext"
)

// Sizes of the run: sequential requests per path (in rounds, alternating paths), and rounds
// of concurrent streams per path. About a minute on a quiet 2-vCPU machine. 40 rounds, not
// 20: with 2,000 answers a path, a path's per-token ratio to its bar moved by ±0.15 from one
// run to the next for the same code (BENCHMARKS.md), and half the sampling variance is worth
// twenty seconds.
const (
	cmpRounds      = 40
	cmpPerRound    = 100 // sequential requests per path per round
	cmpConcRounds  = 30  // rounds of concurrent streams per path and width
	cmpWarmRequest = 100
	// cmpLongest is the longest answer of the sequential part: the per-token cost is the slope
	// of answer time over answer length, and each answer's fixed cost (its request, its first
	// token, its end: hundreds of µs, with a long tail) moves that slope less the wider the
	// lengths range. Over the simulators' default 8 to 39 tokens the ratio to the bar moved by
	// ±0.1 between the even and the odd rounds of one run (BENCHMARKS.md), as much as a target's
	// margin.
	cmpLongest = 160
)

// wire is how a path's answer is framed.
type wire int

const (
	wireSSE    wire = iota // OpenAI server-sent events
	wireNDJSON             // Ollama NDJSON
)

// cmpPath is one way to the engine.
type cmpPath struct {
	name  string
	url   string // the chat route
	model string
	wire  wire
	// maxTokens asks for answers of at most this many tokens (max_tokens); 0 = no limit.
	maxTokens int
	// closes sends each request on a connection of its own: llama-server closes its
	// connection after a streamed answer (see bareProxy).
	closes bool
}

// bareProxy is a bare Go reverse proxy in front of engine. A proxy in front of llama-server
// must know what the agent's driver knows: llama-server closes the connection after every
// streamed answer without saying so, so one put back in the pool fails the next request on it
// with EOF (every request here streams). closes opens a connection per request, as the driver
// does; without it the bare proxy answered 502 (EOF from the engine) within its first hundred
// requests to the simulator, which closes as llama-server does.
func bareProxy(b *testing.B, engine string, closes bool) string {
	b.Helper()
	u, err := url.Parse(engine)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	// The request body is read before forwarding, as the gateway does: streamed from the
	// client's kept-alive connection, a few percent of answers were cut ("use of closed network
	// connection" on the engine's side), which would count against the baseline.
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		if r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
	}
	tr := manyConns().Transport.(*http.Transport)
	tr.DisableKeepAlives = closes
	rp.Transport = tr
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: rp}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// benchLlamaDriver is a llama-server driver running the simulator, and a small model for it;
// env is more of the simulator's settings.
func benchLlamaDriver(b *testing.B, env ...string) (*llamaserver.Driver, string) {
	bin := llamaServerSim(b)
	spec, ok := gguf.Preset("sim-tiny")
	if !ok {
		b.Fatal("no sim-tiny preset")
	}
	model := filepath.Join(b.TempDir(), "tiny.gguf")
	if err := gguf.Write(model, spec); err != nil {
		b.Fatal(err)
	}
	ld, err := llamaserver.New(llamaserver.Config{Binary: bin, LogDir: b.TempDir(), ModelsDir: b.TempDir(),
		StopGrace: 5 * time.Second, HealthTimeout: 30 * time.Second, Env: append([]string{"LLAMA_SIM_LOAD_DELAY=0s"}, env...)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ld.StopAll(context.Background()) })
	return ld, model
}

// cmpEnv is the engines, agents and proxies of one comparison.
type cmpEnv struct {
	client *http.Client
	paths  map[string]cmpPath
	pace   pace // with stamped tokens, chat times each one's way from its engine
}

// pace is how the engines of a comparison generate: as fast as they can (0), or paced at
// tokensPerSec, as a real engine is, every token stamped with the time its engine began to
// write it (simtext.Stamp); and the longest answer they give (0 = the simulators' default,
// simtext.MaxAnswer).
type pace struct {
	tokensPerSec float64
	longest      int
}

func (p pace) stamped() bool { return p.tokensPerSec > 0 }

// benchNodeA is agent A of the gateway benchmarks: "tiny" on the llama-server simulator (16
// slots) and "llama" on the Ollama simulator (each a program of its own, as the engines are),
// with the llama-server placement and the Ollama simulator's URL returned for the baselines.
func benchNodeA(b *testing.B, p pace) (a *node, lp api.Placement, ollamaURL string) {
	env := []string{fmt.Sprint("LLAMA_SIM_LONGEST_ANSWER=", p.longest)}
	if p.stamped() {
		env = append(env, fmt.Sprint("LLAMA_SIM_TOKENS_PER_SEC=", p.tokensPerSec), "LLAMA_SIM_STAMP_TOKENS=true")
	}
	ld, model := benchLlamaDriver(b, env...)
	oenv := []string{fmt.Sprint(ollamasim.EnvLongestAnswer, "=", p.longest)}
	if p.stamped() {
		oenv = append(oenv, fmt.Sprint(ollamasim.EnvTokensPerSec, "=", p.tokensPerSec), ollamasim.EnvStampTokens+"=true")
	}
	ollamaURL, registry := ollamaSimProcess(b, oenv, "llama3.2:1b")
	od, err := ollama.New(ollama.Config{URL: ollamaURL}, nil)
	if err != nil {
		b.Fatal(err)
	}
	a = newNode(b, nodeOpts{name: "node-a", drivers: []engines.Driver{ld, od},
		sizer: &sizing.Sizer{Guard: download.Options{AllowPrivate: true}, OllamaDaemon: ollamaURL, OllamaRegistry: registry}})
	lp = place(b, a, api.PlacementRequest{Source: model, Name: "tiny", Context: 2048, Args: []string{"--parallel", "16"}})
	place(b, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	return a, lp, ollamaURL
}

func newCmpEnv(b *testing.B, p pace) *cmpEnv {
	a, lp, osim := benchNodeA(b, p)
	nb := newNode(b, nodeOpts{name: "node-b"})
	joinWith(b, mesh.ProfileLAN, a, nb)

	// FinalChunks: hailo-ollama 5.1.1 cuts its streams before their last chunk, which the
	// driver tolerates but a bare proxy passes on as a broken stream.
	dataDir := b.TempDir()
	henv := []string{hailosim.EnvFinalChunks + "=true", fmt.Sprint(hailosim.EnvLongestAnswer, "=", p.longest)}
	if p.stamped() {
		henv = append(henv, fmt.Sprint(hailosim.EnvTokensPerSecond, "=", p.tokensPerSec), hailosim.EnvStampTokens+"=true")
	}
	hsim, library := hailoSimProcess(b, dataDir, henv, "qwen2:1.5b")
	pi := hailoNodeAt(b, "pi", hsim, library, dataDir, nil)
	place(b, pi, api.PlacementRequest{Source: "hailo://qwen2:1.5b", Name: "qwen2:1.5b"})

	engine := lp.Engine // http://127.0.0.1:port
	if !strings.HasPrefix(engine, "http://127.0.0.1:") {
		b.Fatalf("the llama-server placement's engine address %q is not on loopback", engine)
	}
	bare, obare, hbare := bareProxy(b, engine, true), bareProxy(b, osim, false), bareProxy(b, hsim, false)
	bare2 := bareProxy(b, bare, false) // keeps its connections to the first, as agent B does to A
	ps := []cmpPath{
		{name: "direct", url: engine + "/v1/chat/completions", model: "tiny", closes: true},
		{name: "bare proxy", url: bare + "/v1/chat/completions", model: "tiny"},
		{name: "one hop", url: a.url + "/v1/chat/completions", model: "tiny"},
		{name: "two hops", url: nb.url + "/v1/chat/completions", model: "tiny"},
		{name: "two bare proxies", url: bare2 + "/v1/chat/completions", model: "tiny"},
		{name: "NDJSON client, SSE engine (one hop)", url: a.url + "/api/chat", model: "tiny", wire: wireNDJSON},
		{name: "ollama: bare proxy", url: obare + "/api/chat", model: "llama3.2:1b", wire: wireNDJSON},
		{name: "SSE client, NDJSON engine (one hop)", url: a.url + "/v1/chat/completions", model: "llama"},
		{name: "NDJSON client, NDJSON engine (one hop)", url: a.url + "/api/chat", model: "llama", wire: wireNDJSON},
		{name: "hailo: bare proxy", url: hbare + "/api/chat", model: "qwen2:1.5b", wire: wireNDJSON},
		{name: "SSE client, hailo engine (one hop)", url: pi.url + "/v1/chat/completions", model: "qwen2:1.5b"},
	}
	e := &cmpEnv{client: manyConns(), paths: map[string]cmpPath{}, pace: p}
	for _, p := range ps {
		e.paths[p.name] = p
	}
	return e
}

// cmpOrder is the order paths are printed in.
var cmpOrder = []string{"direct", "bare proxy", "one hop", "two hops", "two bare proxies", "NDJSON client, SSE engine (one hop)",
	"ollama: bare proxy", "SSE client, NDJSON engine (one hop)", "NDJSON client, NDJSON engine (one hop)", "hailo: bare proxy", "SSE client, hailo engine (one hop)"}

// cmpConcPaths are the paths run with concurrent streams: the llama-server ones.
var cmpConcPaths = []string{"direct", "bare proxy", "one hop", "two hops", "two bare proxies"}

// cmpChain is each multi-hop path and the chain of bare proxies of as many hops, the baseline
// of a target given per hop.
var cmpChain = map[string]string{"two hops": "two bare proxies"}

// chat sends one streaming chat and reads it to its end: the time to the first piece of
// content, the whole answer's time and its pieces, and, when the engines stamp their tokens,
// each piece's time from its engine to here.
func (e *cmpEnv) chat(ctx context.Context, p cmpPath, prompt string) (sample, error) {
	limit := ""
	if p.maxTokens > 0 {
		limit = fmt.Sprintf(`,"max_tokens":%d`, p.maxTokens)
	}
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"stream":true%s}`, p.model, prompt, limit)
	req, err := http.NewRequestWithContext(ctx, "POST", p.url, strings.NewReader(body))
	if err != nil {
		return sample{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Close = p.closes
	start := time.Now()
	resp, err := e.client.Do(req)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", p.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return sample{}, fmt.Errorf("%s: HTTP %d: %s", p.name, resp.StatusCode, b)
	}
	var s sample
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	done := false
	for !done {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			content := false
			switch k := classify(p.wire, line); k {
			case lineError:
				return s, fmt.Errorf("%s: error in stream: %s", p.name, line)
			case lineEnd:
				done = true
			case lineContent:
				content = true
			}
			if content {
				if s.tokens == 0 {
					s.ttft = time.Since(start)
				}
				if e.pace.stamped() {
					now := time.Now()
					at, ok := simtext.StampIn(line)
					if !ok {
						return s, fmt.Errorf("%s: a piece of content without its engine's stamp: %s", p.name, line)
					}
					s.lat = append(s.lat, now.Sub(at))
				}
				s.tokens++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil && err != bufio.ErrBufferFull {
			return s, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	s.total = time.Since(start)
	if !done || s.tokens == 0 {
		return s, fmt.Errorf("%s: stream ended early after %d tokens", p.name, s.tokens)
	}
	// To the end of the body, so the connection is reused as a client's would be.
	if _, err := io.Copy(io.Discard, br); err != nil {
		return s, fmt.Errorf("%s: after the end of the answer: %w", p.name, err)
	}
	return s, nil
}

// A line of an answer, as the client reads it.
const (
	lineOther   = iota
	lineContent // a piece of content (SSE: not empty; NDJSON: any line with done false)
	lineEnd     // the answer's end
	lineError   // an error in the stream
)

// classify reads a line of an answer by where its marks are in every path's events, not by
// searching it for quoted keys: a search for one costs in proportion to the quotes before it,
// and an OpenAI event has half again as many as an Ollama line, so searching cost the client
// 720-750 ns an event against 260-280 ns an NDJSON line (a scratch benchmark on the two),
// about 0.45 µs a token charged to the SSE paths on Ollama beside their NDJSON bar, 6-7% of
// it. Read this way: 35-45 ns and 15 ns. An error is an event or line that starts as one:
// llama-server's "error:" or data {"error":…}, the agents' data {"error":…}, Ollama's
// {"error":…}.
func classify(w wire, line []byte) int {
	if w == wireNDJSON {
		switch {
		case bytes.HasPrefix(line, []byte(`{"error"`)):
			return lineError
		case bytes.HasSuffix(bytes.TrimRight(line, "\r\n"), []byte(`"done":false}`)):
			return lineContent
		case bytes.Contains(line, []byte(`"done":true`)):
			return lineEnd
		}
		return lineOther
	}
	switch {
	case len(line) <= 2: // the blank line after an event
		return lineOther
	case bytes.HasPrefix(line, []byte(`data: {"error"`)), bytes.HasPrefix(line, []byte("error:")):
		return lineError
	case bytes.HasPrefix(line, []byte("data: [DONE]")):
		return lineEnd
	}
	// The content is the delta's first member, or follows the role in the first event.
	i := bytes.Index(line, []byte(`{"content":"`))
	if i < 0 {
		i = bytes.Index(line, []byte(`,"content":"`))
	}
	if n := i + len(`{"content":"`); i >= 0 && n < len(line) && line[n] != '"' {
		return lineContent
	}
	return lineOther
}

// cmpStats is what one path measured.
type cmpStats struct {
	samples []sample
	// halves are the samples of the even and of the odd rounds: the per-token ratio measured on
	// each half alone says how far the estimate itself moves within a run.
	halves [2][]sample
	ttft   []time.Duration
	conc   map[int]*concStats
}

type concStats struct {
	tokens, errs int64
	elapsed      time.Duration
	firstErr     string
}

func BenchmarkCompare(b *testing.B) {
	e := newCmpEnv(b, pace{longest: cmpLongest})
	ctx := b.Context()
	stats := map[string]*cmpStats{}
	for _, name := range cmpOrder {
		stats[name] = &cmpStats{conc: map[int]*concStats{}}
		for i := range cmpWarmRequest {
			if _, err := e.chat(ctx, e.paths[name], fmt.Sprint("warm up ", i%64)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for b.Loop() {
		start := time.Now()
		// Sequential answers: per-token cost and time to first token.
		for r := range cmpRounds {
			for k := range cmpOrder {
				name := cmpOrder[(k+r)%len(cmpOrder)]
				st := stats[name]
				for i := range cmpPerRound {
					s, err := e.chat(ctx, e.paths[name], fmt.Sprint("prompt number ", (r*cmpPerRound+i)%64))
					if err != nil {
						b.Fatal(err)
					}
					st.samples = append(st.samples, s)
					st.halves[r%2] = append(st.halves[r%2], s)
					st.ttft = append(st.ttft, s.ttft)
				}
			}
		}
		// Concurrent streams on the llama-server paths.
		for _, width := range []int{64, 256} {
			for r := range cmpConcRounds {
				for k := range cmpConcPaths {
					name := cmpConcPaths[(k+r)%len(cmpConcPaths)]
					cs := stats[name].conc[width]
					if cs == nil {
						cs = &concStats{}
						stats[name].conc[width] = cs
					}
					// Answers of the default's lengths at most, so a round of 256 stays short.
					p := e.paths[name]
					p.maxTokens = simtext.MaxAnswer
					e.concurrent(ctx, p, width, cs)
				}
			}
		}
		printCompare(os.Stdout, stats, time.Since(start))
		for _, name := range cmpConcPaths {
			for w, cs := range stats[name].conc {
				if cs.errs > 0 {
					b.Errorf("%s, %d streams: %d errors; first: %s", name, w, cs.errs, cs.firstErr)
				}
			}
		}
	}
}

// concurrent runs one round of width simultaneous streams.
func (e *cmpEnv) concurrent(ctx context.Context, p cmpPath, width int, cs *concStats) {
	var wg sync.WaitGroup
	var tokens, errs atomic.Int64
	var mu sync.Mutex
	start := time.Now()
	for i := range width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.chat(ctx, p, fmt.Sprint("stream ", i))
			if err != nil {
				errs.Add(1)
				mu.Lock()
				if cs.firstErr == "" {
					cs.firstErr = err.Error()
				}
				mu.Unlock()
				return
			}
			tokens.Add(int64(s.tokens))
		}()
	}
	wg.Wait()
	cs.elapsed += time.Since(start)
	cs.tokens += tokens.Load()
	cs.errs += errs.Load()
}

func printCompare(w io.Writer, stats map[string]*cmpStats, took time.Duration) {
	type row struct {
		perToken, p50, p99 time.Duration
		halves             [2]time.Duration // perToken on the even and on the odd rounds alone
	}
	rows := map[string]row{}
	for name, st := range stats {
		pt, _ := slope(st.samples)
		even, _ := slope(st.halves[0])
		odd, _ := slope(st.halves[1])
		rows[name] = row{pt, percentile(st.ttft, 0.5), percentile(st.ttft, 0.99), [2]time.Duration{even, odd}}
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	// halves is the per-token ratio on the even and on the odd rounds, each half against its own
	// bar's same half.
	halves := func(r, bar row) string {
		if bar.halves[0] == 0 || bar.halves[1] == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f/%.2f", float64(r.halves[0])/float64(bar.halves[0]), float64(r.halves[1])/float64(bar.halves[1]))
	}
	fmt.Fprintf(w, "\nbench-compare %s, %d requests per path in %d alternating rounds, took %s\n",
		time.Now().UTC().Format(time.RFC3339), cmpRounds*cmpPerRound, cmpRounds, took.Round(time.Second))
	fmt.Fprintf(w, "%-38s %9s %7s %10s %10s %10s %10s %7s\n", "path (bar: its engine's bare proxy)", "µs/token", "÷bar", "halves", "TTFT p50", "−bar p50", "TTFT p99", "÷bar")
	for _, name := range cmpOrder {
		r, bar := rows[name], rows[pathBar(name)]
		fmt.Fprintf(w, "%-38s %9.2f %7s %10s %8.0fµs %+8.0fµs %8.0fµs %7s\n", name,
			micros(r.perToken), ratio(float64(r.perToken), float64(bar.perToken)), halves(r, bar),
			micros(r.p50), micros(r.p50-bar.p50), micros(r.p99), ratio(float64(r.p99), float64(bar.p99)))
	}
	tps := func(name string, width int) float64 {
		if cs := stats[name].conc[width]; cs != nil && cs.elapsed > 0 {
			return float64(cs.tokens) / cs.elapsed.Seconds()
		}
		return 0
	}
	for _, name := range cmpOrder {
		chain, ok := cmpChain[name]
		if !ok {
			continue
		}
		r, bar := rows[name], rows[chain]
		fmt.Fprintf(w, "%s beside %s: per token %s, TTFT p50 %+.0fµs, p99 %s, tokens/s at 64 streams %s, at 256 %s\n",
			name, chain, ratio(float64(r.perToken), float64(bar.perToken)), micros(r.p50-bar.p50),
			ratio(float64(r.p99), float64(bar.p99)), ratio(tps(name, 64), tps(chain, 64)), ratio(tps(name, 256), tps(chain, 256)))
	}
	for _, width := range []int{64, 256} {
		fmt.Fprintf(w, "%d concurrent streams, %d rounds per path:\n", width, cmpConcRounds)
		for _, name := range cmpConcPaths {
			cs := stats[name].conc[width]
			if cs == nil || cs.elapsed == 0 {
				continue
			}
			fmt.Fprintf(w, "  %-36s %9.0f tokens/s %7s  errors %d\n", name, tps(name, width), ratio(tps(name, width), tps("bare proxy", width)), cs.errs)
		}
	}
}

// pathBar is the path a path is compared with.
func pathBar(name string) string {
	switch {
	case strings.HasPrefix(name, "ollama:"), strings.Contains(name, "NDJSON engine"):
		return "ollama: bare proxy"
	case strings.HasPrefix(name, "hailo"), strings.Contains(name, "hailo engine"):
		return "hailo: bare proxy"
	}
	return "bare proxy"
}
