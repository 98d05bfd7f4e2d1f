package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/netnslab"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/sim/simtest"
	"github.com/llmkube/mesh/tui/cli"
	"github.com/llmkube/mesh/tui/console"
)

// The LAN tests run real llmkube-agent processes as hosts of a LAN made of network namespaces
// (internal/netnslab: one bridge, real multicast, no default route, no seeds) and this test
// binary as llmkube-tui on a laptop host of the same LAN: the paths a user takes from a laptop.

var (
	agentOnce sync.Once
	agentBin  string
	agentErr  error
	agentDir  string
)

// llmkubeAgent builds the agent once per test run.
func llmkubeAgent(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		if agentDir, agentErr = os.MkdirTemp("", "cli-lan-"); agentErr == nil {
			agentBin, agentErr = simtest.Build(agentDir, "github.com/llmkube/mesh/cmd/llmkube-agent", "llmkube-agent")
		}
	})
	require.NoError(t, agentErr)
	return agentBin
}

func closeLAN() {
	if agentDir != "" {
		os.RemoveAll(agentDir)
	}
}

// lan is a LAN of agents on hosts 1..n-1 and a laptop, host n.
type lan struct {
	lab    *netnslab.Lab
	join   string
	agents map[string]*netnslab.Proc
	laptop int
}

var lanAgents = []string{"alpha", "beta"}

// newLAN starts the agents (mDNS on, the LAN profile's timings) and waits until each has
// joined the others.
func newLAN(t *testing.T, names ...string) *lan {
	if len(names) == 0 {
		names = lanAgents
	}
	lab := netnslab.New(t, len(names)+1)
	bin := llmkubeAgent(t)
	_, join := newJoin(t, "lab")
	l := &lan{lab: lab, join: join, agents: map[string]*netnslab.Proc{}, laptop: len(names) + 1}
	for i, name := range names {
		dir := t.TempDir()
		l.agents[name] = lab.Start(i+1, nil, bin, "run", "--allow-temp-store", "--log-format", "json",
			"--state-dir", filepath.Join(dir, "state"), "--models-dir", filepath.Join(dir, "models"),
			"--node-name", name, "--join-string", join, "--runtimes", "ollama", "--ollama-url", "http://127.0.0.1:1")
	}
	for _, name := range names {
		for _, other := range names {
			if other != name {
				l.waitLog(t, name, `"msg":"mesh member joined"`, `"member":"`+other+`"`)
			}
		}
	}
	return l
}

