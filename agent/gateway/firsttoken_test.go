package gateway_test

// BenchmarkFirstToken is the first-token path alone, on the llama-server simulator: one-token
// streamed answers, so nothing behind the first token is measured; BenchmarkWholeAnswer is the
// same paths with whole answers (8 to 39 tokens), for what a token costs. For profiling what a
// hop does beside a bare proxy, and counting its allocations:
//
//	go test -run '^$' -bench '^BenchmarkFirstToken$' -benchmem -cpuprofile cpu.out ./agent/gateway/
//
// allocs/op counts the whole process (client, bare proxy or agents); the engine is its own
// process. Each path runs on its own, not alternating as in BenchmarkCompare: their times are
// comparable only on a quiet machine. It asserts no time.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/mesh"
)

func BenchmarkFirstToken(b *testing.B)  { benchLlamaPaths(b, true) }
func BenchmarkWholeAnswer(b *testing.B) { benchLlamaPaths(b, false) }

// llamaPaths is an agent serving the llama-server simulator, a second agent in its mesh, and
// the paths to the engine: direct, bare proxy, one hop, two hops.
func llamaPaths(b *testing.B) (*cmpEnv, []cmpPath) {
	ld, model := benchLlamaDriver(b)
	a := newNode(b, nodeOpts{name: "node-a", drivers: []engines.Driver{ld}})
	nb := newNode(b, nodeOpts{name: "node-b"})
	lp := place(b, a, api.PlacementRequest{Source: model, Name: "tiny", Context: 2048, Args: []string{"--parallel", "16"}})
	joinWith(b, mesh.ProfileLAN, a, nb)
	engine := lp.Engine
	if !strings.HasPrefix(engine, "http://127.0.0.1:") {
		b.Fatalf("engine address %q is not on loopback", engine)
	}
	return &cmpEnv{client: manyConns()}, []cmpPath{
		{name: "direct", url: engine + "/v1/chat/completions", model: "tiny", closes: true},
		{name: "bare proxy", url: bareProxy(b, engine, true) + "/v1/chat/completions", model: "tiny"},
		{name: "one hop", url: a.url + "/v1/chat/completions", model: "tiny"},
		{name: "two hops", url: nb.url + "/v1/chat/completions", model: "tiny"},
	}
}

func benchLlamaPaths(b *testing.B, oneToken bool) {
	e, paths := llamaPaths(b)
	for _, p := range paths {
		if oneToken {
			p.maxTokens = 1
		}
		for i := range cmpWarmRequest {
			if _, err := e.chat(b.Context(), p, fmt.Sprint("warm up ", i%64)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(strings.ReplaceAll(p.name, " ", "-"), func(b *testing.B) {
			var ttft []time.Duration
			tokens := 0
			i := 0
			for b.Loop() {
				s, err := e.chat(b.Context(), p, fmt.Sprint("prompt number ", i%64))
				if err != nil {
					b.Fatal(err)
				}
				i++
				ttft = append(ttft, s.ttft)
				tokens += s.tokens
			}
			b.ReportMetric(micros(percentile(ttft, 0.5)), "µs-ttft-p50")
			b.ReportMetric(float64(tokens)/float64(b.N), "tokens/op")
		})
	}
}

// BenchmarkRelay is what the second agent of two hops costs up to the first token: the bare
// proxy, one hop and two hops on one-token answers, in blocks of 50 requests rotating among the
// three (BenchmarkFirstToken runs each path on its own), so a noisy neighbour hits them alike.
// It reports each path's TTFT p50, two hops' over one hop's and over the bare proxy's, and the
// read and write system calls of this process (client, bare proxy, agents; /proc/self/io) per
// request of each path. It asserts no time.
//
//	go test -run '^$' -bench '^BenchmarkRelay$' -benchtime 60x -count 3 ./agent/gateway/
func BenchmarkRelay(b *testing.B) {
	e, all := llamaPaths(b)
	paths := all[1:] // bare proxy, one hop, two hops
	for i := range paths {
		paths[i].maxTokens = 1
		for n := range cmpWarmRequest {
			if _, err := e.chat(b.Context(), paths[i], fmt.Sprint("warm up ", n%64)); err != nil {
				b.Fatal(err)
			}
		}
	}
	const block = 50
	ttft := make([][]time.Duration, len(paths))
	reads := make([]uint64, len(paths))
	writes := make([]uint64, len(paths))
	round := 0
	for b.Loop() {
		for k := range paths {
			j := (k + round) % len(paths)
			r0, w0 := processIO()
			for n := range block {
				s, err := e.chat(b.Context(), paths[j], fmt.Sprint("prompt number ", (round+n)%64))
				if err != nil {
					b.Fatal(err)
				}
				ttft[j] = append(ttft[j], s.ttft)
			}
			r1, w1 := processIO()
			reads[j] += r1 - r0
			writes[j] += w1 - w0
		}
		round++
	}
	p50 := func(j int) time.Duration { return percentile(ttft[j], 0.5) }
	for j, name := range []string{"bare", "one", "two"} {
		b.ReportMetric(micros(p50(j)), "µs-ttft-p50-"+name)
		b.ReportMetric(float64(reads[j])/float64(len(ttft[j])), "reads/req-"+name)
		b.ReportMetric(float64(writes[j])/float64(len(ttft[j])), "writes/req-"+name)
	}
	b.ReportMetric(micros(p50(2)-p50(1)), "µs-two-minus-one")
	b.ReportMetric(micros(p50(2)-p50(0)), "µs-two-minus-bare")
}
