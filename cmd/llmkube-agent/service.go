package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/assets"
	"github.com/llmkube/mesh/hwprobe"
	"github.com/llmkube/mesh/internal/atomicfile"
)

// serviceOptions are the flags of service print, service install and join that say what service
// file to make.
type serviceOptions struct {
	goos, user, binary        string
	stateDir, modelsDir, join string
	system                    bool
	dryRun                    bool
	root                      string // install: where "/" is (tests write under a temporary folder)
	extra                     []string
}

func serviceCommand(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "service",
		Short: "Print or install the agent's service file (systemd on Linux, launchd on macOS)",
		Long: `service makes the file that runs the agent as a service: a systemd user unit on Linux
(~/.config/systemd/user/` + assets.SystemdUnit + `; a system unit in /etc/systemd/system with --system),
a launchd agent on macOS (~/Library/LaunchAgents/` + assets.LaunchdPlist + `). The mesh secret is never
written into it: the agent reads its join string from --join-file (default: the state folder's
mesh.json, which ` + "`llmkube-agent init`" + ` writes 0600). Flags after -- are passed to ` + "`llmkube-agent run`" + `.
` + "`llmkube-agent join`" + ` does all of it and starts the service; ` + "`llmkube-agent leave`" + ` undoes it.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(servicePrintCommand(e), serviceInstallCommand(e))
	return cmd
}

// serviceFlags are the flags that place the service file; join takes them too.
func serviceFlags(f *pflag.FlagSet, o *serviceOptions, withDirs bool) {
	f.StringVar(&o.goos, "os", "", "the service manager's OS: linux (systemd) or darwin (launchd) (default: this one)")
	f.BoolVar(&o.system, "system", false, "Linux: a system-wide unit in /etc/systemd/system run as --user (needs root) instead of a user unit")
	f.StringVar(&o.user, "user", "", "with --system: the account the agent runs as (default: $SUDO_USER, else the current user)")
	f.StringVar(&o.binary, "binary", "", "absolute path of llmkube-agent (default: this program)")
	if withDirs {
		f.StringVar(&o.stateDir, "state-dir", "", "state folder (default: the user's, as 'run' picks it)")
		f.StringVar(&o.modelsDir, "models-dir", "", "model store (default: the user's, as 'run' picks it)")
		f.StringVar(&o.join, "join-file", "", "file holding the join string, mode 0600 (default: the state folder's "+state.JoinFile+")")
	}
}

func servicePrintCommand(e env) *cobra.Command {
	o := &serviceOptions{}
	cmd := &cobra.Command{
		Use:   "print [flags] [-- run flags]",
		Short: "Print the service file for this host (or --os)",
		RunE: func(cmd *cobra.Command, args []string) error {
			plan, err := o.planFromArgs(cmd, args, e)
			if err != nil {
				return err
			}
			_, err = e.stdout.Write(plan.content)
			return err
		},
	}
	serviceFlags(cmd.Flags(), o, true)
	return cmd
}

func serviceInstallCommand(e env) *cobra.Command {
	o := &serviceOptions{}
	cmd := &cobra.Command{
		Use:   "install [--dry-run] [flags] [-- run flags]",
		Short: "Write the service file where the service manager looks for it, and print the commands that start it",
		Long: `install writes the service file atomically (mode 0644) and makes the state folder and model
store if they are missing (owned by --user when run as root for a system unit: that unit makes the
rest of the file system read-only, so they must exist). It does not start anything: it prints the
systemctl or launchctl commands to run. ` + "`llmkube-agent join`" + ` also starts it and waits until it has joined.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			plan, err := o.planFromArgs(cmd, args, e)
			if err != nil {
				return err
			}
			if !filepath.IsAbs(o.root) {
				return usageError{fmt.Errorf("--root %q: want an absolute path", o.root)}
			}
			return o.install(plan, e)
		},
	}
	serviceFlags(cmd.Flags(), o, true)
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "print what would be written and where, write nothing")
	cmd.Flags().StringVar(&o.root, "root", "/", "write under this folder instead of / (tests)")
	_ = cmd.Flags().MarkHidden("root")
	return cmd
}

