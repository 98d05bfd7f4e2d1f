package main

import (
	"bytes"
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runEnv runs the command line in process with the given environment.
func runEnv(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return vars[k] }, &out, &errb)
	return code, out.String(), errb.String()
}

// unitLines maps each key=value line of a unit to its value (the keys the tests read appear once).
func unitLines(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}

func currentUser(t *testing.T) *user.User {
	t.Helper()
	u, err := user.Current()
	require.NoError(t, err)
	return u
}

func TestServicePrintLinux(t *testing.T) {
	code, out, errOut := runCmd(t, "service", "print", "--os", "linux", "--system", "--user", "pi",
		"--binary", "/usr/local/bin/llmkube-agent", "--state-dir", "/srv/llm kube/agent", "--models-dir", "/srv/models",
		"--", "--runtimes", "hailo-ollama", "--listen", ":7777")
	require.Equal(t, exitOK, code, errOut)
	u := unitLines(out)
	assert.Equal(t, "pi", u["User"])
	assert.Equal(t, `/usr/local/bin/llmkube-agent run --state-dir "/srv/llm kube/agent" --models-dir /srv/models --join-file "/srv/llm kube/agent/mesh.json" --runtimes hailo-ollama --listen :7777`, u["ExecStart"])
	assert.Equal(t, `"-/srv/llm kube/agent" -/srv/models`, u["ReadWritePaths"])
	assert.Equal(t, "simple", u["Type"])
}

// Without flags the folders are the ones `run` would pick for the user, and the binary is this one.
func TestServicePrintDefaults(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	exe, err = filepath.EvalSymlinks(exe)
	require.NoError(t, err)

	// On Linux the default is a user unit: no User=, the user's own folders.
	code, out, errOut := runEnv(t, map[string]string{"HOME": "/home/x", "XDG_DATA_HOME": "/data"}, "service", "print", "--os", "linux")
	require.Equal(t, exitOK, code, errOut)
	u := unitLines(out)
	assert.NotContains(t, u, "User")
	assert.Equal(t, "default.target", u["WantedBy"])
	assert.Equal(t, exe+" run --state-dir /data/llmkube/agent --models-dir /data/llmkube/models --join-file /data/llmkube/agent/mesh.json", u["ExecStart"])

	// A system unit runs as the current user unless told otherwise…
	code, out, errOut = runEnv(t, map[string]string{"HOME": "/home/x", "XDG_DATA_HOME": "/data"}, "service", "print", "--os", "linux", "--system")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, currentUser(t).Username, unitLines(out)["User"])

	// …and under sudo it is for the user who ran sudo, in that user's home.
	code, out, errOut = runEnv(t, map[string]string{"HOME": "/home/x", "XDG_DATA_HOME": "/data", "SUDO_USER": "nobody"}, "service", "print", "--os", "linux", "--system")
	if nobody, err := user.Lookup("nobody"); err == nil {
		require.Equal(t, exitOK, code, errOut)
		u = unitLines(out)
		assert.Equal(t, "nobody", u["User"])
		assert.Contains(t, u["ExecStart"], "--state-dir "+filepath.Join(nobody.HomeDir, ".local/share/llmkube/agent"))
	}

	code, out, errOut = runEnv(t, map[string]string{"HOME": "/Users/ann"}, "service", "print", "--os", "darwin")
	require.Equal(t, exitOK, code, errOut)
	for _, want := range []string{
		"<string>" + exe + "</string>",
		"<string>/Users/ann/Library/Application Support/llmkube/agent</string>",
		"<string>/Users/ann/Library/Application Support/llmkube/agent/mesh.json</string>",
		"<string>/Users/ann/Library/Logs/llmkube-agent.log</string>",
	} {
		assert.Contains(t, out, want)
	}
}

func TestServicePrintRefuses(t *testing.T) {
	base := []string{"service", "print", "--os", "linux", "--system", "--user", "pi", "--binary", "/usr/bin/llmkube-agent", "--state-dir", "/srv/s", "--models-dir", "/srv/m"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"relative state dir":  {[]string{"--state-dir", "state"}, "absolute"},
		"relative binary":     {[]string{"--binary", "llmkube-agent"}, "absolute"},
		"newline":             {[]string{"--join-file", "/srv/j\nUser=root"}, "control character"},
		"bad user":            {[]string{"--user", "pi root"}, "user"},
		"secret in the unit":  {[]string{"--", "--join-string", "x"}, "secret"},
		"unknown run flag":    {[]string{"--", "--no-such-flag"}, "unknown flag"},
		"run argument":        {[]string{"--", "--listen", ":1", "stray"}, "stray"},
		"argument before --":  {[]string{"stray"}, "after --"},
		"other OS":            {[]string{"--os", "windows"}, "not supported"},
		"user on macOS":       {[]string{"--os", "darwin"}, "launchd agent runs as the user"},
		"user without system": {[]string{"--system=false"}, "a user unit runs as whoever runs join"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runEnv(t, map[string]string{"HOME": "/Users/ann"}, append(append([]string{}, base...), tc.args...)...)
			assert.Equal(t, exitUsage, code, errOut)
			assert.Contains(t, errOut, tc.want)
			assert.Empty(t, out)
		})
	}
}

