package gateway_test

// Benchmarks of the gateway's overhead, side by side against one simulated engine: an
// in-process Ollama simulator answering at once (no TTFT, no pacing), so what is measured is
// the path, not the model. Three paths, same dialect (Ollama NDJSON /api/chat, streaming):
//
//	direct    client → engine
//	one hop   client → agent A's gateway → engine
//	two hops  client → agent B's gateway → agent A's gateway → engine
//
// For each path:
//   - ttft: one-token answers (num_predict 1), so nothing behind the first token competes with
//     it; reports its p50 and p99. The added cost of a hop is the difference between paths.
//   - stream: whole answers (8 to 39 tokens, by prompt); the time of an answer grows with its
//     tokens, and the slope (median time per token count, least squares) is the time per token
//     at the path's slowest stage. A hop's per-token cost is the difference in slopes.
//
// The throughput and concurrency benchmarks run many streams at once. Everything — client,
// agents, engine — shares the machine's CPUs, as on a small host. Run with:
//
//	go test -run '^$' -bench . -benchtime 2000x ./agent/gateway/

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/mesh"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// benchEnv is one engine with an agent serving it (node-a) and a second agent (node-b) that
// reaches it only by forwarding.
type benchEnv struct {
	sim    *ollamasim.Server
	a, b   *node
	client *http.Client
}

