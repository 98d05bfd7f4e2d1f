// Command llmkube-tui is the llmkube mesh console: interactive at the root, headless under
// `llmkube-tui mesh …`. Everything is in package tui/cli; main only wires the process to it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/llmkube/mesh/tui/cli"
)

// version is set at build time: -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, the next one kills the process the usual way, should shutting
	// down hang.
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, cli.Options{
		Version: version,
		// RunConsole (the interactive console, tui.Run) and Demo (--demo) are wired here once
		// their packages land; until then the CLI says they are not in this build.
	})
	stop()
	os.Exit(code)
}
