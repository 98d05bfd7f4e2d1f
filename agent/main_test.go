package agent

import (
	"testing"

	"github.com/llmkube/mesh/sim/simtest"
)

// llamaSimBin is the llama-server simulator, built once for the package's tests: the
// llama-server driver launches it exactly as it launches the real llama-server.
var llamaSimBin string

func TestMain(m *testing.M) {
	simtest.Main(m, func(dir string) (err error) {
		llamaSimBin, err = simtest.LlamaServer(dir)
		return err
	})
}
