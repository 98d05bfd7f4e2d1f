package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// llamaSimBin is the llama-server simulator, built once for the package's tests: the
// llama-server driver launches it exactly as it launches the real llama-server.
var llamaSimBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agent-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	llamaSimBin = filepath.Join(dir, "llama-server")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", llamaSimBin, "../cmd/llama-server-sim")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the llama-server simulator:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
