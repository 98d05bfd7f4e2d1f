// Command llama-server-sim is a stand-in for llama.cpp's llama-server. Install or link it as
// "llama-server" and the agent launches it exactly as it launches the real binary: same command
// line, same /health behaviour, same log lines on stderr. Simulator settings (load time, speed,
// held memory, crashes) come from LLAMA_SIM_* environment variables; run it with -h to list them.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/llmkube/mesh/sim/llamaserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program: see llamaserver.Main.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return llamaserver.Main(ctx, args, getenv, stdout, stderr)
}
