package netnslab

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// In runs f on an OS thread that has entered host i's namespace, for making sockets there: a
// socket keeps the namespace it was made in, so a listener or connection made by f can be used
// from any goroutine afterwards. Goroutines f starts run elsewhere, in the test's own namespace.
// The thread goes back to its own namespace before it is unlocked; should that fail it stays
// locked, and the runtime ends it with the goroutine instead of reusing it.
func (l *Lab) In(i int, f func() error) error { return Enter(l.NS(i), f) }

// Enter is In for a namespace by its name under /run/netns, for tests that make their own.
func Enter(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening this thread's namespace: %w", err)
			return
		}
		defer unix.Close(own)
		target, err := unix.Open(filepath.Join("/run/netns", ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening namespace %s: %w", ns, err)
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering namespace %s: %w", ns, err)
			return
		}
		errc <- f()
		if unix.Setns(own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return <-errc
}

// Shape limits what host i sends to the LAN with a tc qdisc on its end of the cable (e.g. "tbf",
// "rate", "1gbit", "burst", "256kb", "latency", "10ms"), or skips the test when tc is missing.
func (l *Lab) Shape(i int, qdisc ...string) {
	l.t.Helper()
	if _, err := exec.LookPath("tc"); err != nil {
		l.t.Skip("shaping a link needs iproute2's `tc`, which is not installed")
	}
	args := append([]string{"-n", l.NS(i), "qdisc", "add", "dev", "eth0", "root"}, qdisc...)
	if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("tc %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

// Listen is a TCP listener on host i's LAN address, on a port the kernel picks.
func (l *Lab) Listen(i int) net.Listener {
	l.t.Helper()
	var ln net.Listener
	if err := l.In(i, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(l.Addr(i), "0"))
		return err
	}); err != nil {
		l.t.Fatal(err)
	}
	return ln
}

// Dial is a DialContext (for an http.Transport) whose connections leave from host i.
func (l *Lab) Dial(i int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = l.In(i, func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}
