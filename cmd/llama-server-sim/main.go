// Command llama-server-sim is a stand-in for llama.cpp's llama-server. Install or link it as
// "llama-server" and the agent launches it exactly as it launches the real binary: same command
// line, same /health behaviour, same log lines on stderr. Simulator settings (load time, speed,
// held memory, crashes) come from LLAMA_SIM_* environment variables; run it with -h to list them.
// Linked as "ggml-rpc-server" beside it, it is a simulated RPC worker of splits (llamaserver.RPCMain).
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	enginels "github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/sim/llamaserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if filepath.Base(os.Args[0]) == enginels.RPCBinaryName {
		os.Exit(llamaserver.RPCMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program: see llamaserver.Main.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return llamaserver.Main(ctx, args, getenv, stdout, stderr)
}