// planFromArgs checks the run flags after "--" (a typo found now, not in a restart loop) and plans
// the service with them.
func (o *serviceOptions) planFromArgs(cmd *cobra.Command, args []string, e env) (servicePlan, error) {
	if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
		return servicePlan{}, usageError{fmt.Errorf("unexpected argument %q: pass run flags after --", args[0])}
	}
	rc := runCommand(e)
	if err := rc.Flags().Parse(args); err != nil {
		return servicePlan{}, usageError{fmt.Errorf("run flags after --: %w", err)}
	}
	if rest := rc.Flags().Args(); len(rest) > 0 {
		return servicePlan{}, usageError{fmt.Errorf("run flags after --: run takes no argument %q", rest[0])}
	}
	o.extra = args
	return o.plan(e)
}

// servicePlan is everything one host's service is: the file, where it goes, and the manager that
// runs it. One planner feeds print, install, join and leave, for systemd and launchd alike.
type servicePlan struct {
	goos    string
	params  assets.ServiceParams
	name    string // the file's name
	path    string // where the manager reads it
	content []byte
	mgr     serviceManager
}

// plan fills ServiceParams from the flags, the run flags and the defaults, and renders the file.
func (o *serviceOptions) plan(e env) (servicePlan, error) {
	goos := o.goos
	if goos == "" {
		goos = runtime.GOOS
	}
	if err := supportedOS(goos); err != nil {
		return servicePlan{}, usageError{fmt.Errorf("--os: %w", err)}
	}
	p := assets.ServiceParams{System: o.system, Binary: o.binary, StateDir: o.stateDir, ModelsDir: o.modelsDir, JoinFile: o.join, ExtraArgs: o.extra}
	if p.Binary == "" {
		exe, err := os.Executable()
		if err == nil {
			p.Binary, err = filepath.EvalSymlinks(exe)
		}
		if err != nil {
			return servicePlan{}, fmt.Errorf("finding this program: %w; give --binary", err)
		}
	}
	mgr := serviceManager{path: e.getenv("PATH"), timeout: 20 * time.Second}
	var dirs hwprobe.Dirs
	var err error
	switch {
	case goos == "darwin":
		dirs, err = o.launchdAgent(e, &p, &mgr)
	case o.system:
		dirs, err = o.systemdSystem(e, &p, &mgr)
	default:
		dirs, err = o.systemdUser(e, p, &mgr)
	}
	if err != nil {
		return servicePlan{}, err
	}
	if p.StateDir == "" {
		p.StateDir = dirs.State
	}
	if p.ModelsDir == "" {
		p.ModelsDir = dirs.Models
	}
	if p.JoinFile == "" {
		p.JoinFile = filepath.Join(p.StateDir, state.JoinFile)
	}
	name, content, err := assets.ServiceUnit(goos, p)
	if err != nil {
		return servicePlan{}, usageError{err}
	}
	dest, err := destination(mgr.kind, name, e)
	if err != nil {
		return servicePlan{}, err
	}
	return servicePlan{goos: goos, params: p, name: name, path: dest, content: content, mgr: mgr}, nil
}

// needDirs reports whether the service's folders come, at least in part, from the defaults.
func needDirs(p assets.ServiceParams) bool { return p.StateDir == "" || p.ModelsDir == "" }

// systemdUser plans a systemd user unit, run as whoever runs this, with this environment's
// default folders.
func (o *serviceOptions) systemdUser(e env, p assets.ServiceParams, mgr *serviceManager) (hwprobe.Dirs, error) {
	if o.user != "" {
		return hwprobe.Dirs{}, usageError{errors.New("--user: a user unit runs as whoever runs join; --system installs a system unit for another account")}
	}
	cur, err := user.Current()
	if err != nil {
		return hwprobe.Dirs{}, fmt.Errorf("finding the current user: %w", err)
	}
	mgr.kind, mgr.user = systemdUser, cur.Username
	if !needDirs(p) {
		return hwprobe.Dirs{}, nil
	}
	dirs, err := defaultDirs(e, "linux")
	if err != nil {
		return hwprobe.Dirs{}, fmt.Errorf("%w: give --state-dir and --models-dir", err)
	}
	return dirs, nil
}

