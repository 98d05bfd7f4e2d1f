package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmkube/mesh/internal/netnslab"
)

// The LAN is one hub namespace holding a bridge, and one namespace per host wired to it by a
// veth pair (the hub's end is named after the host, so a link cut is `ip link set <host> down`
// in the hub). Addresses are in 198.18.0.0/15, the benchmarking range that is never a real LAN;
// names carry the test's PID, so parallel runs never collide. Nothing is added to, or sent on,
// the machine's own interfaces: the test reaches the hosts only through sockets it opens inside
// their namespaces (nsDialer), and runs programs there with `ip netns exec`.

type lab struct {
	t      *testing.T
	prefix string
	subnet int // third octet of 198.18.x.0/24
	hub    string
	dir    string
	next   int // last host number given
}

// skipUnlessLAN skips a LAN test outside `make e2e`, or where this machine cannot make the lab.
func skipUnlessLAN(t *testing.T) {
	t.Helper()
	if os.Getenv(gateEnv) == "" {
		t.Skip("the multi-host end-to-end run is `make e2e` (set " + gateEnv + "=1)")
	}
	if r := skipReason(); r != "" {
		t.Skip(r)
	}
}

// newEnv is a LAN test's environment in dir: its lab, and the folder buildPrograms fills.
func newEnv(t *testing.T, dir string) *env {
	return &env{t: t, bin: filepath.Join(dir, "bin"), events: &eventLog{}, lab: newLab(t, dir)}
}

// skipReason says why this machine cannot make the lab, or "" when it can.
func skipReason() string {
	if runtime.GOOS != "linux" {
		return "the multi-host run needs Linux network namespaces; this is " + runtime.GOOS
	}
	if os.Geteuid() != 0 {
		return "the multi-host run needs network namespaces, which need root (CI runs `make e2e` as root)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "the multi-host run needs network namespaces: iproute2's `ip` is not installed"
	}
	return ""
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newLab makes the hub and its bridge, or skips saying why this machine cannot.
func newLab(t *testing.T, dir string) *lab {
	t.Helper()
	if r := skipReason(); r != "" {
		t.Skip(r)
	}
	sweepLabs()
	l := &lab{t: t, prefix: fmt.Sprintf("lke%d", os.Getpid()), subnet: os.Getpid()%250 + 1, dir: dir}
	l.hub = l.prefix + "-hub"
	if err := ipCmd("netns", "add", l.hub); err != nil {
		t.Skipf("this machine does not allow network namespaces: %v", err)
	}
	t.Cleanup(func() { delNS(l.hub) }) // takes the bridge and the hub's veth ends with it
	l.must("-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.must("-n", l.hub, "link", "set", "br0", "up")
	return l
}

func (l *lab) must(args ...string) {
	l.t.Helper()
	if err := ipCmd(args...); err != nil {
		l.t.Fatal(err)
	}
}

// sweepLabs deletes the namespaces of earlier runs whose process is gone (killed before its
// cleanup ran): they are named lke<pid>-<host>, and no other program names namespaces so.
func sweepLabs() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, "lke")
		pidText, _, dash := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || !dash || err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			delNS(name)
		}
	}
}

// delNS ends every process still in a namespace (engines an agent started, a killed agent's
// children) and deletes it.
func delNS(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = ipCmd("netns", "del", ns)
}

// netHost is one namespace on the LAN.
type netHost struct {
	lab  *lab
	Name string // also the hub's end of its veth pair
	NS   string
	Addr string // its address on the LAN
	Dir  string // its files: state, models, logs
	// HTTP reaches addresses as seen from inside the namespace.
	HTTP *http.Client
}

