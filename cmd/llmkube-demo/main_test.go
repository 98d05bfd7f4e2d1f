//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/internal/ptytest"
	"github.com/llmkube/mesh/tui/cli"
)

// asMain makes the test binary act as llmkube-demo: a real process on a real terminal, with
// the real signals. Under the name llama-server (the demo's link) it is the simulator.
const asMain = "LLMKUBE_DEMO_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" || filepath.Base(os.Args[0]) == llamaServerName {
		os.Exit(cli.WithSignals(run))
	}
	os.Exit(m.Run())
}

// readEnv reads the exports of the demo's env file, as a shell sourcing it would.
func readEnv(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return readScriptEnv(b)
}

// demoOnPTY starts the demo on a fresh pseudo-terminal with its own $TMPDIR — directly, or
// under leader, a program that leads the terminal's session and waits for the demo — and waits
// until it draws its hosts and has written its env file.
type demoOnPTY struct {
	tmp     string
	master  *os.File
	screen  *ptytest.Screen
	cmd     *exec.Cmd
	exited  chan struct{}
	envPath string
}

func startDemoOnPTY(t *testing.T, leader ...string) *demoOnPTY {
	t.Helper()
	d := &demoOnPTY{tmp: t.TempDir(), screen: &ptytest.Screen{}, exited: make(chan struct{})}
	master, slave, err := ptytest.Open(30, 200)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	d.master = master
	t.Cleanup(func() { master.Close() })
	d.cmd = exec.Command(os.Args[0])
	if len(leader) > 0 {
		d.cmd = exec.Command(leader[0], append(leader[1:], os.Args[0])...)
	}
	d.cmd.Env = append(os.Environ(), asMain+"=1", "TMPDIR="+d.tmp, "TERM=xterm-256color")
	d.cmd.Stdin, d.cmd.Stdout, d.cmd.Stderr = slave, slave, slave
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, d.cmd.Start())
	slave.Close() // the program holds it now
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL) // the whole session's group
			<-d.exited
		}
	})
	go d.screen.Follow(master)
	d.envPath = filepath.Join(d.tmp, "llmkube-demo.env")
	require.Eventually(t, func() bool {
		_, err := os.Stat(d.envPath)
		return err == nil && strings.Count(d.screen.Text(), "alive") >= 4
	}, 90*time.Second, 50*time.Millisecond, "the demo never drew its hosts")
	return d
}

// closeTerminal closes the terminal as a closed window does (the kernel hangs it up) and, with
// again, sends the hang-up a shell sends its jobs ~50 ms later. The spacing is the stimulus,
// not a wait for anything. Then the program must end by itself, leaving nothing in $TMPDIR.
func (d *demoOnPTY) closeTerminal(t *testing.T, again bool) {
	t.Helper()
	require.NoError(t, d.master.Close())
	if again {
		time.Sleep(50 * time.Millisecond)
		_ = d.cmd.Process.Signal(syscall.SIGHUP)
	}
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not stop within 60 s of its terminal closing")
	}
	ws := d.cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.False(t, ws.Signaled(), "a hang-up killed it before its cleanup: %v", d.cmd.ProcessState)
	left, err := os.ReadDir(d.tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "what the demo left in $TMPDIR")
}

// The first hour of issue 46: the demo on a terminal names the file scripts source, a script
// reaches the running demo mesh through it (not a new one), and closing the terminal — its
// hang-up and the shell's ~50 ms later — stops everything and leaves nothing in $TMPDIR.
func TestDemoReachableFromScriptsAndGoneWithItsTerminal(t *testing.T) {
	d := startDemoOnPTY(t)
	assert.Contains(t, d.screen.Text(), "scripts: . "+d.envPath, "the console names the file")
	info, err := os.Stat(d.envPath)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "it holds the mesh's secret")

	// A script sources it and reaches the running demo's own placements.
	env := readEnv(t, d.envPath)
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code := cli.Run(ctx, []string{"mesh", "models"}, strings.NewReader(""), &out, &errOut, cli.Options{Getenv: func(k string) string { return env[k] }})
	require.Equal(t, cli.ExitOK, code, errOut.String())
	for _, model := range []string{"qwen2.5-instruct:1.5b", "llama-sim-1b", "llama3.2:1b"} {
		assert.Contains(t, out.String(), model, "the demo's own placements")
	}

	// llmkube-demo mesh … acts on the running demo too, not on a mesh of its own.
	place := exec.CommandContext(ctx, os.Args[0], "mesh", "place", "ollama://qwen2.5:0.5b", "--auto", "--wait")
	place.Env = append(os.Environ(), asMain+"=1", "TMPDIR="+d.tmp)
	b, err := place.CombinedOutput()
	require.NoError(t, err, "%s", b)
	assert.Contains(t, string(b), "on the running demo mesh")
	out.Reset()
	code = cli.Run(ctx, []string{"mesh", "models"}, strings.NewReader(""), &out, &errOut, cli.Options{Getenv: func(k string) string { return env[k] }})
	require.Equal(t, cli.ExitOK, code, errOut.String())
	assert.Contains(t, out.String(), "qwen2.5:0.5b", "placed by llmkube-demo mesh place, seen in the running demo")
	d.closeTerminal(t, true)
}

// `make demo` in a terminal that closes: make leads the session and waits for the demo, and
// the kernel hangs up only the session's leader. The demo must notice its terminal is gone by
// itself. A shell that defers its hang-up trap until its child ends plays make here.
func TestDemoGoneWithItsTerminalUnderAWaitingLeader(t *testing.T) {
	d := startDemoOnPTY(t, "sh", "-c", `trap 'exit 129' HUP; "$0"`)
	d.closeTerminal(t, false)
}