// systemdSystem plans a systemd system unit run as --user, else as the user sudo was run by,
// else as the current user, with that account's default folders.
func (o *serviceOptions) systemdSystem(e env, p *assets.ServiceParams, mgr *serviceManager) (hwprobe.Dirs, error) {
	mgr.kind = systemdSystem
	p.User = o.user
	if p.User == "" {
		p.User = e.getenv("SUDO_USER")
	}
	cur, cerr := user.Current()
	if p.User == "" {
		if cerr != nil {
			return hwprobe.Dirs{}, fmt.Errorf("finding the current user: %w; give --user", cerr)
		}
		p.User = cur.Username
	}
	mgr.user = p.User
	if !needDirs(*p) {
		return hwprobe.Dirs{}, nil
	}
	var dirs hwprobe.Dirs
	var err error
	if cerr == nil && p.User == cur.Username {
		dirs, err = defaultDirs(e, "linux")
	} else {
		// Another account's folders: its home, not this environment's $XDG_DATA_HOME.
		var u *user.User
		if u, err = user.Lookup(p.User); err == nil {
			dirs, err = hwprobe.DefaultDirs("linux", func(string) string { return "" }, u.HomeDir)
		}
	}
	if err != nil {
		return hwprobe.Dirs{}, fmt.Errorf("the default folders of user %q: %w; give --state-dir and --models-dir", p.User, err)
	}
	return dirs, nil
}

// launchdAgent plans a launchd agent, run as the user who loads it, logging to its
// ~/Library/Logs.
func (o *serviceOptions) launchdAgent(e env, p *assets.ServiceParams, mgr *serviceManager) (hwprobe.Dirs, error) {
	if o.user != "" || o.system {
		return hwprobe.Dirs{}, usageError{errors.New("--user, --system: a launchd agent runs as the user who loads it; run this as that user")}
	}
	mgr.kind = launchdAgent
	mgr.uid = os.Getuid()
	if cur, err := user.Current(); err == nil {
		mgr.user = cur.Username
	}
	home, err := homeDir(e)
	if err != nil {
		return hwprobe.Dirs{}, err
	}
	p.LogDir = filepath.Join(home, "Library", "Logs")
	if !needDirs(*p) {
		return hwprobe.Dirs{}, nil
	}
	dirs, err := defaultDirs(e, "darwin")
	if err != nil {
		return hwprobe.Dirs{}, fmt.Errorf("%w: give --state-dir and --models-dir", err)
	}
	return dirs, nil
}

// homeDir is $HOME, else the OS's idea of it.
func homeDir(e env) (string, error) {
	if h := e.getenv("HOME"); filepath.IsAbs(h) {
		return h, nil
	}
	h, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(h) {
		return "", errors.New("no absolute home directory for the service's folders")
	}
	return h, nil
}

// destination is where the service manager looks for the file.
func destination(kind managerKind, name string, e env) (string, error) {
	if kind == systemdSystem {
		return filepath.Join("/etc/systemd/system", name), nil
	}
	home, err := homeDir(e)
	if err != nil {
		return "", err
	}
	if kind == launchdAgent {
		return filepath.Join(home, "Library", "LaunchAgents", name), nil
	}
	config := e.getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(config) {
		config = filepath.Join(home, ".config")
	}
	return filepath.Join(config, "systemd", "user", name), nil
}