func TestServiceInstallLinux(t *testing.T) {
	root := t.TempDir()
	me := currentUser(t).Username
	args := []string{"service", "install", "--root", root, "--os", "linux", "--system", "--user", me,
		"--binary", "/usr/local/bin/llmkube-agent", "--state-dir", "/srv/llmkube/agent", "--models-dir", "/srv/llmkube/models"}

	// --dry-run writes nothing.
	code, out, errOut := runCmd(t, append(append([]string{}, args...), "--dry-run")...)
	require.Equal(t, exitOK, code, errOut)
	dest := filepath.Join(root, "etc/systemd/system/llmkube-agent.service")
	assert.Contains(t, out, "would write "+dest+" (mode 0644)")
	assert.Contains(t, out, "ExecStart=/usr/local/bin/llmkube-agent run")
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	assert.Empty(t, entries)

	code, out, errOut = runCmd(t, args...)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "wrote "+dest)
	assert.Contains(t, out, "systemctl daemon-reload && systemctl enable --now llmkube-agent")
	assert.Contains(t, out, "The join file /srv/llmkube/agent/mesh.json does not exist yet")
	first, err := os.Stat(dest)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), first.Mode().Perm())
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	_, printed, _ := runCmd(t, append([]string{"service", "print"}, args[4:]...)...)
	assert.Equal(t, printed, string(got), "install writes what print shows")

	// The folders the hardened unit needs exist, private, as `run` makes them.
	for _, d := range []string{"srv/llmkube/agent", "srv/llmkube/models"} {
		fi, err := os.Stat(filepath.Join(root, d))
		require.NoError(t, err)
		assert.True(t, fi.IsDir())
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), d)
	}

	// Installing again replaces the file by a rename (a new file, never a half-written one)
	// and leaves no temporary file behind.
	require.NoError(t, os.WriteFile(filepath.Join(root, "srv/llmkube/agent/mesh.json"), []byte("x"), 0o644))
	code, out, errOut = runCmd(t, append(append([]string{}, args...), "--", "--runtimes", "ollama")...)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "chmod 600", "a join file others can read is pointed out")
	second, err := os.Stat(dest)
	require.NoError(t, err)
	assert.False(t, os.SameFile(first, second), "replaced in place rather than renamed over")
	got, err = os.ReadFile(dest)
	require.NoError(t, err)
	assert.Contains(t, string(got), "--runtimes ollama")
	entries, err = os.ReadDir(filepath.Dir(dest))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "llmkube-agent.service", entries[0].Name())
}

func TestServiceInstallDarwin(t *testing.T) {
	root := t.TempDir()
	code, out, errOut := runEnv(t, map[string]string{"HOME": "/Users/ann"}, "service", "install", "--root", root, "--os", "darwin",
		"--binary", "/opt/homebrew/bin/llmkube-agent")
	require.Equal(t, exitOK, code, errOut)
	dest := filepath.Join(root, "Users/ann/Library/LaunchAgents/ai.llmkube.agent.plist")
	fi, err := os.Stat(dest)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	assert.Contains(t, string(got), "<string>/Users/ann/Library/Application Support/llmkube/agent/mesh.json</string>")
	assert.Contains(t, out, `launchctl bootstrap gui/$(id -u) "/Users/ann/Library/LaunchAgents/ai.llmkube.agent.plist"`)
	assert.NotContains(t, out, "launchctl load", "the legacy subcommand")
	assert.NotContains(t, out, "sudo")
	_, err = os.Stat(filepath.Join(root, "Users/ann/Library/Application Support/llmkube/agent"))
	assert.NoError(t, err, "the state folder is made")
}

// The default on Linux: a user unit under $XDG_CONFIG_HOME/systemd/user, started with systemctl --user.
func TestServiceInstallLinuxUser(t *testing.T) {
	root := t.TempDir()
	vars := map[string]string{"HOME": "/home/ann", "XDG_CONFIG_HOME": "/home/ann/.config", "XDG_DATA_HOME": "/home/ann/.local/share"}
	code, out, errOut := runEnv(t, vars, "service", "install", "--root", root, "--os", "linux", "--binary", "/home/ann/bin/llmkube-agent")
	require.Equal(t, exitOK, code, errOut)
	dest := filepath.Join(root, "home/ann/.config/systemd/user/llmkube-agent.service")
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	assert.NotContains(t, unitLines(string(got)), "User")
	assert.Contains(t, out, "systemctl --user daemon-reload && systemctl --user enable --now llmkube-agent")
	assert.Contains(t, out, "loginctl enable-linger")
	assert.Contains(t, out, "journalctl --user -u llmkube-agent")
	assert.NotContains(t, out, "systemctl daemon-reload", "the system manager's form")
}
