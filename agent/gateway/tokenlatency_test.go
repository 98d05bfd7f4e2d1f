package gateway_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// BenchmarkTokenLatency is what the way from the engine to the client costs each token when the
// engine paces its tokens as a real one does (500 a second here; BenchmarkCompare's simulators
// send theirs as fast as they can, so there a token often waits in a buffer for the one before
// it): for every streamed token, the time from the Ollama simulator's beginning to write it to
// the client's read of it (the simulator's own write is on both paths alike), through the bare
// proxy (Ollama's NDJSON) and through an agent adapting it to an OpenAI client's events, answers
// one at a time alternating between the two. It reports each path's median and p90, the agent's
// median over the bar's, and the read and write system calls of this process a token. It
// asserts no time.
//
//	go test -run '^$' -bench '^BenchmarkTokenLatency$' -benchtime 100x -count 3 ./agent/gateway/
func BenchmarkTokenLatency(b *testing.B) {
	var mu sync.Mutex
	var sent []time.Time // when the simulator began to write each of the current answer's tokens
	osim := ollamaSim(b, func(c *ollamasim.Config) {
		c.TokensPerSec = 500
		c.BeforeToken = func(i int) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if i == 0 {
				sent = sent[:0]
			}
			sent = append(sent, now)
		}
	}, "llama3.2:1b")
	a := ollamaNode(b, "node-a", osim, nil)
	place(b, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	e := &cmpEnv{client: manyConns()}
	paths := []cmpPath{
		{name: "bare", url: bareProxy(b, osim.URL(), false) + "/api/chat", model: "llama3.2:1b", wire: wireNDJSON, times: true},
		{name: "sse", url: a.url + "/v1/chat/completions", model: "llama", times: true},
	}
	lat := make([][]time.Duration, len(paths))
	reads, writes := make([]uint64, len(paths)), make([]uint64, len(paths))
	answer := func(i int, prompt string) {
		r0, w0 := processIO()
		s, err := e.chat(b.Context(), paths[i], prompt)
		r1, w1 := processIO()
		reads[i], writes[i] = reads[i]+r1-r0, writes[i]+w1-w0
		if err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(sent) != len(s.at) {
			b.Fatalf("%s: the simulator wrote %d tokens, the client read %d pieces", paths[i].name, len(sent), len(s.at))
		}
		for k, at := range s.at {
			lat[i] = append(lat[i], at.Sub(sent[k]))
		}
	}
	for n := range 20 {
		for i := range paths {
			answer(i, fmt.Sprint("warm up ", n))
		}
	}
	clear(lat)
	clear(reads)
	clear(writes)
	r := 0
	for b.Loop() {
		for k := range paths {
			answer((k+r)%len(paths), fmt.Sprint("prompt number ", r%64))
		}
		r++
	}
	p50 := make([]time.Duration, len(paths))
	for i, p := range paths {
		slices.Sort(lat[i])
		p50[i] = lat[i][len(lat[i])/2]
		b.ReportMetric(micros(p50[i]), "µs-"+p.name+"-p50")
		b.ReportMetric(micros(lat[i][len(lat[i])*9/10]), "µs-"+p.name+"-p90")
		b.ReportMetric(float64(reads[i])/float64(len(lat[i])), p.name+"-reads/token")
		b.ReportMetric(float64(writes[i])/float64(len(lat[i])), p.name+"-writes/token")
	}
	b.ReportMetric(float64(p50[1])/float64(p50[0]), "p50-ratio")
}
