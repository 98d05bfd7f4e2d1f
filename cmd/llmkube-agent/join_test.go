package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/assets"
)

// firstHost makes a mesh with init and runs its first agent in process; it returns the join
// string and that agent.
func firstHost(t *testing.T, tmp string) (string, *started) {
	t.Helper()
	code, out, errOut := runCmd(t, "init", "--mesh-id", "home", "--state-dir", filepath.Join(tmp, "a"), "--allow-temp-store")
	require.Equal(t, exitOK, code, errOut)
	join := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "join string: ", 2)[1], "\n", 2)[0])
	a := startInProcess(t, "--state-dir", filepath.Join(tmp, "a"), "--models-dir", filepath.Join(tmp, "am"), "--node-name", "alpha",
		"--allow-temp-store", "--no-mdns", "--bind", "127.0.0.1", "--gossip-port", "0", "--mesh-profile", "local",
		"--runtimes", "ollama", "--ollama-url", "http://127.0.0.1:1")
	require.NotEmpty(t, a.gossip)
	return join, a
}

// freePort is a loopback port free for TCP and UDP just now.
func freePort(t *testing.T) string {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		ln.Close()
		if err == nil {
			pc.Close()
			return strconv.Itoa(port)
		}
	}
}

// userHome is a user's environment on the joining host: its own folders, the fake managers first
// on PATH.
func userHome(t *testing.T, tmp string, f *fakeManager) map[string]string {
	home := filepath.Join(tmp, "home")
	require.NoError(t, os.MkdirAll(home, 0o700))
	return map[string]string{
		"HOME": home, "XDG_CONFIG_HOME": filepath.Join(home, ".config"), "XDG_DATA_HOME": filepath.Join(home, ".local", "share"),
		"PATH": f.dir + ":/usr/bin:/bin",
	}
}

// joinArgs keeps the joining agent on loopback, without mDNS, with the llama-server simulator.
func joinArgs(join, seed, apiPort, gossipPort string) []string {
	return []string{"join", join, "--binary", bins.agent, "--allow-temp-store", "--node-name", "beta",
		"--listen", "127.0.0.1:" + apiPort, "--bind", "127.0.0.1", "--gossip-port", gossipPort, "--no-mdns", "--mesh-profile", "local",
		"--join", seed, "--runtimes", "llama-server", "--llama-server", bins.llamaSim, "--health-interval", "100ms", "--timeout", "30s"}
}

func memberLiveness(t *testing.T, c *apiclient.Client, name string) api.Liveness {
	live, _ := memberLivenessWhy(c, name)
	return live
}

func memberLivenessWhy(c *apiclient.Client, name string) (api.Liveness, string) {
	v, err := c.Mesh(context.Background())
	if err != nil {
		return "", err.Error()
	}
	for _, m := range v.Members {
		if m.Name == name {
			return m.Liveness, m.Reason
		}
	}
	return "", "not a member"
}

