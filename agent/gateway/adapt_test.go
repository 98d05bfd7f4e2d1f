package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/dialect"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/ollama"
)

// BenchmarkAdaptTokens is what a token costs the agent between an Ollama engine's NDJSON and an
// OpenAI client's server-sent events (sse), or an Ollama client's NDJSON (ndjson), without the
// system calls (which a bare proxy makes too): the Ollama client reads a streamed answer from
// memory, and every chunk goes through the chat's relay into the stream encoder, whose writer
// drops the bytes.
// Answers of 1 and 33 pieces alternate; per token is their difference over 32. The lines are
// as Ollama writes them, and as hailo-ollama does (ending in "\r\n").
//
//	go test -run '^$' -bench AdaptTokens ./agent/gateway/
//
// It asserts no time.
func BenchmarkAdaptTokens(b *testing.B) {
	for _, shape := range []struct{ name, end string }{{"ollama", "\n"}, {"hailo", "\r\n"}} {
		for _, client := range []struct {
			name string
			d    dialect.Dialect
		}{{"sse", dialect.OpenAI}, {"ndjson", dialect.OllamaChat}} {
			b.Run(shape.name+"/"+client.name, func(b *testing.B) {
				answer := func(n int) string {
					var body strings.Builder
					for i := range n {
						fmt.Fprintf(&body, `{"model":"llama3.2:1b","created_at":"2026-12-01T12:00:00.%09dZ","message":{"role":"assistant","content":" word%d"},"done":false}`+shape.end, i, i)
					}
					body.WriteString(`{"model":"llama3.2:1b","created_at":"2026-12-01T12:00:01.000000001Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":123456789,"load_duration":1234567,"prompt_eval_count":26,"prompt_eval_duration":12345678,"eval_count":32,"eval_duration":98765432}` + shape.end)
					return body.String()
				}
				// The answers come from memory, not a socket: what is measured is the agent's own
				// work on the bytes, which a bare proxy does not do.
				shortC, err := ollama.NewClient("http://127.0.0.1:1", "Ollama", &http.Client{Transport: memAnswer(answer(1))})
				if err != nil {
					b.Fatal(err)
				}
				longC, err := ollama.NewClient("http://127.0.0.1:1", "Ollama", &http.Client{Transport: memAnswer(answer(33))})
				if err != nil {
					b.Fatal(err)
				}
				call := &dialect.Call{Dialect: client.d, Model: "llama", Stream: true}
				req := engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: "hi"}}}
				var w dropWriter
				one := func(c *ollama.Client) (time.Duration, uint64) {
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					m0 := ms.Mallocs
					t0 := time.Now()
					run := newRelay(dialect.NewEncoder(call, &w, time.Minute, t0), nil)
					if err := c.Chat(context.Background(), "llama3.2:1b", req, nil, run.take); err != nil {
						b.Fatal(err)
					}
					if err := run.enc.Finish(dialect.Stats{Finish: "stop"}); err != nil {
						b.Fatal(err)
					}
					run.enc.Stop()
					took := time.Since(t0)
					runtime.ReadMemStats(&ms)
					if run.count != 1 && run.count != 33 {
						b.Fatalf("%d pieces", run.count)
					}
					return took, ms.Mallocs - m0
				}
				var short1, long33 time.Duration
				var allocs1, allocs33 uint64
				for b.Loop() {
					t, a := one(shortC)
					short1, allocs1 = short1+t, allocs1+a
					t, a = one(longC)
					long33, allocs33 = long33+t, allocs33+a
				}
				n := float64(b.N) * 32
				b.ReportMetric(float64(long33-short1)/n, "ns/token")
				b.ReportMetric(float64(allocs33-allocs1)/n, "allocs/token")
			})
		}
	}
}

// BenchmarkOAChunk is what the relay and the OpenAI stream encoder do with one piece of an
// answer and the release after it (a driver's chunk with More, then the empty one it sends
// before waiting), into a writer that drops the bytes: the agent's work a token on the way
// out, without the system call.
//
//	go test -run '^$' -bench OAChunk -benchmem ./agent/gateway/
func BenchmarkOAChunk(b *testing.B) {
	call := &dialect.Call{Dialect: dialect.OpenAI, Model: "tiny", Stream: true}
	var w dropWriter
	run := newRelay(dialect.NewEncoder(call, &w, time.Minute, time.Now()), nil)
	b.ReportAllocs()
	for b.Loop() {
		if err := run.take(engines.ChatChunk{Content: " word12", More: true}); err != nil {
			b.Fatal(err)
		}
		if err := run.take(engines.ChatChunk{}); err != nil {
			b.Fatal(err)
		}
	}
	run.enc.Stop()
}

// memAnswer answers every request with its NDJSON body.
type memAnswer string

func (a memAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/x-ndjson"}},
		Body: io.NopCloser(strings.NewReader(string(a))), Request: r}, nil
}

// dropWriter is a response writer that drops what is written.
type dropWriter struct{ h http.Header }

func (w *dropWriter) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}
func (w *dropWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *dropWriter) WriteHeader(int)             {}
func (w *dropWriter) Flush()                      {}
