package simtest

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
)

func TestLlamaServerBuildsAndRuns(t *testing.T) {
	bin, err := LlamaServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(bin, "/llama-server") {
		t.Fatalf("built as %s", bin)
	}
	var out Buffer
	cmd := exec.Command(bin, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "version") {
		t.Fatalf("--version: %v: %q", err, out.String())
	}
	if _, err := Build(t.TempDir(), "github.com/llmkube/mesh/no/such/package", "x"); err == nil {
		t.Fatal("building a package that does not exist succeeded")
	}
}

func TestBufferConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Write([]byte("x"))
		}()
	}
	wg.Wait()
	if b.String() != "xxxxxxxx" {
		t.Fatalf("got %q", b.String())
	}
}
