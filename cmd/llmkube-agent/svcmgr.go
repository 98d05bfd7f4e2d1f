package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/assets"
)

// serviceManager is the one service manager a service file is for: systemd's user instance (the
// default on Linux), systemd's system instance (--system), or launchd's per-user domain on macOS.
// It runs the manager's own commands (systemctl, loginctl, launchctl) found on the PATH the
// command was given, and never changes anything before the caller has planned every step.
type serviceManager struct {
	kind    managerKind
	path    string // PATH to find systemctl, loginctl and launchctl on
	user    string // the account the service runs as (loginctl's Linger)
	uid     int    // macOS: the gui/<uid> domain
	timeout time.Duration
}

type managerKind int

const (
	systemdUser managerKind = iota
	systemdSystem
	launchdAgent
)

func (k managerKind) String() string {
	switch k {
	case systemdUser:
		return "systemd (user)"
	case systemdSystem:
		return "systemd (system)"
	}
	return "launchd (user agent)"
}

// unitName is the systemd unit or the launchd job the manager knows the agent by.
func (m serviceManager) unitName() string {
	if m.kind == launchdAgent {
		return assets.LaunchdLabel
	}
	return assets.SystemdUnit
}

func (m serviceManager) domain() string { return "gui/" + strconv.Itoa(m.uid) }

// systemctl is the argument list for systemctl in this manager's scope.
func (m serviceManager) systemctl(args ...string) []string {
	if m.kind == systemdUser {
		return append([]string{"systemctl", "--user"}, args...)
	}
	return append([]string{"systemctl"}, args...)
}

// command runs one manager command and returns its combined output, with the command line and
// the manager's last words in the error.
func (m serviceManager) command(ctx context.Context, argv ...string) (string, error) {
	bin, err := lookPathIn(argv[0], m.path)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	text := strings.TrimSpace(out.String())
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", m.timeout)
		}
		if text != "" {
			return text, fmt.Errorf("`%s`: %w: %s", strings.Join(argv, " "), err, lastLine(text))
		}
		return text, fmt.Errorf("`%s`: %w", strings.Join(argv, " "), err)
	}
	return text, nil
}

// preflight checks that the manager answers, before anything is written. A user manager that
// does not answer is the usual trap on a host reached over SSH without a login session.
func (m serviceManager) preflight(ctx context.Context) error {
	switch m.kind {
	case systemdUser:
		if _, err := m.command(ctx, m.systemctl("show", "--property=Version")...); err != nil {
			return fmt.Errorf("the user's systemd instance does not answer (%v): log in on this host (a desktop or `ssh` login starts it), or run `sudo loginctl enable-linger %s` and log in again; or install a system-wide unit as root with --system", err, m.user)
		}
	case systemdSystem:
		if os.Geteuid() != 0 {
			return errors.New("a system-wide unit (--system) needs root: run it with sudo, or leave --system out for a user unit")
		}
		if _, err := m.command(ctx, m.systemctl("show", "--property=Version")...); err != nil {
			return fmt.Errorf("systemd does not answer (%v): this host does not run systemd as its init", err)
		}
	case launchdAgent:
		if _, err := m.command(ctx, "launchctl", "print", m.domain()); err != nil {
			return fmt.Errorf("launchd's %s domain does not answer (%v): run this in the user's own login session, not over a bare ssh or sudo", m.domain(), err)
		}
	}
	return nil
}

// lingerHint says how to keep a user unit running after logout, when lingering is off.
func (m serviceManager) lingerHint(ctx context.Context) string {
	if m.kind != systemdUser {
		return ""
	}
	out, err := m.command(ctx, "loginctl", "show-user", m.user, "--property=Linger", "--value")
	if err == nil && strings.TrimSpace(out) == "yes" {
		return ""
	}
	return fmt.Sprintf("Lingering is off for %s: the agent stops when %s's last session ends. To keep it running:\n  sudo loginctl enable-linger %s", m.user, m.user, m.user)
}

// start loads the service file at path and starts it now and at every boot or login.
func (m serviceManager) start(ctx context.Context, path string) error {
	if m.kind == launchdAgent {
		_, err := m.command(ctx, "launchctl", "bootstrap", m.domain(), path)
		return err
	}
	if _, err := m.command(ctx, m.systemctl("daemon-reload")...); err != nil {
		return err
	}
	_, err := m.command(ctx, m.systemctl("enable", "--now", assets.SystemdUnit)...)
	return err
}

// stop stops the service and keeps it from starting again. SIGTERM makes the agent leave the mesh
// (peers see it "left") and stop the engines it started.
func (m serviceManager) stop(ctx context.Context) error {
	if m.kind == launchdAgent {
		out, err := m.command(ctx, "launchctl", "bootout", m.domain()+"/"+assets.LaunchdLabel)
		if err != nil && strings.Contains(out, "No such process") {
			return nil // not loaded: nothing to stop
		}
		return err
	}
	_, err := m.command(ctx, m.systemctl("disable", "--now", assets.SystemdUnit)...)
	return err
}

// forget makes the manager drop a service file that was removed.
func (m serviceManager) forget(ctx context.Context) error {
	if m.kind == launchdAgent {
		return nil // bootout already unloaded it
	}
	_, err := m.command(ctx, m.systemctl("daemon-reload")...)
	return err
}

// logs is the command that shows the agent's log.
func (m serviceManager) logs(logDir string) string {
	switch m.kind {
	case systemdUser:
		return "journalctl --user -u " + strings.TrimSuffix(assets.SystemdUnit, ".service") + " -f"
	case systemdSystem:
		return "journalctl -u " + strings.TrimSuffix(assets.SystemdUnit, ".service") + " -f"
	}
	return "tail -f " + strconv.Quote(filepath.Join(logDir, assets.LaunchdLog))
}

// lookPathIn finds an executable on the given PATH (exec.LookPath reads the process's own).
func lookPathIn(name, path string) (string, error) {
	if path == "" {
		path = os.Getenv("PATH")
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // a relative PATH entry would run whatever the current folder holds
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not on PATH: is this host's service manager installed?", name)
}

// lastLine is the last non-empty line of a program's output: usually its reason.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
