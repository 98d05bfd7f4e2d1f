//go:build unix

package tui

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// watchHangup calls hungUp once the terminal f hangs up (its window closed, its ssh session
// ended): poll(2) reports POLLHUP on it. A hang-up signal does not always come: when the
// session leader is a program that waits for its children (make, a shell running a script),
// the kernel signals only that leader, and bubbletea takes the terminal's end of input for a
// quiet end of keys. stop ends the watch.
func watchHangup(f *os.File, hungUp func()) (stop func()) {
	if _, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err != nil {
		return func() {} // not a terminal: nothing to hang up
	}
	r, w, err := os.Pipe()
	if err != nil {
		return func() {}
	}
	go func() {
		defer r.Close()
		fds := []unix.PollFd{{Fd: int32(f.Fd())}, {Fd: int32(r.Fd()), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil, fds[1].Revents != 0:
				return
			case fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0:
				hungUp()
				return
			}
		}
	}()
	return func() { _ = w.Close() }
}
