package assets

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// piParams is a system unit: the explicit --system form.
func piParams() ServiceParams {
	return ServiceParams{
		System:    true,
		Binary:    "/usr/local/bin/llmkube-agent",
		User:      "pi",
		StateDir:  "/home/pi/.local/share/llmkube/agent",
		ModelsDir: "/home/pi/.local/share/llmkube/models",
		JoinFile:  "/home/pi/.local/share/llmkube/agent/mesh.json",
		ExtraArgs: []string{"--runtimes", "hailo-ollama", "--listen", ":7777"},
	}
}

// userParams is the default on Linux: a user unit of whoever runs join.
func userParams() ServiceParams {
	return ServiceParams{
		Binary:    "/home/pi/.local/bin/llmkube-agent",
		StateDir:  "/home/pi/.local/share/llmkube/agent",
		ModelsDir: "/home/pi/.local/share/llmkube/models",
		JoinFile:  "/home/pi/.local/share/llmkube/agent/mesh.json",
		ExtraArgs: []string{"--runtimes", "hailo-ollama"},
	}
}

func macParams() ServiceParams {
	return ServiceParams{
		Binary:    "/opt/homebrew/bin/llmkube-agent",
		StateDir:  "/Users/ann/Library/Application Support/llmkube/agent",
		ModelsDir: "/Users/ann/Library/Application Support/llmkube/models",
		JoinFile:  "/Users/ann/Library/Application Support/llmkube/agent/mesh.json",
		LogDir:    "/Users/ann/Library/Logs",
		ExtraArgs: []string{"--runtimes", "llama-server,ollama"},
	}
}

func wantArgs(p ServiceParams) []string {
	return append([]string{p.Binary, "run", "--state-dir", p.StateDir, "--models-dir", p.ModelsDir, "--join-file", p.JoinFile}, p.ExtraArgs...)
}

// unit is a parsed systemd unit: section → key → values (a key may repeat).
type unit map[string]map[string][]string

// parseUnit reads a unit the way systemd does for our purposes: [Section] headers, key=value
// lines, '#' and ';' comments, blank lines. Anything else is an error.
func parseUnit(t testing.TB, b []byte) unit {
	t.Helper()
	u := unit{}
	section := ""
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "line %d %q is not key=value", i+1, line)
			require.NotEmpty(t, section, "line %d before any section", i+1)
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

func (u unit) get(t testing.TB, section, key string) string {
	t.Helper()
	vs := u[section][key]
	require.Len(t, vs, 1, "[%s] %s", section, key)
	return vs[0]
}

// splitWords splits a systemd command line or path list into words as systemd does: whitespace
// separates, double quotes group, '\' escapes inside them; then %% and (on command lines) $$
// become one character. It fails on anything our renderer must never produce: an unquoted
// backslash or quote, a lone '%' or '$'.
func splitWords(s string, cmdline bool) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, have := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case in && c == '\\':
			i++
			if i == len(s) || (s[i] != '\\' && s[i] != '"') {
				return nil, fmt.Errorf("bad escape at %d", i)
			}
			cur.WriteByte(s[i])
		case c == '"':
			in, have = !in, true
		case in:
			cur.WriteByte(c)
		case c == ' ':
			if have {
				words = append(words, cur.String())
			}
			cur.Reset()
			have = false
		case c == '\\' || c == '\'':
			return nil, fmt.Errorf("unquoted %q at %d", c, i)
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if in {
		return nil, fmt.Errorf("unterminated quote")
	}
	if have {
		words = append(words, cur.String())
	}
	for i, w := range words {
		var out strings.Builder
		for j := 0; j < len(w); j++ {
			special := w[j] == '%' || (cmdline && w[j] == '$')
			if special {
				if j+1 == len(w) || w[j+1] != w[j] {
					return nil, fmt.Errorf("lone %q in %q", w[j], w)
				}
				j++
			}
			out.WriteByte(w[j])
		}
		words[i] = out.String()
	}
	return words, nil
}

func TestSystemdUnit(t *testing.T) {
	p := piParams()
	name, b, err := ServiceUnit("linux", p)
	require.NoError(t, err)
	assert.Equal(t, "llmkube-agent.service", name)
	u := parseUnit(t, b)

	assert.Equal(t, "network-online.target", u.get(t, "Unit", "After"))
	assert.Equal(t, "network-online.target", u.get(t, "Unit", "Wants"))
	for k, v := range map[string]string{
		"Type": "simple", "User": "pi", "Restart": "on-failure", "RestartSec": "5s",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
	} {
		assert.Equal(t, v, u.get(t, "Service", k), k)
	}
	// Devices stay visible: hwprobe finds the Hailo by /dev/hailo*, llama-server needs GPU nodes.
	assert.NotContains(t, u["Service"], "PrivateDevices")
	assert.NotContains(t, u["Service"], "DevicePolicy")
	assert.Contains(t, string(b), "#MemoryMax=", "the cgroup memory limit is documented")
	assert.Equal(t, "multi-user.target", u.get(t, "Install", "WantedBy"))

	args, err := splitWords(u.get(t, "Service", "ExecStart"), true)
	require.NoError(t, err)
	assert.Equal(t, wantArgs(p), args)
	rw, err := splitWords(u.get(t, "Service", "ReadWritePaths"), false)
	require.NoError(t, err)
	assert.Equal(t, []string{"-" + p.StateDir, "-" + p.ModelsDir}, rw)
}

