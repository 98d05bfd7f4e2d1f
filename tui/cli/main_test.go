package cli_test

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/llmkube/mesh/tui/cli"
)

// childEnv makes the test binary act as llmkube-tui: the README's shell examples run it under
// that name, as a real process with the real environment, signals and exit codes.
const childEnv = "LLMKUBE_CLI_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, cli.Options{})
		stop()
		os.Exit(code)
	}
	code := m.Run()
	closeShared()
	closeLAN()
	os.Exit(code)
}
