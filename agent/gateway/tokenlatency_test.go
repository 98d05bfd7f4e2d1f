package gateway_test

import (
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"
)

// tokenPace is the engines' speed in BenchmarkTokenLatency: a fast real engine's, kept high so
// that the run stays short.
const tokenPace = 500

// BenchmarkTokenLatency is the second half of `make bench-compare`: what the way from the engine
// to the client costs each token when the engines pace their tokens as real ones do
// (BenchmarkCompare's send theirs as fast as they can, so there a token often waits in a buffer
// for the one before it, and the per-token figure is a slope through such batches). The paths
// are BenchmarkCompare's, on engines that generate tokenPace tokens a second and stamp every
// token with the time they began to write it (simtext.Stamp; the llama-server simulator is
// another process, so the stamp is the only clock the two sides share); each token is timed
// from its stamp to the client's read of it. Answers go one at a time, every path in turn in
// each round. It prints each path's median and p90 a token, the median's ratio to the path's
// bar (its engine's bare proxy) and this process's read and write system calls a token (all
// but the llama-server simulator's), and asserts no time.
//
//	go test -run '^$' -bench '^BenchmarkTokenLatency$' -benchtime 40x ./agent/gateway/
func BenchmarkTokenLatency(b *testing.B) {
	e := newCmpEnv(b, pace{tokensPerSec: tokenPace})
	ctx := b.Context()
	lat := map[string][]time.Duration{}
	calls := map[string]uint64{}
	answer := func(name, prompt string) {
		r0, w0 := processIO()
		s, err := e.chat(ctx, e.paths[name], prompt)
		r1, w1 := processIO()
		if err != nil {
			b.Fatal(err)
		}
		lat[name] = append(lat[name], s.lat...)
		calls[name] += r1 - r0 + w1 - w0
	}
	for i := range 5 {
		for _, name := range cmpOrder {
			answer(name, fmt.Sprint("warm up ", i))
		}
	}
	clear(lat)
	clear(calls)
	start := time.Now()
	r := 0
	for b.Loop() {
		for k := range cmpOrder {
			answer(cmpOrder[(k+r)%len(cmpOrder)], fmt.Sprint("prompt number ", r%64))
		}
		r++
	}
	printTokenLatency(os.Stdout, lat, calls, r, time.Since(start))
}

func printTokenLatency(w io.Writer, lat map[string][]time.Duration, calls map[string]uint64, rounds int, took time.Duration) {
	p50 := map[string]time.Duration{}
	for name, l := range lat {
		slices.Sort(l)
		p50[name] = l[len(l)/2]
	}
	fmt.Fprintf(w, "\ntoken latency %s, engines paced at %d tokens/s, %d answers per path in alternating rounds, took %s\n",
		time.Now().UTC().Format(time.RFC3339), tokenPace, rounds, took.Round(time.Second))
	fmt.Fprintf(w, "%-38s %7s %9s %7s %9s %12s\n", "path (bar: its engine's bare proxy)", "tokens", "p50", "÷bar", "p90", "syscalls/tok")
	for _, name := range cmpOrder {
		l := lat[name]
		if len(l) == 0 {
			continue
		}
		fmt.Fprintf(w, "%-38s %7d %7.1fµs %6.2f× %7.1fµs %12.2f\n", name, len(l), micros(p50[name]),
			float64(p50[name])/float64(p50[pathBar(name)]), micros(l[len(l)*9/10]), float64(calls[name])/float64(len(l)))
	}
	for _, name := range cmpOrder {
		if chain, ok := cmpChain[name]; ok && p50[chain] > 0 {
			fmt.Fprintf(w, "%s beside %s: p50 a token %.2f×\n", name, chain, float64(p50[name])/float64(p50[chain]))
		}
	}
}
