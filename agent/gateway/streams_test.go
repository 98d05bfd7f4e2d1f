package gateway_test

// BenchmarkStreams is two of BenchmarkCompare's measures, the agent beside the bare proxy in
// alternating rounds, with the counts a noisy machine moves least: per token, the CPU time of
// this process (the client and the bare proxy or the agent), of the llama-server simulator (a
// process of its own, as the Ollama and hailo-ollama simulators are: of those, not counted),
// the allocations, and the read and write system calls.
//
//   - 64 and 256: rounds of that many simultaneous streams on llama-server, bare proxy and one
//     hop in turn; tokens/s and CPU per token over the rounds.
//   - ollama: an OpenAI client on the Ollama engine, answers one at a time beside the bare
//     proxy's (Ollama's own NDJSON), in turn; per token is the slope over answer length (8
//     to cmpLongest tokens) of the median CPU time of an answer, and of its wall time.
//   - hailo: the same, an OpenAI client on the hailo-ollama simulator beside its bare proxy.
//   - llama: the same, one hop on llama-server beside its bare proxy: what a token costs when
//     nothing else streams (the rounds of many streams write several tokens at once).
//
// One path alone, for a profile: -bench 'Streams/64' with LLMKUBE_BENCH_PATH="one hop".
//
//	go test -run '^$' -bench '^BenchmarkStreams$' -benchtime 40x ./agent/gateway/
//
// It asserts no time.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	hailosim "github.com/llmkube/mesh/sim/hailo"
	"github.com/llmkube/mesh/sim/simtext"
)

