package hailo

import (
	"context"
	"strings"
	"testing"
)

// BenchmarkStart measures a start with the command's defaults (1 MiB HEFs): writing the library
// and manifests, binding both listeners. The target is well under a second.
func BenchmarkStart(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		cfg := DefaultConfig()
		cfg.DataDir = dir
		s, err := Start(context.Background(), cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkChat measures a whole non-streaming chat with zero delays: the simulator's own cost.
func BenchmarkChat(b *testing.B) {
	cfg := FastConfig(b.TempDir())
	cfg.Preloaded = []string{"qwen2:1.5b"}
	s, err := Start(context.Background(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		resp, err := client.Post(s.URL()+"/api/chat", "application/json",
			strings.NewReader(`{"model":"qwen2:1.5b","messages":[{"role":"user","content":"hi"}],"stream":false}`))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}