// install writes the service file (under --root) and the folders the service needs, then says
// what to run.
func (o *serviceOptions) install(plan servicePlan, e env) error {
	w := e.stdout
	p := plan.params
	dest := filepath.Join(o.root, plan.path)
	if o.dryRun {
		fmt.Fprintf(w, "would write %s (mode 0644):\n\n%s\n", dest, plan.content)
	} else {
		if err := writeServiceFile(dest, plan); err != nil {
			return err
		}
		if err := o.makeDirs(plan); err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %s\n", dest)
	}

	if fi, err := os.Stat(filepath.Join(o.root, p.JoinFile)); errors.Is(err, fs.ErrNotExist) {
		who := ""
		if cur, err := user.Current(); plan.mgr.kind == systemdSystem && (err != nil || cur.Username != p.User) {
			who = "sudo -u " + p.User + " "
		}
		fmt.Fprintf(w, "\nThe join file %s does not exist yet: make a new mesh with\n  %s%s init --state-dir %q\nor put another host's join string in it (mode 0600, readable by the agent's user only).\n",
			p.JoinFile, who, p.Binary, p.StateDir)
	} else if err == nil && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(w, "\nThe join file %s is readable by others (mode %v): the agent refuses it until you run\n  chmod 600 %q\n", p.JoinFile, fi.Mode().Perm(), p.JoinFile)
	}

	unit := strings.TrimSuffix(assets.SystemdUnit, ".service")
	switch plan.mgr.kind {
	case systemdSystem:
		if p.User == "root" {
			fmt.Fprintln(w, "\nThe agent will run as root; --user names a less privileged account.")
		}
		fmt.Fprintf(w, "\nNext, as root:\n  systemctl daemon-reload && systemctl enable --now %s\n", unit)
		fmt.Fprintf(w, "Already running? Then: systemctl daemon-reload && systemctl restart %s\n", unit)
	case systemdUser:
		fmt.Fprintf(w, "\nNext, as %s:\n  systemctl --user daemon-reload && systemctl --user enable --now %s\n", plan.mgr.user, unit)
		fmt.Fprintf(w, "Already running? Then: systemctl --user daemon-reload && systemctl --user restart %s\n", unit)
		fmt.Fprintf(w, "Keep it running after logout: sudo loginctl enable-linger %s\n", plan.mgr.user)
	case launchdAgent:
		fmt.Fprintf(w, "\nNext:\n  launchctl bootstrap gui/$(id -u) %q\n", plan.path)
		fmt.Fprintf(w, "Already loaded? First: launchctl bootout gui/$(id -u)/%s\n", assets.LaunchdLabel)
	}
	fmt.Fprintf(w, "Logs: %s\n", plan.mgr.logs(p.LogDir))
	return nil
}

// writeServiceFile writes the plan's file to dest atomically, mode 0644, making its folder (a
// fresh account has no ~/.config/systemd/user, a fresh Mac no ~/Library/LaunchAgents).
func writeServiceFile(dest string, plan servicePlan) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return fmt.Errorf("making %s: %w", filepath.Dir(dest), err)
	}
	if err := atomicfile.WriteFile(dest, plan.content, 0o644); err != nil {
		if errors.Is(err, fs.ErrPermission) && plan.mgr.kind == systemdSystem {
			return fmt.Errorf("writing %s: %w (system units need root: run it with sudo)", dest, err)
		}
		return fmt.Errorf("writing %s: %w", dest, err)
	}
	return nil
}

// makeDirs makes the state folder and model store when missing, 0700 like `run` would: under
// ProtectSystem=strict the agent cannot make them itself. Run as root for another account, it
// hands every folder it made to that account (the agent refuses folders owned by someone else).
func (o *serviceOptions) makeDirs(plan servicePlan) error {
	p := plan.params
	uid, gid := -1, -1
	if plan.mgr.kind == systemdSystem && os.Geteuid() == 0 {
		u, err := user.Lookup(p.User)
		if err != nil {
			return fmt.Errorf("user %q: %w (the unit's User= must exist on this host)", p.User, err)
		}
		if uid, err = strconv.Atoi(u.Uid); err != nil {
			return fmt.Errorf("user %q: uid %q: %w", p.User, u.Uid, err)
		}
		if gid, err = strconv.Atoi(u.Gid); err != nil {
			return fmt.Errorf("user %q: gid %q: %w", p.User, u.Gid, err)
		}
	}
	for _, d := range []string{p.StateDir, p.ModelsDir} {
		made, err := mkdirAllMade(filepath.Join(o.root, d), 0o700)
		if err != nil {
			return fmt.Errorf("making %s: %w", d, err)
		}
		if uid < 0 {
			continue
		}
		for _, m := range made {
			if err := os.Lchown(m, uid, gid); err != nil {
				return fmt.Errorf("handing %s to %s: %w", m, p.User, err)
			}
		}
	}
	return nil
}

// mkdirAllMade is os.MkdirAll that returns the folders it made, outermost first.
func mkdirAllMade(dir string, perm os.FileMode) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	made := make([]string, 0, len(missing))
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return made, err
		}
		made = append(made, missing[i])
	}
	return made, nil
}
