// Package netnslab builds a small LAN out of Linux network namespaces for tests: a hub namespace
// holding a bridge, and one namespace per host wired to it by a veth pair, with real multicast
// between them. Nothing is added to, or sent on, the machine's own interfaces. Hosts have no
// default route — like an offline lab or a Pi cluster with static addresses — only a multicast
// route, so mDNS works. Namespace names carry the test process's PID, so parallel runs never
// collide. Only tests import it.
//
// Programs run inside a host by `ip netns exec` (setns on one thread would not cover the
// goroutines a Go program starts on others), so a test runs real binaries, or re-executes its
// own test binary, as each host.
package netnslab

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmkube/mesh/sim/simtest"
)

// Lab is the namespaces of one test.
type Lab struct {
	t      testing.TB
	prefix string
	subnet int // third octet in 198.18.0.0/15, the benchmarking range: never a real LAN
	n      int
}

var labs atomic.Int32 // labs made by this process, so two labs of one process differ too

// New builds the hub and n host namespaces, numbered 1..n, or skips the test saying why it
// cannot (-short, not root, no iproute2, namespaces not allowed). Everything goes at cleanup.
func New(t testing.TB, n int) *Lab {
	t.Helper()
	if testing.Short() {
		t.Skip("network-namespace test skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("a LAN of network namespaces needs root (run `make test` as root, as CI does)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("a LAN of network namespaces needs iproute2's `ip`, which is not installed")
	}
	k := int(labs.Add(1))
	l := &Lab{t: t, prefix: fmt.Sprintf("lkl%d-%d", os.Getpid(), k), subnet: (os.Getpid() + k) % 250, n: n}
	hub := l.NS(0)
	if err := ip("netns", "add", hub); err != nil {
		t.Skipf("this machine does not allow network namespaces: %v", err)
	}
	t.Cleanup(func() { _ = ip("netns", "del", hub) }) // takes the bridge and the hub's veth ends
	l.must("-n", hub, "link", "add", "br0", "type", "bridge")
	l.must("-n", hub, "link", "set", "br0", "up")
	for i := 1; i <= n; i++ {
		ns := l.NS(i)
		l.must("netns", "add", ns)
		t.Cleanup(func() { _ = ip("netns", "del", ns) })
		l.must("-n", hub, "link", "add", l.port(i), "type", "veth", "peer", "name", "eth0", "netns", ns)
		l.must("-n", hub, "link", "set", l.port(i), "master", "br0", "up")
		l.must("-n", ns, "addr", "add", l.Addr(i)+"/24", "dev", "eth0")
		l.must("-n", ns, "link", "set", "eth0", "up")
		l.must("-n", ns, "link", "set", "lo", "up")
		// No default route: without this, multicast has nowhere to go.
		l.must("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
	}
	return l
}

// Bare adds host i (beyond the n of New) with loopback only: a host with no LAN at all.
func (l *Lab) Bare(i int) {
	ns := l.NS(i)
	l.must("netns", "add", ns)
	l.t.Cleanup(func() { _ = ip("netns", "del", ns) })
	l.must("-n", ns, "link", "set", "lo", "up")
}

// NS is the name of host i's namespace (0 is the hub).
func (l *Lab) NS(i int) string {
	if i == 0 {
		return l.prefix + "-hub"
	}
	return l.prefix + "-" + strconv.Itoa(i)
}

// Addr is host i's IPv4 address on the LAN.
func (l *Lab) Addr(i int) string { return fmt.Sprintf("198.18.%d.%d", l.subnet, i) }

// port is the hub's end of host i's cable.
func (l *Lab) port(i int) string { return "h" + strconv.Itoa(i) }

// Command is name run inside host i's namespace.
func (l *Lab) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", l.NS(i), name}, args...)...)
}

// Cut unplugs host i's cable (its hub port goes down: packets are lost, not refused, as when a
// Wi-Fi link drops); Plug puts it back.
func (l *Lab) Cut(i int) { l.must("-n", l.NS(0), "link", "set", l.port(i), "down") }

// Plug puts host i's cable back.
func (l *Lab) Plug(i int) { l.must("-n", l.NS(0), "link", "set", l.port(i), "up") }

func (l *Lab) must(args ...string) {
	l.t.Helper()
	if err := ip(args...); err != nil {
		l.t.Fatal(err)
	}
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Proc is a program running in a host, its stdout and stderr collected in Out.
type Proc struct {
	Cmd  *exec.Cmd
	Out  simtest.Buffer
	done chan struct{}
	err  error
}

// Start runs name in host i with the test's environment plus env. At cleanup it gets SIGTERM,
// then SIGKILL after 10 s.
func (l *Lab) Start(i int, env []string, name string, args ...string) *Proc {
	l.t.Helper()
	p := &Proc{Cmd: l.Command(i, name, args...), done: make(chan struct{})}
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = &p.Out, &p.Out
	if err := p.Cmd.Start(); err != nil {
		l.t.Fatalf("starting %s in %s: %v", name, l.NS(i), err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	l.t.Cleanup(func() {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Kill ends the program at once (SIGKILL: a crash) and waits for it.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Done is closed when the program has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the program to exit and returns its exit code.
func (p *Proc) Wait() int {
	<-p.done
	return p.Cmd.ProcessState.ExitCode()
}
