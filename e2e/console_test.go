package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/llmkube/mesh/internal/ptytest"
)

// checkInteractiveConsole runs the README's laptop command, `llmkube-tui --mdns`, on a
// pseudo-terminal in the laptop's namespace: it finds the agents by mDNS and draws each of them
// alive on its hosts view; q quits it with exit 0.
func checkInteractiveConsole(ctx context.Context, t *testing.T, e *env, n note) {
	master, slave, err := ptytest.Open(40, 160)
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
	var screen ptytest.Screen
	go screen.Follow(master)

	_, err = eventually(ctx, 20*time.Second, func(context.Context) (bool, string) {
		text := screen.Text()
		for _, a := range e.agents() {
			if !regexp.MustCompile(`(?m)\b` + a.Name + `\s+alive\b`).MatchString(text) {
				return false, fmt.Sprintf("the console does not draw %s alive; its screen so far:\n%s", a.Name, ptytest.LastLines(text, 30))
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
