package assets

import (
	"bytes"
	"embed"
	"encoding/xml"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"text/template"
	"unicode"
	"unicode/utf8"
)

//go:embed systemd/llmkube-agent.service.tmpl launchd/ai.llmkube.agent.plist.tmpl
var serviceFS embed.FS

// Names of the service files ServiceUnit makes.
const (
	SystemdUnit  = "llmkube-agent.service" // under ~/.config/systemd/user, or /etc/systemd/system
	LaunchdLabel = "ai.llmkube.agent"      // the launchd job's label
	LaunchdPlist = LaunchdLabel + ".plist" // under ~/Library/LaunchAgents
	LaunchdLog   = "llmkube-agent.log"     // launchd: the agent's log (its stderr), under LogDir
	stdoutLog    = "llmkube-agent.out.log" // launchd: under LogDir
	systemdTmpl  = "systemd/" + SystemdUnit + ".tmpl"
	launchdTmpl  = "launchd/" + LaunchdPlist + ".tmpl"
)

// ManagedBy is the line every service file made here carries: `llmkube-agent leave` removes only
// a file that holds it, so a unit someone wrote by hand is named and left alone.
const ManagedBy = "managed-by: llmkube-agent"

// Managed reports whether a service file's content was made by ServiceUnit.
func Managed(content []byte) bool { return bytes.Contains(content, []byte(ManagedBy)) }

// ServiceParams are the host-specific parts of the agent's service file.
type ServiceParams struct {
	System    bool     // Linux: a system unit (User=, hardened, multi-user.target) instead of a user unit
	Binary    string   // absolute path of llmkube-agent
	User      string   // Linux system unit: the account the agent runs as (User=); empty for a user unit and on macOS, which run as whoever loads them
	StateDir  string   // absolute: --state-dir
	ModelsDir string   // absolute: --models-dir
	JoinFile  string   // absolute: --join-file, the 0600 file holding the join string
	LogDir    string   // macOS: absolute folder for stdout and stderr (~/Library/Logs); Linux logs go to the journal
	ExtraArgs []string // more `run` flags, after the ones above
}

// The flags ServiceParams sets itself: in ExtraArgs they would contradict it. --join-string is
// refused outright: the secret must never be written into a service file.
var ownedFlags = []string{"--state-dir", "--models-dir", "--join-file", "--join-string"}

// userName is what User= accepts here: a portable POSIX-style account name (systemd expands % in
// User=, so the strict set also keeps specifiers out).
var userName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}$`)

// ServiceUnit renders the agent's service file for goos: a systemd unit on linux, a launchd
// plist on darwin. It returns the file's name (SystemdUnit or LaunchdPlist) and content. Values
// that would break out of their line or their quoting are refused, never mangled.
func ServiceUnit(goos string, p ServiceParams) (name string, content []byte, err error) {
	if err := p.validate(goos); err != nil {
		return "", nil, err
	}
	args := append([]string{p.Binary, "run", "--state-dir", p.StateDir, "--models-dir", p.ModelsDir, "--join-file", p.JoinFile}, p.ExtraArgs...)
	var (
		tmplName string
		data     any
		funcs    = template.FuncMap{}
	)
	switch goos {
	case "linux":
		name, tmplName = SystemdUnit, systemdTmpl
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = systemdQuote(a, true)
		}
		data = struct {
			System                          bool
			User, ExecStart, ReadWritePaths string
		}{
			System:    p.System,
			User:      p.User,
			ExecStart: strings.Join(quoted, " "),
			// "-": a missing folder is left to the agent to report (see the template).
			ReadWritePaths: systemdQuote("-"+p.StateDir, false) + " " + systemdQuote("-"+p.ModelsDir, false),
		}
	case "darwin":
		name, tmplName = LaunchdPlist, launchdTmpl
		funcs["xml"] = xmlEscape
		data = struct {
			Label                  string
			Args                   []string
			StdoutPath, StderrPath string
		}{LaunchdLabel, args, path.Join(p.LogDir, stdoutLog), path.Join(p.LogDir, LaunchdLog)}
	}
	src, err := serviceFS.ReadFile(tmplName)
	if err != nil {
		return "", nil, err
	}
	t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return "", nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", nil, err
	}
	return name, b.Bytes(), nil
}

func (p ServiceParams) validate(goos string) error {
	var errs []error
	switch goos {
	case "linux":
		switch {
		case p.System && !userName.MatchString(p.User):
			errs = append(errs, fmt.Errorf("user %q: want an account name (letters, digits, '_', '.', '-'; at most 32)", p.User))
		case !p.System && p.User != "":
			errs = append(errs, fmt.Errorf("user %q: a user unit runs as the user whose systemd loads it; a system unit (--system) takes a user", p.User))
		}
	case "darwin":
		if p.System {
			errs = append(errs, errors.New("a system-wide service is for Linux; on macOS the agent is a launchd agent of the user"))
		}
		if p.User != "" {
			errs = append(errs, fmt.Errorf("user %q: a launchd agent runs as the user who loads it; install it as that user", p.User))
		}
		errs = append(errs, absPath("log dir", p.LogDir))
	default:
		return fmt.Errorf("no service file for %q: linux (systemd) and darwin (launchd) only", goos)
	}
	errs = append(errs,
		absPath("binary", p.Binary),
		absPath("state dir", p.StateDir),
		absPath("models dir", p.ModelsDir),
		absPath("join file", p.JoinFile))
	for _, a := range p.ExtraArgs {
		if err := plainText(a); err != nil {
			errs = append(errs, fmt.Errorf("run flag %q: %w", a, err))
			continue
		}
		for _, f := range ownedFlags {
			if a == f || strings.HasPrefix(a, f+"=") {
				if f == "--join-string" {
					errs = append(errs, errors.New("run flag --join-string: the secret must not be written into a service file; it is read from the join file"))
				} else {
					errs = append(errs, fmt.Errorf("run flag %s: set by the service itself; give it as the service's own option", f))
				}
			}
		}
		if a == ";" {
			// systemd reads a lone ";" on a command line as a separator, quoted or not.
			errs = append(errs, errors.New(`run flag ";": not an argument the agent takes, and systemd would read it as a command separator`))
		}
	}
	return errors.Join(errs...)
}

// absPath refuses a path that is empty, relative or not plain text.
func absPath(what, p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%s %q: want an absolute path", what, p)
	}
	if err := plainText(p); err != nil {
		return fmt.Errorf("%s %q: %w", what, p, err)
	}
	return nil
}

// plainText refuses what no quoting makes safe in a unit or a plist: invalid UTF-8 and control
// characters (a newline would start a new directive; XML 1.0 cannot carry most of them at all).
func plainText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return fmt.Errorf("holds the control character %U", r)
		}
	}
	return nil
}

// systemdQuote renders one word of a systemd command line (cmdline) or path list. systemd
// expands %-specifiers everywhere and $VAR on command lines only, so those are doubled; a word
// with anything but plain characters is double-quoted with C-style escapes for '"' and '\'.
func systemdQuote(s string, cmdline bool) string {
	s = strings.ReplaceAll(s, "%", "%%")
	if cmdline {
		s = strings.ReplaceAll(s, "$", "$$")
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+,:=@%$", r)))
	}) < 0 {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}

func xmlEscape(s string) (string, error) {
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		return "", err
	}
	return b.String(), nil
}