func TestSystemdUserUnit(t *testing.T) {
	p := userParams()
	name, b, err := ServiceUnit("linux", p)
	require.NoError(t, err)
	assert.Equal(t, "llmkube-agent.service", name)
	assert.True(t, Managed(b), "leave recognises the units it wrote")
	u := parseUnit(t, b)
	assert.NotContains(t, u["Service"], "User", "a user unit runs as the user whose manager loads it")
	assert.NotContains(t, u["Unit"], "After", "a user manager has no network-online.target")
	assert.NotContains(t, u["Service"], "ProtectSystem", "sandboxing in a user manager needs user namespaces, which hide device groups")
	for k, v := range map[string]string{"Type": "simple", "Restart": "on-failure", "NoNewPrivileges": "yes"} {
		assert.Equal(t, v, u.get(t, "Service", k), k)
	}
	assert.Equal(t, "default.target", u.get(t, "Install", "WantedBy"))
	args, err := splitWords(u.get(t, "Service", "ExecStart"), true)
	require.NoError(t, err)
	assert.Equal(t, wantArgs(p), args)
	assert.False(t, Managed([]byte("[Service]\nExecStart=/usr/bin/llmkube-agent run\n")), "a hand-written unit is not ours")
}

// Values with spaces, quotes, backslashes, '%' and '$' reach the agent unchanged.
func TestSystemdQuoting(t *testing.T) {
	p := piParams()
	p.StateDir = `/srv/llm kube/50% "state" $HOME\x`
	p.ModelsDir = "/srv/modèles/it's"
	p.ExtraArgs = []string{"--namespaces", "", "--node-name", "${USER}-%h", "--seed=a b"}
	_, b, err := ServiceUnit("linux", p)
	require.NoError(t, err)
	u := parseUnit(t, b)
	args, err := splitWords(u.get(t, "Service", "ExecStart"), true)
	require.NoError(t, err)
	assert.Equal(t, wantArgs(p), args)
	rw, err := splitWords(u.get(t, "Service", "ReadWritePaths"), false)
	require.NoError(t, err)
	assert.Equal(t, []string{"-" + p.StateDir, "-" + p.ModelsDir}, rw)
}

// systemd's own parser accepts the unit, quoting and all, where it is installed.
func TestSystemdVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	p := piParams()
	// verify checks that the program exists and is executable.
	p.Binary, err = exec.LookPath("true")
	require.NoError(t, err)
	p.StateDir = `/srv/llm kube/50% "state" $HOME\x`
	p.ExtraArgs = []string{"--node-name", "${USER}-%h"}
	name, b, err := ServiceUnit("linux", p)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(file, b, 0o644))
	out, err := exec.Command(analyze, "verify", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), name, "systemd-analyze complained about the unit")

	// The user unit, as a user manager reads it.
	u := userParams()
	u.Binary = p.Binary
	name, b, err = ServiceUnit("linux", u)
	require.NoError(t, err)
	file = filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(file, b, 0o644))
	// A user manager needs a runtime folder; a test (or CI) without a login session has none.
	rt := t.TempDir()
	require.NoError(t, os.Chmod(rt, 0o700))
	cmd := exec.Command(analyze, "verify", "--user", file)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+rt)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), name, "systemd-analyze --user complained about the unit")
}

// plist is the part of a launchd plist the tests read: the top dict's keys and values.
type plist struct {
	strs  map[string]string
	bools map[string]bool
	args  []string
}

// parsePlist decodes a plist with encoding/xml (which also proves it well-formed).
func parsePlist(t testing.TB, b []byte) plist {
	t.Helper()
	p := plist{strs: map[string]string{}, bools: map[string]bool{}}
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = true
	var path []string
	var key, text string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		switch tk := tok.(type) {
		case xml.StartElement:
			path = append(path, tk.Name.Local)
			text = ""
			if len(path) == 3 && (tk.Name.Local == "true" || tk.Name.Local == "false") {
				p.bools[key] = tk.Name.Local == "true"
			}
		case xml.CharData:
			text += string(tk)
		case xml.EndElement:
			switch {
			case len(path) == 3 && tk.Name.Local == "key":
				key = text
			case len(path) == 3 && tk.Name.Local == "string":
				p.strs[key] = text
			case len(path) == 4 && key == "ProgramArguments" && tk.Name.Local == "string":
				p.args = append(p.args, text)
			}
			path = path[:len(path)-1]
		}
	}
	require.Empty(t, path, "unclosed elements")
	return p
}

