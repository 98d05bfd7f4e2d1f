package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// checkInteractiveConsole runs the README's laptop command, `llmkube-tui --mdns`, on a
// pseudo-terminal in the laptop's namespace: it finds the agents by mDNS and draws each of them
// alive on its hosts view; q quits it with exit 0.
func checkInteractiveConsole(ctx context.Context, t *testing.T, e *env, n note) {
	master, slave, err := openPTY(40, 160)
	if err != nil {
		n("no pseudo-terminal here: %v", err)
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer master.Close()
	cmd := exec.Command("ip", "netns", "exec", e.laptop.NS, e.prog("llmkube-tui"), "--mdns")
	cmd.Env = append(os.Environ(), "LLMKUBE_JOIN="+e.join, "TERM=xterm-256color")
	cmd.Dir = e.laptop.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		slave.Close()
		t.Fatal(err)
	}
	slave.Close() // the console holds it now
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	var screen screenLog
	go screen.follow(master)

	_, err = eventually(ctx, 20*time.Second, func(context.Context) (bool, string) {
		text := screen.text()
		for _, a := range e.agents() {
			if !regexp.MustCompile(`(?m)\b` + a.Name + `\s+alive\b`).MatchString(text) {
				return false, fmt.Sprintf("the console does not draw %s alive; its screen so far:\n%s", a.Name, lastLines(text, 30))
			}
		}
		return true, ""
	})
	if err != nil {
		t.Fatal(err)
	}
	n("the console drew every agent alive %.2fs after its start", time.Since(start).Seconds())
	quit := time.Now()
	if _, err := master.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the console exited with %v after q", err)
		}
		n("q: the console left the mesh and exited in %.2fs", time.Since(quit).Seconds())
	case <-time.After(10 * time.Second):
		t.Error("the console did not quit within 10s of q")
	}
}

// openPTY opens a pseudo-terminal of rows × cols: the master for the test, the slave for the
// program. The master stays non-blocking (ioctls go through SyscallConn), so closing it ends a
// read in progress.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
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

// screenLog collects what a program drew on its terminal.
type screenLog struct {
	mu  sync.Mutex
	raw []byte
}

func (s *screenLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw = append(s.raw, p...)
	return len(p), nil
}

// follow reads what the program draws until the terminal closes, answering the two questions
// a terminal is asked at start (its background colour, the cursor's position) as a terminal
// would: unanswered, the console would wait seconds for them.
func (s *screenLog) follow(master *os.File) {
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

// text is everything drawn so far without control sequences, one drawn line per line.
func (s *screenLog) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.ReplaceAll(ansi.ReplaceAllString(string(s.raw), "\n"), "\r", "\n")
}

func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