func BenchmarkStreams(b *testing.B) {
	a, lp, osim := benchNodeA(b, pace{longest: cmpLongest})
	engine := lp.Engine
	if !strings.HasPrefix(engine, "http://127.0.0.1:") {
		b.Fatalf("engine address %q is not on loopback", engine)
	}
	e := &cmpEnv{client: manyConns()}
	only := os.Getenv("LLMKUBE_BENCH_PATH")
	pick := func(ps ...cmpPath) []cmpPath {
		var out []cmpPath
		for _, p := range ps {
			if only == "" || p.name == only {
				out = append(out, p)
			}
		}
		return out
	}
	// Streams of answers of the default's lengths at most, as BenchmarkCompare's.
	llama := pick(
		cmpPath{name: "bare proxy", url: bareProxy(b, engine, true) + "/v1/chat/completions", model: "tiny", maxTokens: simtext.MaxAnswer},
		cmpPath{name: "one hop", url: a.url + "/v1/chat/completions", model: "tiny", maxTokens: simtext.MaxAnswer},
	)
	dialect := pick(
		cmpPath{name: "ollama bare proxy", url: bareProxy(b, osim, false) + "/api/chat", model: "llama3.2:1b", wire: wireNDJSON},
		cmpPath{name: "SSE client on ollama", url: a.url + "/v1/chat/completions", model: "llama"},
	)
	for _, p := range append(llama, dialect...) {
		for i := range cmpWarmRequest {
			if _, err := e.chat(b.Context(), p, fmt.Sprint("warm up ", i%64)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, width := range []int{64, 256} {
		b.Run(fmt.Sprint(width), func(b *testing.B) {
			m := make([]meter, len(llama))
			r := 0
			for b.Loop() {
				for k := range llama {
					i := (k + r) % len(llama)
					if err := m[i].round(b, e, llama[i], width); err != nil {
						b.Fatal(err)
					}
				}
				r++
			}
			for i, p := range llama {
				m[i].report(b, short(p.name))
			}
			if len(llama) == 2 {
				b.ReportMetric(m[1].tps()/m[0].tps(), "tokens/s-ratio")
			}
		})
	}
	b.Run("ollama", func(b *testing.B) { benchDialect(b, e, dialect) })
	b.Run("llama", func(b *testing.B) {
		seq := pick(
			cmpPath{name: "bare proxy", url: bareProxy(b, engine, true) + "/v1/chat/completions", model: "tiny"},
			cmpPath{name: "one hop", url: a.url + "/v1/chat/completions", model: "tiny"},
		)
		benchDialect(b, e, seq)
	})
	b.Run("hailo", func(b *testing.B) {
		// FinalChunks, as in BenchmarkCompare: the bare proxy passes a cut stream on as broken.
		dataDir := b.TempDir()
		hsim, library := hailoSimProcess(b, dataDir, []string{hailosim.EnvFinalChunks + "=true", fmt.Sprint(hailosim.EnvLongestAnswer, "=", cmpLongest)}, "qwen2:1.5b")
		pi := hailoNodeAt(b, "pi", hsim, library, dataDir, nil)
		place(b, pi, api.PlacementRequest{Source: "hailo://qwen2:1.5b", Name: "qwen2:1.5b"})
		hailo := pick(
			cmpPath{name: "hailo bare proxy", url: bareProxy(b, hsim, false) + "/api/chat", model: "qwen2:1.5b", wire: wireNDJSON},
			cmpPath{name: "SSE client on hailo", url: pi.url + "/v1/chat/completions", model: "qwen2:1.5b"},
		)
		for _, p := range hailo {
			for i := range cmpWarmRequest {
				if _, err := e.chat(b.Context(), p, fmt.Sprint("warm up ", i%64)); err != nil {
					b.Fatal(err)
				}
			}
		}
		benchDialect(b, e, hailo)
	})
}

// benchDialect runs answers one at a time along a dialect adaptation and its bare proxy
// (dialect: the bar first), in turn, and reports per token the slope over answer length of the
// median CPU time of an answer, and of its wall time.
func benchDialect(b *testing.B, e *cmpEnv, dialect []cmpPath) {
	samples := make([][]cpuSample, len(dialect))
	m := make([]meter, len(dialect))
	var ms runtime.MemStats
	r := 0
	for b.Loop() {
		for k := range dialect {
			i := (k + r) % len(dialect)
			runtime.ReadMemStats(&ms)
			m0 := ms.Mallocs
			r0, w0 := processIO()
			for j := range 32 {
				c0 := processCPU(b)
				s, err := e.chat(b.Context(), dialect[i], fmt.Sprint("prompt number ", (r*32+j)%64))
				if err != nil {
					b.Fatal(err)
				}
				samples[i] = append(samples[i], cpuSample{s, processCPU(b) - c0})
				m[i].tokens += int64(s.tokens)
			}
			runtime.ReadMemStats(&ms)
			r1, w1 := processIO()
			m[i].mallocs += ms.Mallocs - m0
			m[i].reads, m[i].writes = m[i].reads+r1-r0, m[i].writes+w1-w0
		}
		r++
	}
	var cpus []time.Duration
	for i, p := range dialect {
		wall, cpu := cpuSlope(samples[i])
		cpus = append(cpus, cpu)
		name, t := short(p.name), float64(m[i].tokens)
		b.ReportMetric(micros(wall), name+"-µs/token")
		b.ReportMetric(micros(cpu), name+"-cpu-µs/token")
		b.ReportMetric(float64(m[i].mallocs)/t, name+"-allocs/token")
		b.ReportMetric(float64(m[i].reads)/t, name+"-reads/token")
		b.ReportMetric(float64(m[i].writes)/t, name+"-writes/token")
	}
	if len(cpus) == 2 {
		b.ReportMetric(float64(cpus[1])/float64(cpus[0]), "cpu/token-ratio")
	}
}

// short names a path in a metric.
func short(name string) string {
	switch name {
	case "bare proxy", "ollama bare proxy", "hailo bare proxy":
		return "bare"
	case "one hop":
		return "hop"
	case "SSE client on ollama", "SSE client on hailo":
		return "sse"
	}
	return strings.ReplaceAll(name, " ", "-")
}

// meter adds up one path's rounds of concurrent streams.
type meter struct {
	tokens                 int64
	wall, cpu, engineCPU   time.Duration
	mallocs, reads, writes uint64
}

func (m *meter) round(b *testing.B, e *cmpEnv, p cmpPath, width int) error {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m0, c0, e0 := ms.Mallocs, processCPU(b), childrenCPU()
	r0, w0 := processIO()
	start := time.Now()
	n, err := e.round(b.Context(), p, width)
	if err != nil {
		return err
	}
	m.wall += time.Since(start)
	runtime.ReadMemStats(&ms)
	r1, w1 := processIO()
	m.mallocs += ms.Mallocs - m0
	m.reads, m.writes = m.reads+r1-r0, m.writes+w1-w0
	m.cpu += processCPU(b) - c0
	m.engineCPU += childrenCPU() - e0
	m.tokens += n
	return nil
}

func (m *meter) tps() float64 { return float64(m.tokens) / m.wall.Seconds() }

func (m *meter) report(b *testing.B, name string) {
	t := float64(m.tokens)
	b.ReportMetric(m.tps(), name+"-tokens/s")
	b.ReportMetric(micros(m.cpu)/t, name+"-cpu-µs/token")
	b.ReportMetric(micros(m.engineCPU)/t, name+"-engine-cpu-µs/token")
	b.ReportMetric(float64(m.mallocs)/t, name+"-allocs/token")
	b.ReportMetric(float64(m.reads)/t, name+"-reads/token")
	b.ReportMetric(float64(m.writes)/t, name+"-writes/token")
}

// round runs width simultaneous streams along p and returns the tokens they delivered.
func (e *cmpEnv) round(ctx context.Context, p cmpPath, width int) (int64, error) {
	var wg sync.WaitGroup
	var tokens atomic.Int64
	var firstErr atomic.Value
	for i := range width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.chat(ctx, p, fmt.Sprint("stream ", i))
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			tokens.Add(int64(s.tokens))
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return tokens.Load(), nil
}

// cpuSample is one answer's timings and the CPU time the process spent while it ran.
type cpuSample struct {
	sample
	cpu time.Duration
}

// cpuSlope is the slope over answer length of the median wall time and of the median CPU time.
func cpuSlope(ss []cpuSample) (wall, cpu time.Duration) {
	w, c := make([]sample, len(ss)), make([]sample, len(ss))
	for i, s := range ss {
		w[i] = s.sample
		c[i] = sample{tokens: s.tokens, total: s.cpu}
	}
	wall, _ = slope(w)
	cpu, _ = slope(c)
	return wall, cpu
}

// processIO is the read and write system calls this process has made (Linux's /proc/self/io),
// or zeros where there is no such file.
func processIO() (reads, writes uint64) {
	f, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(f), "\n") {
		name, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseUint(v, 10, 64)
		switch name {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// childrenCPU is the CPU time the running child processes (the llama-server simulator) have
// used, user and system, from Linux's /proc; 0 elsewhere.
func childrenCPU() time.Duration {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var total time.Duration
	for _, t := range tasks {
		kids, _ := os.ReadFile(t)
		for _, pid := range strings.Fields(string(kids)) {
			stat, err := os.ReadFile("/proc/" + pid + "/stat")
			if err != nil {
				continue
			}
			// The fields after the command's closing parenthesis; utime and stime are the
			// 14th and 15th of the whole line, in clock ticks (100 a second on Linux).
			_, rest, _ := strings.Cut(string(stat), ") ")
			f := strings.Fields(rest)
			if len(f) < 13 {
				continue
			}
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			total += time.Duration(u+s) * 10 * time.Millisecond
		}
	}
	return total
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