// waitLog waits until agent name logs a line holding every one of parts, and returns when it
// logged it.
func (l *lan) waitLog(t *testing.T, name string, parts ...string) time.Time {
	t.Helper()
	p := l.agents[name]
	deadline := time.Now().Add(30 * time.Second)
	for {
		if line, ok := logged(p.Out.String(), parts...); ok {
			var rec struct{ Time time.Time }
			require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
			return rec.Time
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never logged %v; its log:\n%s", name, parts, p.Out.String())
		}
		select {
		case <-p.Done():
			t.Fatalf("%s exited; its log:\n%s", name, p.Out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func logged(out string, parts ...string) (string, bool) {
	for _, line := range strings.Split(out, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return line, true
		}
	}
	return "", false
}

// console runs llmkube-tui on the laptop with env and args, and returns its result.
func (l *lan) console(t *testing.T, env []string, args ...string) result {
	t.Helper()
	p := l.lab.Start(l.laptop, append([]string{childEnv + "=1"}, env...), os.Args[0], args...)
	var r result
	select {
	case <-p.Done():
		r.code = p.Wait()
	case <-time.After(time.Minute):
		t.Fatalf("llmkube-tui %v did not finish within a minute; it printed:\n%s", args, p.Out.String())
	}
	// The child writes its JSON document to stdout and nothing else there; stderr goes to the
	// same buffer, so split the document off.
	out := p.Out.String()
	if i := strings.Index("\n"+out, "\n{\n"); i >= 0 {
		r.stdout, r.stderr = out[i:], out[:i]
	} else {
		r.stderr = out
	}
	return r
}

func (l *lan) hosts(t *testing.T, env []string, args ...string) cli.HostsDoc {
	t.Helper()
	r := l.console(t, env, append([]string{"mesh", "hosts", "--json"}, args...)...)
	require.Equal(t, cli.ExitOK, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	var doc cli.HostsDoc
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	return doc
}

func member(doc cli.HostsDoc, name string) (api.Member, bool) {
	for _, m := range doc.Hosts {
		if m.Name == name {
			return m, true
		}
	}
	return api.Member{}, false
}

// TestLANConsoleJoinsByMDNS: the README's laptop command, `llmkube-tui --mdns`, and every
// `mesh … --mdns`, find the agents with nothing but the join string's secret.
func TestLANConsoleJoinsByMDNS(t *testing.T) {
	l := newLAN(t)
	doc := l.hosts(t, []string{"LLMKUBE_JOIN=" + l.join}, "--mdns")
	assert.Equal(t, console.ModeMember, doc.Mode)
	for _, name := range lanAgents {
		m, ok := member(doc, name)
		require.True(t, ok, "%s missing from %+v", name, doc.Hosts)
		assert.Equal(t, api.Alive, m.Liveness, m.Reason)
	}
	// And with a node name of the user's choosing.
	doc = l.hosts(t, []string{"LLMKUBE_JOIN=" + l.join}, "--mdns", "--node-name", "laptop")
	assert.Len(t, doc.Hosts, len(lanAgents))
}

// TestLANAdvertisesTheLANAddress: hosts without a default route advertise the address of the
// interface the mesh uses, never loopback: each agent's API address is its LAN address.
func TestLANAdvertisesTheLANAddress(t *testing.T) {
	l := newLAN(t)
	doc := l.hosts(t, []string{"LLMKUBE_JOIN=" + l.join}, "--mdns")
	for i, name := range lanAgents {
		m, ok := member(doc, name)
		require.True(t, ok, "%s missing from %+v", name, doc.Hosts)
		require.NotNil(t, m.Host)
		assert.Equal(t, l.lab.Addr(i+1)+":7777", m.Host.APIAddr, name)
		assert.Equal(t, l.lab.Addr(i+1)+":7946", m.Addr, name)
		assert.Equal(t, api.Alive, m.Liveness, "its API answers the others' dial-back: %s", m.Reason)
	}
}

// TestLANAgentByLocalName: --agent and LLMKUBE_AGENT take an agent's .local name, resolved
// over mDNS by the console itself (Go's resolver, the only one in a static build, never asks
// mDNS), over TLS with the mesh's CA (a token holder without the join string; the agents'
// leaves name their .local names), and a name nobody answers is a clear error, exit 5. Plain
// http:// to another host is refused before anything is sent.
func TestLANAgentByLocalName(t *testing.T) {
	l := newLAN(t)
	j := mustJoin(t, l.join)
	token := "LLMKUBE_TOKEN=" + api.AdminToken(j.Secret)
	ca, err := seal.NewCA(j.MeshID, j.Secret)
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "mesh-ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.PEM(), 0o644))
	doc := l.hosts(t, []string{token, "LLMKUBE_AGENT=https://alpha.llmkube.local:7777"}, "--ca-file", caFile)
	assert.Equal(t, console.ModeAgent, doc.Mode)
	assert.Len(t, doc.Hosts, len(lanAgents))
	doc = l.hosts(t, []string{token}, "--agent", "beta.llmkube.local:7777", "--ca-file", caFile)
	assert.Equal(t, console.ModeAgent, doc.Mode)
	assert.Len(t, doc.Hosts, len(lanAgents))

	r := l.console(t, []string{token}, "mesh", "hosts", "--agent", "http://alpha.llmkube.local:7777")
	assert.NotEqual(t, cli.ExitOK, r.code)
	assert.Contains(t, r.stderr, "--insecure-http")

	r = l.console(t, []string{token}, "mesh", "hosts", "--agent", "https://nobody.llmkube.local:7777", "--ca-file", caFile)
	assert.Equal(t, cli.ExitUnreachable, r.code, r.stderr)
	assert.Contains(t, r.stderr, "resolving nobody.llmkube.local over mDNS: no answer")
}

func mustJoin(t *testing.T, s string) api.Join {
	t.Helper()
	j, err := api.ParseJoin(s)
	require.NoError(t, err)
	return j
}

// TestLANHeadlessHostsShowsACrashedHost: a script checking liveness with `mesh hosts` — a fresh
// member every run — sees a crashed host dead, as the console does, not missing.
func TestLANHeadlessHostsShowsACrashedHost(t *testing.T) {
	l := newLAN(t)
	l.agents["beta"].Kill()
	l.waitLog(t, "alpha", `"msg":"mesh member dead"`, `"member":"beta"`)
	doc := l.hosts(t, []string{"LLMKUBE_JOIN=" + l.join}, "--mdns")
	m, ok := member(doc, "beta")
	require.True(t, ok, "beta missing from %+v", doc.Hosts)
	assert.Equal(t, api.Dead, m.Liveness)
	a, _ := member(doc, "alpha")
	assert.Equal(t, api.Alive, a.Liveness)
}

// TestLANLinkCut: a host whose cable is pulled knows at once that it is alone (every other
// member unreachable, their models unavailable), and once the cable is back both sides, which
// by then hold each other dead, rejoin by themselves.
func TestLANLinkCut(t *testing.T) {
	l := newLAN(t, "alpha", "beta", "gamma")
	token := "LLMKUBE_TOKEN=" + api.AdminToken(mustJoin(t, l.join).Secret)
	l.lab.Cut(3)
	cut := time.Now()
	// gamma's own view, through its API on loopback: both others unreachable as cut off, before
	// its failure detector (slowed down by Lifeguard, as it cannot tell who is at fault) has
	// declared them dead one by one.
	for {
		require.Less(t, time.Since(cut), 30*time.Second, "gamma never saw itself cut off")
		p := l.lab.Start(3, []string{childEnv + "=1", token}, os.Args[0], "mesh", "hosts", "--json", "--agent", "http://127.0.0.1:7777")
		require.Equal(t, cli.ExitOK, p.Wait(), p.Out.String())
		var doc cli.HostsDoc
		require.NoError(t, json.Unmarshal([]byte(p.Out.String()), &doc), p.Out.String())
		alone := 0
		for _, name := range []string{"alpha", "beta"} {
			if m, ok := member(doc, name); ok && m.Liveness == api.Unreachable && strings.Contains(m.Reason, "cut off") {
				alone++
			}
		}
		if alone == 2 {
			break
		}
	}
	t.Logf("gamma knew it was cut off %.1f s after the cut", time.Since(cut).Seconds())
	l.waitLog(t, "alpha", `"msg":"mesh member dead"`, `"member":"gamma"`)
	l.waitLog(t, "gamma", `"msg":"mesh member dead"`, `"member":"alpha"`)
	l.waitLog(t, "gamma", `"msg":"mesh member dead"`, `"member":"beta"`)

	l.lab.Plug(3)
	plugged := time.Now()
	back := []time.Time{
		l.waitLog(t, "alpha", `"msg":"mesh member recovered"`, `"member":"gamma"`),
		l.waitLog(t, "beta", `"msg":"mesh member recovered"`, `"member":"gamma"`),
		l.waitLog(t, "gamma", `"msg":"mesh member recovered"`, `"member":"alpha"`),
		l.waitLog(t, "gamma", `"msg":"mesh member recovered"`, `"member":"beta"`),
	}
	var last time.Time
	for _, b := range back {
		if b.After(last) {
			last = b
		}
	}
	t.Logf("every member saw every other alive again %.2f s after the cable was back", last.Sub(plugged).Seconds())
}