func TestLaunchdPlist(t *testing.T) {
	p := macParams()
	name, b, err := ServiceUnit("darwin", p)
	require.NoError(t, err)
	assert.Equal(t, "ai.llmkube.agent.plist", name)
	pl := parsePlist(t, b)
	assert.Equal(t, "ai.llmkube.agent", pl.strs["Label"])
	assert.Equal(t, wantArgs(p), pl.args)
	assert.True(t, pl.bools["RunAtLoad"])
	assert.Contains(t, string(b), "<key>KeepAlive</key>\n\t<dict>\n\t\t<key>SuccessfulExit</key>\n\t\t<false/>", "restarted on failure, a clean stop stays stopped")
	assert.Contains(t, string(b), "<key>ThrottleInterval</key>")
	assert.True(t, Managed(b))
	assert.Equal(t, "/Users/ann/Library/Logs/llmkube-agent.out.log", pl.strs["StandardOutPath"])
	assert.Equal(t, "/Users/ann/Library/Logs/llmkube-agent.log", pl.strs["StandardErrorPath"])

	// XML's own characters are escaped, not interpreted.
	p.StateDir = `/Users/ann/<state> & "co" 'x'`
	p.ExtraArgs = []string{"--node-name", "</string><string>evil"}
	_, b, err = ServiceUnit("darwin", p)
	require.NoError(t, err)
	assert.Equal(t, wantArgs(p), parsePlist(t, b).args)
}

func TestServiceUnitRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		goos   string
		change func(*ServiceParams)
		want   string
	}{
		"relative binary":     {"linux", func(p *ServiceParams) { p.Binary = "bin/llmkube-agent" }, "binary"},
		"relative state dir":  {"linux", func(p *ServiceParams) { p.StateDir = "state" }, "state dir"},
		"empty models dir":    {"linux", func(p *ServiceParams) { p.ModelsDir = "" }, "models dir"},
		"relative join file":  {"darwin", func(p *ServiceParams) { p.JoinFile = "~/mesh.json" }, "join file"},
		"newline in path":     {"linux", func(p *ServiceParams) { p.StateDir = "/x\nExecStartPre=/bin/sh" }, "control character"},
		"newline in flag":     {"darwin", func(p *ServiceParams) { p.ExtraArgs = []string{"--listen", ":1\n"} }, "control character"},
		"bad UTF-8":           {"linux", func(p *ServiceParams) { p.JoinFile = "/a\xffb" }, "UTF-8"},
		"user with newline":   {"linux", func(p *ServiceParams) { p.User = "pi\nUser=root" }, "user"},
		"user with specifier": {"linux", func(p *ServiceParams) { p.User = "%u" }, "user"},
		"no user":             {"linux", func(p *ServiceParams) { p.User = "" }, "user"},
		"user in a user unit": {"linux", func(p *ServiceParams) { p.System = false }, "a user unit runs as the user"},
		"system on macOS":     {"darwin", func(p *ServiceParams) { p.System = true }, "system-wide service is for Linux"},
		"user on macOS":       {"darwin", func(p *ServiceParams) { p.User = "ann" }, "launchd agent runs as the user"},
		"no log dir on macOS": {"darwin", func(p *ServiceParams) { p.LogDir = "" }, "log dir"},
		"secret in the unit":  {"linux", func(p *ServiceParams) { p.ExtraArgs = []string{"--join-string=llmkube1:x"} }, "secret"},
		"second state dir":    {"linux", func(p *ServiceParams) { p.ExtraArgs = []string{"--state-dir", "/other"} }, "--state-dir"},
		"command separator":   {"linux", func(p *ServiceParams) { p.ExtraArgs = []string{";"} }, "separator"},
		"windows":             {"windows", func(*ServiceParams) {}, "linux (systemd) and darwin (launchd) only"},
	} {
		t.Run(name, func(t *testing.T) {
			p := piParams()
			if tc.goos == "darwin" {
				p = macParams()
			}
			tc.change(&p)
			_, b, err := ServiceUnit(tc.goos, p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, b)
		})
	}
}

// Whatever the values, a rendered unit parses and hands the agent exactly the arguments given;
// a rendered plist is well-formed and does the same.
func FuzzServiceUnit(f *testing.F) {
	for _, s := range []string{"/srv/state", `/a "b" \c`, "/50%/$HOME", "/x\ny", "/</string>&", "rel", "/a\tb", "/é ü"} {
		f.Add(s, "--node-name="+s)
	}
	f.Fuzz(func(t *testing.T, dir, arg string) {
		for _, goos := range []string{"linux", "darwin"} {
			p := piParams()
			if goos == "darwin" {
				p = macParams()
			}
			p.StateDir = dir
			p.ExtraArgs = []string{arg}
			_, b, err := ServiceUnit(goos, p)
			if err != nil {
				continue
			}
			if goos == "darwin" {
				assert.Equal(t, wantArgs(p), parsePlist(t, b).args)
				continue
			}
			u := parseUnit(t, b)
			args, err := splitWords(u.get(t, "Service", "ExecStart"), true)
			require.NoError(t, err)
			assert.Equal(t, wantArgs(p), args)
			rw, err := splitWords(u.get(t, "Service", "ReadWritePaths"), false)
			require.NoError(t, err)
			assert.Equal(t, []string{"-" + p.StateDir, "-" + p.ModelsDir}, rw)
		}
	})
}
