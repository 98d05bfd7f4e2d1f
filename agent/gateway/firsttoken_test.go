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

func benchLlamaPaths(b *testing.B, oneToken bool) {
	ld, model := benchLlamaDriver(b)
	a := newNode(b, nodeOpts{name: "node-a", drivers: []engines.Driver{ld}})
	nb := newNode(b, nodeOpts{name: "node-b"})
	lp := place(b, a, api.PlacementRequest{Source: model, Name: "tiny", Context: 2048, Args: []string{"--parallel", "16"}})
	joinWith(b, mesh.ProfileLAN, a, nb)
	engine := lp.Engine
	if !strings.HasPrefix(engine, "http://127.0.0.1:") {
		b.Fatalf("engine address %q is not on loopback", engine)
	}
	e := &cmpEnv{client: manyConns()}
	paths := []cmpPath{
		{name: "direct", url: engine + "/v1/chat/completions", model: "tiny", closes: true},
		{name: "bare proxy", url: bareProxy(b, engine, true) + "/v1/chat/completions", model: "tiny"},
		{name: "one hop", url: a.url + "/v1/chat/completions", model: "tiny"},
		{name: "two hops", url: nb.url + "/v1/chat/completions", model: "tiny"},
	}
	for _, p := range paths {
		p.oneToken = oneToken
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