// requireLeftGracefully waits until c's agent shows name left, after that host's leave
// returned: its leave notice may still be in flight to c, so name may show alive until it
// lands, but never anything else (unreachable, suspect, dead) on the way.
func requireLeftGracefully(t *testing.T, c *apiclient.Client, name string) {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		live, why := memberLivenessWhy(c, name)
		if len(seen) == 0 || !strings.HasPrefix(seen[len(seen)-1], string(live)+" ") {
			seen = append(seen, fmt.Sprintf("%s (%s)", live, why))
		}
		if live == api.Left {
			break
		}
		if live != api.Alive || time.Now().After(deadline) {
			require.Failf(t, "a graceful leave, not a death", "%s was shown: %s", name, strings.Join(seen, " → "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// From a join string to a running, joined agent under a systemd user unit, and back with leave.
func TestJoinAndLeaveUserUnit(t *testing.T) {
	tmp := t.TempDir()
	join, alpha := firstHost(t, tmp)
	me := currentUser(t).Username
	unitDir := filepath.Join(tmp, "home", ".config", "systemd", "user")
	fake := newFakeManager(t, fakeConfig{UnitDir: unitDir, UserManager: true, Linger: "no"})
	vars := userHome(t, tmp, fake)
	apiPort := freePort(t)

	code, out, errOut := runEnv(t, vars, joinArgs(join, alpha.gossip, apiPort, freePort(t))...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s\nservice log:\n%s", out, errOut, fake.serviceLog("llmkube-agent.service"))
	assert.Contains(t, out, `joined mesh "home": alpha`)
	assert.Contains(t, out, "sudo loginctl enable-linger "+me, "lingering is off: the agent would die at logout")
	assert.Contains(t, out, "Undo:  llmkube-agent leave")
	assert.Contains(t, out, "journalctl --user -u llmkube-agent")
	assert.Equal(t, []string{
		"systemctl --user show --property=Version",
		"systemctl --user daemon-reload",
		"systemctl --user enable --now llmkube-agent.service",
		"loginctl show-user " + me + " --property=Linger --value",
	}, fake.calls())

	unit, err := os.ReadFile(filepath.Join(unitDir, "llmkube-agent.service"))
	require.NoError(t, err)
	assert.True(t, assets.Managed(unit))
	assert.NotContains(t, string(unit), "User=")
	assert.Contains(t, string(unit), "--node-name=beta")
	assert.NotContains(t, string(unit), join[10:], "the secret is never in the unit")
	stateDir := filepath.Join(vars["XDG_DATA_HOME"], "llmkube", "agent")
	fi, err := os.Stat(filepath.Join(stateDir, "mesh.json"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// The new host is in the mesh, and runs a model.
	ca := adminClient(t, alpha.api, filepath.Join(tmp, "a"))
	assert.Equal(t, api.Alive, memberLiveness(t, ca, "beta"))
	beta := apiclient.New("http://127.0.0.1:"+apiPort, ca.Token)
	ctx := context.Background()
	p, err := beta.Place(ctx, api.PlacementRequest{Source: tinyGGUF(t, tmp, "tiny")})
	require.NoError(t, err)
	p, err = beta.WaitPlacement(ctx, p.ID, 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, api.StateReady, p.State)
	require.NotEmpty(t, p.Engine)

	// Joining twice is refused, naming what is there.
	code, _, errOut = runEnv(t, vars, joinArgs(join, alpha.gossip, freePort(t), freePort(t))...)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "already joined")

	// leave: the agent leaves gracefully (peers see "left"), its engine stops, the unit goes.
	before := len(fake.calls())
	code, out, errOut = runEnv(t, vars, "leave")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Equal(t, []string{
		"systemctl --user show --property=Version",
		"systemctl --user disable --now llmkube-agent.service",
		"systemctl --user daemon-reload",
	}, fake.calls()[before:])
	assert.NoFileExists(t, filepath.Join(unitDir, "llmkube-agent.service"))
	requireLeftGracefully(t, ca, "beta")
	_, err = http.Get("http://" + p.Engine + "/health")
	assert.Error(t, err, "the engine the agent started is gone")
	assert.DirExists(t, filepath.Join(vars["XDG_DATA_HOME"], "llmkube", "models"), "the model store is kept without --purge")
	assert.Contains(t, out, "--purge deletes them")

	// Nothing left to leave; --purge still cleans the folders up.
	code, out, errOut = runEnv(t, vars, "leave", "--purge")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "nothing to leave")
	assert.NoDirExists(t, filepath.Join(vars["XDG_DATA_HOME"], "llmkube", "models"))
	assert.NoDirExists(t, stateDir)
	assert.Contains(t, out, "deleted")
}

// Every check runs before anything is written: a refused join leaves the host as it was.
func TestJoinRefusesBeforeWriting(t *testing.T) {
	tmp := t.TempDir()
	join, alpha := firstHost(t, tmp)
	shared := filepath.Join(tmp, "shared")
	require.NoError(t, os.Mkdir(shared, 0o700))
	require.NoError(t, os.Chmod(shared, 0o777))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { taken.Close() })

	for name, tc := range map[string]struct {
		userManager bool
		args        []string
		want        string
	}{
		"user manager down":   {false, nil, "the user's systemd instance does not answer"},
		"engine missing":      {true, []string{"--llama-server", filepath.Join(tmp, "no-such-llama-server")}, "not usable here"},
		"daemon missing":      {true, []string{"--runtimes", "ollama", "--ollama-url", "http://127.0.0.1:1"}, "ollama is not installed"},
		"world-writable":      {true, []string{"--models-dir", filepath.Join(shared, "models")}, "writable by group or others"},
		"port in use":         {true, []string{"--listen", taken.Addr().String()}, "is taken"},
		"secret in the flags": {true, []string{"--join-string", join}, "--join-string"},
	} {
		t.Run(name, func(t *testing.T) {
			sub := t.TempDir()
			unitDir := filepath.Join(sub, "home", ".config", "systemd", "user")
			fake := newFakeManager(t, fakeConfig{UnitDir: unitDir, UserManager: tc.userManager, Linger: "yes"})
			vars := userHome(t, sub, fake)
			args := append(joinArgs(join, alpha.gossip, freePort(t), freePort(t)), tc.args...)
			code, out, errOut := runEnv(t, vars, args...)
			assert.NotEqual(t, exitOK, code, out)
			assert.Contains(t, errOut, tc.want)
			entries, err := os.ReadDir(vars["HOME"])
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing was written")
			assert.False(t, slices.ContainsFunc(fake.calls(), func(c string) bool { return strings.Contains(c, "enable") }), "nothing was started")
		})
	}

	// A unit join did not write is named and left alone, by join and by leave.
	unitDir := filepath.Join(tmp, "own", "home", ".config", "systemd", "user")
	require.NoError(t, os.MkdirAll(unitDir, 0o755))
	own := []byte("[Service]\nExecStart=/usr/local/bin/llmkube-agent run\n")
	require.NoError(t, os.WriteFile(filepath.Join(unitDir, "llmkube-agent.service"), own, 0o644))
	fake := newFakeManager(t, fakeConfig{UnitDir: unitDir, UserManager: true, Linger: "yes"})
	vars := userHome(t, filepath.Join(tmp, "own"), fake)
	code, _, errOut := runEnv(t, vars, joinArgs(join, alpha.gossip, freePort(t), freePort(t))...)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "not written by llmkube-agent")
	code, _, errOut = runEnv(t, vars, "leave")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "left alone")
	got, err := os.ReadFile(filepath.Join(unitDir, "llmkube-agent.service"))
	require.NoError(t, err)
	assert.Equal(t, own, got)
	assert.False(t, slices.ContainsFunc(fake.calls(), func(c string) bool { return strings.Contains(c, "disable") }))
}

// macOS: a launchd agent in ~/Library/LaunchAgents, bootstrapped into gui/<uid>. Only detected
// runtimes that are missing do not stop join, and join says so.
func TestJoinAndLeaveLaunchd(t *testing.T) {
	tmp := t.TempDir()
	join, alpha := firstHost(t, tmp)
	fake := newFakeManager(t, fakeConfig{})
	vars := userHome(t, tmp, fake)
	apiPort := freePort(t)
	args := []string{"join", join, "--os", "darwin", "--binary", bins.agent, "--allow-temp-store", "--node-name", "mac",
		"--listen", "127.0.0.1:" + apiPort, "--bind", "127.0.0.1", "--gossip-port", freePort(t), "--no-mdns", "--mesh-profile", "local",
		"--join", alpha.gossip, "--llama-server", filepath.Join(tmp, "no-llama-server"), "--ollama-url", "http://127.0.0.1:1", "--hailo-url", "http://127.0.0.1:1"}
	code, out, errOut := runEnv(t, vars, args...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s\nservice log:\n%s", out, errOut, fake.serviceLog("ai.llmkube.agent"))
	plist := filepath.Join(vars["HOME"], "Library", "LaunchAgents", "ai.llmkube.agent.plist")
	uid := strconv.Itoa(os.Getuid())
	assert.Equal(t, []string{"launchctl print gui/" + uid, "launchctl bootstrap gui/" + uid + " " + plist}, fake.calls())
	assert.Contains(t, out, `joined mesh "home": alpha`)
	assert.Contains(t, out, "ollama: nothing answers at http://127.0.0.1:1; the agent uses it once it does")
	assert.Contains(t, out, "llama-server: not found, so that runtime is off", "a missing engine the user did not select does not stop join")
	assert.Contains(t, out, filepath.Join(vars["HOME"], "Library", "Logs", "llmkube-agent.log"))
	assert.NotContains(t, out, "loginctl")

	code, out, errOut = runEnv(t, vars, "leave", "--os", "darwin")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, fake.calls(), "launchctl bootout gui/"+uid+"/ai.llmkube.agent")
	assert.NoFileExists(t, plist)
	ca := adminClient(t, alpha.api, filepath.Join(tmp, "a"))
	requireLeftGracefully(t, ca, "mac")
}

// Against the real user systemd of whoever runs the test, opt-in: it installs, starts, checks and
// removes ~/.config/systemd/user/llmkube-agent.service. LLMKUBE_TEST_SYSTEMD_USER=1 to run it.
func TestJoinLiveSystemdUser(t *testing.T) {
	if os.Getenv("LLMKUBE_TEST_SYSTEMD_USER") != "1" {
		t.Skip("opt-in: LLMKUBE_TEST_SYSTEMD_USER=1 installs and removes a real systemd user unit")
	}
	tmp := t.TempDir()
	join, alpha := firstHost(t, tmp)
	apiPort := freePort(t)
	args := []string{"join", join, "--binary", bins.agent, "--allow-temp-store", "--node-name", "live",
		"--state-dir", filepath.Join(tmp, "state"), "--models-dir", filepath.Join(tmp, "models"),
		"--listen", "127.0.0.1:" + apiPort, "--bind", "127.0.0.1", "--gossip-port", freePort(t), "--no-mdns", "--mesh-profile", "local",
		"--join", alpha.gossip, "--runtimes", "ollama", "--ollama-url", "http://127.0.0.1:1", "--timeout", "60s"}
	var o, eb strings.Builder
	code := run(context.Background(), args, os.Getenv, &o, &eb)
	out, errOut := o.String(), eb.String()
	t.Cleanup(func() {
		run(context.Background(), []string{"leave", "--state-dir", filepath.Join(tmp, "state")}, os.Getenv, io.Discard, io.Discard)
	})
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	active, err := exec.Command("systemctl", "--user", "is-active", "llmkube-agent.service").Output()
	require.NoError(t, err)
	assert.Equal(t, "active", strings.TrimSpace(string(active)))
	o.Reset()
	eb.Reset()
	code = run(context.Background(), []string{"leave", "--state-dir", filepath.Join(tmp, "state")}, os.Getenv, &o, &eb)
	out, errOut = o.String(), eb.String()
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	ca := adminClient(t, alpha.api, filepath.Join(tmp, "a"))
	requireLeftGracefully(t, ca, "live")
}

// A host that finds no peer: the agent runs, join exits 1 and says why, with the agent's doctor.
func TestJoinWithoutPeersShowsTheDoctor(t *testing.T) {
	tmp := t.TempDir()
	code, out, errOut := runCmd(t, "init", "--mesh-id", "lonely", "--state-dir", filepath.Join(tmp, "a"), "--allow-temp-store")
	require.Equal(t, exitOK, code, errOut)
	join := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "join string: ", 2)[1], "\n", 2)[0])
	fake := newFakeManager(t, fakeConfig{UnitDir: filepath.Join(tmp, "home", ".config", "systemd", "user"), UserManager: true, Linger: "yes"})
	vars := userHome(t, tmp, fake)
	args := append(joinArgs(join, "127.0.0.1:"+freePort(t), freePort(t), freePort(t)), "--peers-timeout", "2s")
	code, out, errOut = runEnv(t, vars, args...)
	assert.Equal(t, exitError, code, out)
	assert.Contains(t, errOut, `found no other member of mesh "lonely"`)
	assert.Contains(t, out, "What the doctor sees:")
	assert.Contains(t, out, "fix: ", "the agent's findings, each with its fix")
	assert.NotContains(t, out, "could not be asked")
	assert.Contains(t, out, "Undo:  llmkube-agent leave")
	code, _, errOut = runEnv(t, vars, "leave")
	assert.Equal(t, exitOK, code, errOut)
}

