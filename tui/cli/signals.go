package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// WithSignals runs a program's body with a context that ends on the first Ctrl-C, SIGTERM or
// SIGHUP, and returns its exit code. SIGHUP too: closing the terminal must stop a demo mesh and
// remove its folders like Ctrl-C. After the first signal the next one kills the process the
// usual way, should shutting down hang.
func WithSignals(body func(ctx context.Context) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	return body(ctx)
}
