package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// WithSignals runs a program's body with a context that ends on the first Ctrl-C, SIGTERM or
// SIGHUP, and returns its exit code. SIGHUP too: closing the terminal must stop a demo mesh and
// remove its folders like Ctrl-C.
//
// After the first signal, more hang-ups are ignored: a closing terminal sends two, ~50 ms
// apart (the shell's and the kernel's), and the second must not kill the process halfway
// through its cleanup. A second Ctrl-C or SIGTERM kills it the usual way, should shutting
// down hang.
func WithSignals(body func(ctx context.Context) int) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		cancel()
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGHUP {
					continue
				}
				signal.Reset(os.Interrupt, syscall.SIGTERM)
				if p, err := os.FindProcess(os.Getpid()); err == nil {
					_ = p.Signal(s)
				}
				return
			case <-done:
				return
			}
		}
	}()
	code := body(ctx)
	signal.Stop(sigs)
	return code
}
