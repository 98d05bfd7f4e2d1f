// Command llmkube-tui is the llmkube mesh console: interactive at the root, headless under
// `llmkube-tui mesh …`. Everything is in package tui/cli; main only wires the process to it and
// to the interactive console (tui.Run). The demo mesh is another program, llmkube-demo, so this
// one links no agent, engine driver or simulator.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/llmkube/mesh/tui"
	"github.com/llmkube/mesh/tui/cli"
	"github.com/llmkube/mesh/tui/console"
)

func main() {
	os.Exit(cli.WithSignals(func(ctx context.Context) int {
		return cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, cli.Options{RunConsole: runConsole})
	}))
}

// runConsole runs the interactive console. Its log already goes to --log-file or nowhere.
func runConsole(ctx context.Context, conn *console.Conn, _ *slog.Logger) error {
	return tui.Run(ctx, conn, tui.Options{})
}
