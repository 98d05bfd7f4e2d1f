package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The fake service managers: this test binary, linked as systemctl, loginctl and launchctl into a
// folder that the tests put first on join's and leave's PATH. Each call is recorded; starting a
// unit really starts its ExecStart (or the plist's ProgramArguments) as a detached process, and
// stopping it sends SIGTERM and waits, as systemd and launchd do — so join and leave run against a
// real agent, started from the very file join wrote.

const fakeConfigFile = "fakesvc.json"

type fakeConfig struct {
	UnitDir     string `json:"unit_dir"`     // where systemctl reads units
	UserManager bool   `json:"user_manager"` // does `systemctl --user` answer?
	Linger      string `json:"linger"`       // loginctl's answer
}

// fakeManager is one test's fake service managers.
type fakeManager struct {
	dir string
	cfg fakeConfig
}

func newFakeManager(t *testing.T, cfg fakeConfig) *fakeManager {
	t.Helper()
	dir := t.TempDir()
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, name := range []string{"systemctl", "loginctl", "launchctl"} {
		require.NoError(t, os.Symlink(exe, filepath.Join(dir, name)))
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, fakeConfigFile), b, 0o600))
	f := &fakeManager{dir: dir, cfg: cfg}
	// Whatever a test leaves running is stopped with it.
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, p := range pids {
			if pid := readPid(p); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return f
}

// calls are the recorded command lines, one per call.
func (f *fakeManager) calls() []string {
	b, _ := os.ReadFile(filepath.Join(f.dir, "calls.log"))
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// serviceLog is what the started service printed.
func (f *fakeManager) serviceLog(name string) string {
	b, _ := os.ReadFile(filepath.Join(f.dir, name+".log"))
	return string(b)
}

// runFakeManager is main for the fake managers; it reports whether argv[0] named one.
func runFakeManager() (int, bool) {
	name := filepath.Base(os.Args[0])
	if name != "systemctl" && name != "loginctl" && name != "launchctl" {
		return 0, false
	}
	dir := filepath.Dir(os.Args[0])
	var cfg fakeConfig
	if b, err := os.ReadFile(filepath.Join(dir, fakeConfigFile)); err == nil {
		_ = json.Unmarshal(b, &cfg)
	}
	args := os.Args[1:]
	if f, err := os.OpenFile(filepath.Join(dir, "calls.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
		fmt.Fprintln(f, strings.Join(append([]string{name}, args...), " "))
		f.Close()
	}
	fail := func(format string, a ...any) (int, bool) {
		fmt.Fprintf(os.Stderr, format+"\n", a...)
		return 1, true
	}
	switch name {
	case "loginctl":
		fmt.Println(cfg.Linger)
		return 0, true
	case "launchctl":
		switch {
		case len(args) == 2 && args[0] == "print":
			return 0, true
		case len(args) == 3 && args[0] == "bootstrap":
			argv, err := plistArgs(args[2])
			if err != nil {
				return fail("Bootstrap failed: 5: Input/output error: %v", err)
			}
			return fakeStart(dir, "ai.llmkube.agent", argv)
		case len(args) == 2 && args[0] == "bootout":
			return fakeStop(dir, filepath.Base(args[1]))
		}
		return fail("launchctl: unknown call %q", args)
	}
	user := len(args) > 0 && args[0] == "--user"
	if user {
		args = args[1:]
		if !cfg.UserManager {
			return fail("Failed to connect to bus: No medium found")
		}
	}
	switch {
	case len(args) == 2 && args[0] == "show":
		fmt.Println("Version=252")
	case len(args) == 1 && args[0] == "daemon-reload":
	case len(args) == 3 && args[0] == "enable" && args[1] == "--now":
		b, err := os.ReadFile(filepath.Join(cfg.UnitDir, args[2]))
		if err != nil {
			return fail("Failed to enable unit: Unit file %s does not exist.", args[2])
		}
		argv, err := execStart(string(b))
		if err != nil {
			return fail("%s: %v", args[2], err)
		}
		return fakeStart(dir, args[2], argv)
	case len(args) == 3 && args[0] == "disable" && args[1] == "--now":
		return fakeStop(dir, args[2])
	default:
		return fail("systemctl: unknown call %q", args)
	}
	return 0, true
}

// fakeStart starts argv detached from the manager (its own session), logging to <name>.log.
func fakeStart(dir, name string, argv []string) (int, bool) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return 1, true
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "Job failed:", err)
		return 1, true
	}
	_ = os.WriteFile(filepath.Join(dir, name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	return 0, true
}

// fakeStop sends SIGTERM and waits for the process to end, as systemctl stop does.
func fakeStop(dir, name string) (int, bool) {
	pidFile := filepath.Join(dir, name+".pid")
	pid := readPid(pidFile)
	if pid <= 0 {
		return 0, true // not running
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			break
		}
		time.Sleep(20 * time.Millisecond) // polling another session's process: no channel to wait on
	}
	_ = os.Remove(pidFile)
	return 0, true
}

func readPid(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// alive says whether pid runs; a zombie (ended, not yet reaped by whoever adopted it) does not.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// execStart parses a unit's ExecStart= the way systemd splits it: words, double quotes with C
// escapes, $$ and %% for a literal $ and %.
func execStart(unit string) ([]string, error) {
	for _, line := range strings.Split(unit, "\n") {
		v, ok := strings.CutPrefix(line, "ExecStart=")
		if !ok {
			continue
		}
		var words []string
		var cur strings.Builder
		inWord, quoted := false, false
		for i := 0; i < len(v); i++ {
			c := v[i]
			switch {
			case quoted && c == '\\' && i+1 < len(v):
				i++
				cur.WriteByte(v[i])
			case c == '"':
				quoted, inWord = !quoted, true
			case !quoted && c == ' ':
				if inWord {
					words = append(words, cur.String())
					cur.Reset()
					inWord = false
				}
			case (c == '$' || c == '%') && i+1 < len(v) && v[i+1] == c:
				i++
				cur.WriteByte(c)
				inWord = true
			default:
				cur.WriteByte(c)
				inWord = true
			}
		}
		if inWord {
			words = append(words, cur.String())
		}
		if len(words) == 0 {
			return nil, fmt.Errorf("empty ExecStart")
		}
		return words, nil
	}
	return nil, fmt.Errorf("no ExecStart= line")
}

// plistArgs reads ProgramArguments from a launchd plist.
func plistArgs(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	var args []string
	var key, text string
	depth, inArgs := 0, false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			depth++
			text = ""
			if tk.Name.Local == "array" && key == "ProgramArguments" {
				inArgs = true
			}
		case xml.CharData:
			text += string(tk)
		case xml.EndElement:
			depth--
			switch {
			case tk.Name.Local == "key":
				key = text
			case tk.Name.Local == "array":
				inArgs = false
			case inArgs && tk.Name.Local == "string":
				args = append(args, text)
			}
		}
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("no ProgramArguments")
	}
	return args, nil
}
