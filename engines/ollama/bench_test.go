package ollama

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmkube/mesh/engines"
)

// BenchmarkChatLines is the client's cost of reading a streamed chat: answers of 1 and 33
// pieces in Ollama's form, each written at once so the reading is not waiting on the daemon;
// the difference over 32 is the cost of a piece.
func BenchmarkChatLines(b *testing.B) {
	for _, n := range []int{1, 33} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchChatLines(b, n) })
	}
}

func benchChatLines(b *testing.B, n int) {
	var body strings.Builder
	for i := range n {
		fmt.Fprintf(&body, `{"model":"llama3.2:1b","created_at":"2026-12-01T12:00:00.%09dZ","message":{"role":"assistant","content":" word%d"},"done":false}`+"\n", i, i)
	}
	body.WriteString(`{"model":"llama3.2:1b","created_at":"2026-12-01T12:00:01.000000001Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":123456789,"load_duration":1234567,"prompt_eval_count":26,"prompt_eval_duration":12345678,"eval_count":32,"eval_duration":98765432}` + "\n")
	answer := body.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Write([]byte(answer))
	}))
	b.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, "Ollama", nil)
	if err != nil {
		b.Fatal(err)
	}
	req := engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: "hi"}}}
	pieces := 0
	for b.Loop() {
		err := c.Chat(context.Background(), "llama3.2:1b", req, nil, func(ch engines.ChatChunk) error {
			if ch.Content != "" {
				pieces++
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(pieces)/float64(b.N), "pieces/op")
}

// BenchmarkChatContent is the quick read of the line nearly every token is.
func BenchmarkChatContent(b *testing.B) {
	line := []byte(`{"model":"llama3.2:1b","created_at":"2026-12-01T12:00:00.123456789Z","message":{"role":"assistant","content":" word"},"done":false}`)
	for b.Loop() {
		if _, ok := chatContent(line); !ok {
			b.Fatal("not read")
		}
	}
}
