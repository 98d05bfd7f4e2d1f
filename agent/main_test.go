package agent

import (
	"fmt"
	"os"
	"testing"

	"github.com/llmkube/mesh/sim/simtest"
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
	llamaSimBin, err = simtest.LlamaServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
