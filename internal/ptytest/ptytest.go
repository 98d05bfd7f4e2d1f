//go:build linux

// Package ptytest runs programs on a real pseudo-terminal for tests: the console draws on it,
// and closing it sends the hang-ups a closed terminal window sends. Only tests import it.
package ptytest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Open opens a pseudo-terminal of rows × cols: the master for the test, the slave for the
// program (start it with Setsid, Setctty and Ctty 0 so the terminal is its own). The master
// stays non-blocking (ioctls go through SyscallConn), so closing it ends a read in progress.
func Open(rows, cols uint16) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var n int
	var ierr error
	rc, err := master.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) {
			if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
				n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
			}
		})
	}
	if err = errors.Join(err, ierr); err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// Screen collects what a program drew on its terminal.
type Screen struct {
	mu  sync.Mutex
	raw []byte
}

func (s *Screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw = append(s.raw, p...)
	return len(p), nil
}

// Follow reads what the program draws until the terminal closes, answering the two questions
// a terminal is asked at start (its background colour, the cursor's position) as a terminal
// would: unanswered, the console would wait seconds for them.
func (s *Screen) Follow(master *os.File) {
	buf := make([]byte, 32<<10)
	for {
		k, err := master.Read(buf)
		if k > 0 {
			chunk := buf[:k]
			_, _ = s.Write(chunk)
			if bytes.Contains(chunk, []byte("\x1b]11;?")) {
				_, _ = master.Write([]byte("\x1b]11;rgb:0000/0000/0000\x1b\\"))
			}
			if bytes.Contains(chunk, []byte("\x1b[6n")) {
				_, _ = master.Write([]byte("\x1b[1;1R"))
			}
		}
		if err != nil {
			return
		}
	}
}

// ansi matches terminal control sequences: CSI, OSC and two-byte escapes.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?<=>]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[@-Z\\-_]`)

// Text is everything drawn so far without control sequences, one drawn line per line.
func (s *Screen) Text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.ReplaceAll(ansi.ReplaceAllString(string(s.raw), "\n"), "\r", "\n")
}

// LastLines are the last n lines of s that hold more than spaces.
func LastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
