// Command llmkube-tui is the llmkube mesh console: interactive at the root, headless under
// `llmkube-tui mesh …`. Everything is in package tui/cli; main only wires the process to it:
// the interactive console (tui.Run) and the demo mesh (demo.go).
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/llmkube/mesh/tui"
	"github.com/llmkube/mesh/tui/cli"
	"github.com/llmkube/mesh/tui/console"
)

func main() {
	// SIGHUP too: closing the terminal must stop the demo and remove its folders like Ctrl-C.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// After the first signal, the next one kills the process the usual way, should shutting
	// down hang.
	go func() {
		<-ctx.Done()
		stop()
	}()
	code, ok := runAsLlamaServer(ctx)
	if !ok {
		code = cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, cli.Options{
			RunConsole: runConsole,
			Demo:       startDemo,
		})
	}
	stop()
	os.Exit(code)
}

// runConsole runs the interactive console. Its log already goes to --log-file or nowhere.
func runConsole(ctx context.Context, conn *console.Conn, _ *slog.Logger) error {
	return tui.Run(ctx, conn, tui.Options{})
}