// manyConns is an HTTP client (and driver transport) that keeps enough idle connections for
// hundreds of concurrent streams, so the benchmarks measure requests, not TCP handshakes.
func manyConns() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 2048, MaxIdleConnsPerHost: 1024, DisableCompression: true}}
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	sim := ollamaSim(b, nil, "llama3.2:1b")
	d, err := ollama.New(ollama.Config{URL: sim.URL(), HTTP: manyConns()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	a := newNode(b, nodeOpts{name: "node-a", drivers: []engines.Driver{d},
		sizer: &sizing.Sizer{Guard: download.Options{AllowPrivate: true}, OllamaDaemon: sim.URL(), OllamaRegistry: sim.RegistryURL()}})
	nb := newNode(b, nodeOpts{name: "node-b"})
	place(b, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	joinWith(b, mesh.ProfileLAN, a, nb)
	return &benchEnv{sim: sim, a: a, b: nb, client: manyConns()}
}

// target is where a path's requests go, and the model name there.
type target struct{ url, model string }

func (e *benchEnv) direct() target  { return target{e.sim.URL() + "/api/chat", "llama3.2:1b"} }
func (e *benchEnv) oneHop() target  { return target{e.a.url + "/api/chat", "llama"} }
func (e *benchEnv) twoHops() target { return target{e.b.url + "/api/chat", "llama"} }

// sample is one streamed answer's timings.
type sample struct {
	ttft, total time.Duration
	tokens      int
	lat         []time.Duration // each piece of content's time from its engine, if stamped
}

// stream sends one streaming chat (limit > 0: at most limit tokens) and reads it to the end,
// timing the first token.
func (e *benchEnv) stream(ctx context.Context, tg target, prompt string, limit int) (sample, error) {
	opts := `"num_ctx":2048`
	if limit > 0 {
		opts += fmt.Sprintf(`,"num_predict":%d`, limit)
	}
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"options":{%s}}`, tg.model, prompt, opts)
	req, err := http.NewRequestWithContext(ctx, "POST", tg.url, strings.NewReader(body))
	if err != nil {
		return sample{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	start := time.Now()
	resp, err := e.client.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return sample{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	var s sample
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			switch {
			case bytes.Contains(line, []byte(`"done":false`)):
				if s.tokens == 0 {
					s.ttft = time.Since(start)
				}
				s.tokens++
			case bytes.Contains(line, []byte(`"done":true`)):
				done = true
			case bytes.Contains(line, []byte(`"error"`)):
				return s, fmt.Errorf("error in stream: %s", line)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, err
		}
	}
	s.total = time.Since(start)
	if !done || s.tokens == 0 {
		return s, fmt.Errorf("stream ended early after %d tokens", s.tokens)
	}
	return s, nil
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// slope fits total = a + b·tokens through the median total of each token count, by least
// squares, and returns b and a.
func slope(samples []sample) (perToken, perRequest time.Duration) {
	byCount := map[int][]time.Duration{}
	for _, s := range samples {
		byCount[s.tokens] = append(byCount[s.tokens], s.total)
	}
	var xs, ys []float64
	for n, ts := range byCount {
		xs = append(xs, float64(n))
		ys = append(ys, float64(percentile(ts, 0.5)))
	}
	if len(xs) < 2 {
		return 0, 0
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	bb := sxy / sxx
	return time.Duration(bb), time.Duration(my - bb*mx)
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// benchPath measures one path: ttft (one-token answers) and stream (whole answers).
func benchPath(b *testing.B, pick func(*benchEnv) target) {
	e := newBenchEnv(b)
	tg := pick(e)
	for i := range 200 { // warm connections, caches and the agents' rolling figures
		if _, err := e.stream(b.Context(), tg, "warm up "+fmt.Sprint(i%64), 0); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("ttft", func(b *testing.B) {
		var ttft []time.Duration
		i := 0
		for b.Loop() {
			s, err := e.stream(b.Context(), tg, "prompt number "+fmt.Sprint(i%64), 1)
			if err != nil {
				b.Fatal(err)
			}
			i++
			ttft = append(ttft, s.ttft)
		}
		b.ReportMetric(micros(percentile(ttft, 0.50)), "µs-ttft-p50")
		b.ReportMetric(micros(percentile(ttft, 0.99)), "µs-ttft-p99")
	})
	b.Run("stream", func(b *testing.B) {
		var samples []sample
		i := 0
		for b.Loop() {
			s, err := e.stream(b.Context(), tg, "prompt number "+fmt.Sprint(i%64), 0)
			if err != nil {
				b.Fatal(err)
			}
			i++
			samples = append(samples, s)
		}
		perToken, perRequest := slope(samples)
		b.ReportMetric(micros(perToken), "µs/token")
		b.ReportMetric(micros(perRequest), "µs/request")
	})
}

func BenchmarkDirect(b *testing.B)  { benchPath(b, (*benchEnv).direct) }
func BenchmarkOneHop(b *testing.B)  { benchPath(b, (*benchEnv).oneHop) }
func BenchmarkTwoHops(b *testing.B) { benchPath(b, (*benchEnv).twoHops) }

// benchConcurrent runs rounds of `streams` concurrent chats along a path; it reports the
// tokens per second delivered, the p99 time to first token under that load, and fails on any
// error.
func benchConcurrent(b *testing.B, pick func(*benchEnv) target, streams int) {
	e := newBenchEnv(b)
	tg := pick(e)
	var tokens, errs atomic.Int64
	var mu sync.Mutex
	var ttft []time.Duration
	var firstErr atomic.Value
	round := func() {
		var wg sync.WaitGroup
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := e.stream(b.Context(), tg, "stream "+fmt.Sprint(i), 0)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				tokens.Add(int64(s.tokens))
				mu.Lock()
				ttft = append(ttft, s.ttft)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	round() // warm: open the connections
	tokens.Store(0)
	ttft = ttft[:0]
	start := time.Now()
	for b.Loop() {
		round()
	}
	elapsed := time.Since(start)
	if n := errs.Load(); n > 0 {
		b.Fatalf("%d of the streams failed; first: %v", n, firstErr.Load())
	}
	b.ReportMetric(float64(tokens.Load())/elapsed.Seconds(), "tokens/s")
	b.ReportMetric(float64(percentile(ttft, 0.99).Nanoseconds())/1e3, "µs-ttft-p99")
	b.ReportMetric(float64(errs.Load()), "errors")
}

// Throughput at the limit: 64 streams at a time, the engine answering instantly, so the agents
// (and the client, on the same machine) are the bottleneck.
func BenchmarkThroughputDirect(b *testing.B) { benchConcurrent(b, (*benchEnv).direct, 64) }
func BenchmarkThroughputOneHop(b *testing.B) { benchConcurrent(b, (*benchEnv).oneHop, 64) }

// 256 concurrent streams through two agents, zero errors allowed.
func BenchmarkTwoHops256Streams(b *testing.B) { benchConcurrent(b, (*benchEnv).twoHops, 256) }