// addHost adds a namespace on the bridge. defaultRoute false makes a host with no default route
// (an offline lab, a Pi cluster with static addresses): only the LAN and multicast routes.
func (l *lab) addHost(name string, defaultRoute bool) *netHost {
	l.t.Helper()
	l.next++
	h := &netHost{lab: l, Name: name, NS: l.prefix + "-" + name, Addr: fmt.Sprintf("198.18.%d.%d", l.subnet, l.next), Dir: filepath.Join(l.dir, name)}
	if err := os.MkdirAll(h.Dir, 0o700); err != nil {
		l.t.Fatal(err)
	}
	l.must("netns", "add", h.NS)
	l.t.Cleanup(func() { delNS(h.NS) })
	l.must("-n", l.hub, "link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
	l.must("-n", l.hub, "link", "set", name, "master", "br0", "up")
	l.must("-n", h.NS, "addr", "add", h.Addr+"/24", "dev", "eth0")
	l.must("-n", h.NS, "link", "set", "eth0", "up")
	l.must("-n", h.NS, "link", "set", "lo", "up")
	// A fresh namespace has no default route: without this, multicast has nowhere to go.
	l.must("-n", h.NS, "route", "add", "224.0.0.0/4", "dev", "eth0")
	if defaultRoute {
		// A router that does not exist is enough: nothing here leaves the LAN, and the kernel
		// picks source addresses from the route alone.
		l.must("-n", h.NS, "route", "add", "default", "via", fmt.Sprintf("198.18.%d.254", l.subnet))
	}
	h.HTTP = &http.Client{Transport: &http.Transport{DialContext: nsDialer(h.NS), MaxIdleConnsPerHost: 8}}
	return h
}

// setLink cuts (false) or restores (true) the host's link to the bridge, from the hub's side:
// the host sees its carrier go, as when a cable is pulled.
func (h *netHost) setLink(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ipCmd("-n", h.lab.hub, "link", "set", h.Name, state)
}

// delayCable runs the host's cable through a delay line (e2e/internal/delayline, the program
// prog): unhooked from the bridge, its hub end is joined to a new veth pair on the bridge by the
// line, which holds each frame delay, each way, as netem on both ends of the cable would (this
// kernel has no netem). It stops with the test.
func (h *netHost) delayCable(prog string, delay time.Duration) error {
	hub := &netHost{lab: h.lab, Name: "hub", NS: h.lab.hub, Dir: h.lab.dir}
	line, bridged := h.Name+"-d", h.Name+"-b"
	for _, args := range [][]string{
		{"-n", hub.NS, "link", "add", "dev", line, "type", "veth", "peer", "name", bridged},
		{"-n", hub.NS, "link", "set", bridged, "master", "br0", "up"},
		{"-n", hub.NS, "link", "set", line, "up"},
		{"-n", hub.NS, "link", "set", h.Name, "nomaster"},
	} {
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	_, err := hub.spawn("delayline-"+h.Name, nil, prog, "-a", h.Name, "-b", line, "-delay", delay.String())
	return err
}

// nsDialer dials from inside the network namespace ns: a socket stays in the namespace it was
// made in (netnslab.Enter).
func nsDialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = netnslab.Enter(ns, func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// proc is a program running in a host's namespace, its output in a log file.
type proc struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// spawn starts bin with args inside the host's namespace. The process is stopped (SIGTERM, then
// SIGKILL after 5 s) at cleanup if still running.
func (h *netHost) spawn(name string, env []string, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(h.Dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s %s: %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), h.NS, filepath.Base(bin), strings.Join(args, " "))
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS, bin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = h.Dir
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	h.lab.t.Cleanup(func() { p.stop(5 * time.Second) })
	return p, nil
}

// stop sends SIGTERM and waits, killing after grace.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail is the end of the program's log, for a failure message.
func (p *proc) tail(lines int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// run runs bin with args inside the namespace to its end and returns stdout, stderr and the
// exit code (-1 when it could not run or was killed by ctx).
func (h *netHost) run(ctx context.Context, env []string, bin string, args ...string) (stdout, stderr string, code int, err error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, bin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = h.Dir
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return o.String(), e.String(), 0, nil
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return o.String(), e.String(), ee.ExitCode(), nil
	}
	return o.String(), e.String(), -1, err
}

// eventually polls cond every 50 ms until it holds or timeout passes; it returns how long it
// took, or the last reason cond gave.
func eventually(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) (bool, string)) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := "never checked"
	for {
		ok, why := cond(ctx)
		if ok {
			return time.Since(start), nil
		}
		// A look cut short by the deadline says nothing of the condition: keep the one before.
		if why != "" && (ctx.Err() == nil || last == "never checked") {
			last = why
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("not within %s: %s", timeout, last)
		case <-tick.C:
		}
	}
}
