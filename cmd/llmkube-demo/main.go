// Command llmkube-demo is the llmkube mesh console on a demo mesh it starts itself: real agents
// on loopback with simulated engines (a Pi 5 with a Hailo-10H, a Mac-like host, a GPU server).
// `make demo` runs it. It is its own program so that the console users install, llmkube-tui,
// links no agent, engine driver or simulator. Arguments are llmkube-tui's: `llmkube-demo` opens
// the console, `llmkube-demo mesh hosts` runs a headless command: on the demo mesh that runs
// on this machine, or on a demo mesh of its own when none does. While the console runs,
// scripts reach its mesh through the env file it names (`. $TMPDIR/llmkube-demo.env`, then
// `llmkube-tui mesh …`).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/llmkube/mesh/tui"
	"github.com/llmkube/mesh/tui/cli"
	"github.com/llmkube/mesh/tui/console"
)

func main() {
	os.Exit(cli.WithSignals(run))
}

// run is the program: an engine simulator under its name, else the console.
func run(ctx context.Context) int {
	if code, ok := runAsEngine(ctx); ok {
		return code
	}
	if len(os.Args) > 1 && os.Args[1] == "mesh" {
		if env, ok := runningDemo(); ok {
			fmt.Fprintf(os.Stderr, "llmkube-demo: on the running demo mesh (%s)\n", envFile())
			return cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, cli.Options{Getenv: func(k string) string {
				if v, ok := env[k]; ok {
					return v
				}
				return os.Getenv(k)
			}})
		}
	}
	return cli.Run(ctx, append([]string{"--demo"}, os.Args[1:]...), os.Stdin, os.Stdout, os.Stderr, cli.Options{
		RunConsole: func(ctx context.Context, conn *console.Conn, _ *slog.Logger) error {
			return tui.Run(ctx, conn, tui.Options{QuitStops: "the demo mesh", Note: "scripts: . " + envFile()})
		},
		Demo: startDemo,
	})
}