// The first host of a mesh (a Pi beside a laptop): a join string from init, no seed and no
// mDNS peer. join succeeds and says the host is the first, without waiting 30 s for nobody.
// A host whose seed does not answer gets a warning with the doctor, and still succeeds.
func TestJoinFirstHostSucceeds(t *testing.T) {
	tmp := t.TempDir()
	code, out, errOut := runCmd(t, "init", "--mesh-id", "first", "--state-dir", filepath.Join(tmp, "a"), "--allow-temp-store")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "next:        llmkube-agent join JOIN-STRING, on this host", "init names the next step")
	join := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "join string: ", 2)[1], "\n", 2)[0])
	fake := newFakeManager(t, fakeConfig{UnitDir: filepath.Join(tmp, "home", ".config", "systemd", "user"), UserManager: true, Linger: "yes"})
	vars := userHome(t, tmp, fake)
	args := joinArgs(join, "", freePort(t), freePort(t))
	i := slices.Index(args, "--join")
	args = slices.Delete(args, i, i+2) // no seed
	code, out, errOut = runEnv(t, vars, args...)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, `this is the first host of mesh "first"`)
	assert.NotContains(t, out, "What the doctor sees")
	code, _, errOut = runEnv(t, vars, "leave")
	require.Equal(t, exitOK, code, errOut)

	code, out, errOut = runEnv(t, vars, joinArgs(join, "127.0.0.1:"+freePort(t), freePort(t), freePort(t))...)
	require.Equal(t, exitOK, code, "a seed that does not answer yet is a warning; stderr:\n%s", errOut)
	assert.Contains(t, out, `warning: no other member of mesh "first" answered`)
	assert.Contains(t, out, "What the doctor sees:")
	code, _, errOut = runEnv(t, vars, "leave")
	assert.Equal(t, exitOK, code, errOut)
}
