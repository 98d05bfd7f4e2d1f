package console_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/mesh"
	"github.com/llmkube/mesh/sim/cable"
	"github.com/llmkube/mesh/tui/console"
)

// finding returns the first finding whose problem holds every part, or false.
func finding(d console.Doctor, parts ...string) (api.Finding, bool) {
	for _, f := range d.Findings {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(f.Problem, p)
		}
		if ok {
			return f, true
		}
	}
	return api.Finding{}, false
}

// waitFinding runs the doctor until it has a finding with every part.
func waitFinding(t *testing.T, c *console.Conn, what string, parts ...string) api.Finding {
	t.Helper()
	return waitSeen(t, c, what, nil, parts...)
}

// waitSeen runs the doctor until it has a finding with every part, seen by (at least) every
// member named: each member finds a fault in its own time.
func waitSeen(t *testing.T, c *console.Conn, what string, by []string, parts ...string) api.Finding {
	t.Helper()
	var f api.Finding
	var last console.Doctor
	require.Eventually(t, func() bool {
		var ok bool
		last = c.Doctor(t.Context())
		f, ok = finding(last, parts...)
		for _, b := range by {
			ok = ok && slices.Contains(f.SeenBy, b)
		}
		return ok
	}, 20*time.Second, 50*time.Millisecond, "%s: no finding with %q seen by %v in %+v", what, parts, by, &last)
	return f
}

// hostErrors are the error findings that name a host of the test's mesh.
func hostErrors(d console.Doctor) []string {
	var out []string
	for _, f := range d.Findings {
		for _, host := range []string{"pi5-hailo", "gpu-server", "box"} {
			if f.Severity == api.SeverityError && strings.Contains(f.Problem, host) {
				out = append(out, f.Problem)
				break
			}
		}
	}
	return out
}

// TestDoctorFindsEachFault runs real agents on loopback and a console that joined them, breaks
// the mesh one way after another, and checks the doctor names each fault, with who saw it: a
// foreign agent holding another secret (only the agent it knocks at sees it), a dead engine
// (only its host knows), a cut link to an agent's API, a crashed host, and the models those
// leave unroutable — the last scoped to their namespace.
func TestDoctorFindsEachFault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var link *cable.Cable
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), Fast: true, Hosts: []localmesh.HostSpec{
		{Name: "pi5-hailo", Demo: "pi5-hailo", OS: "linux", Arch: "arm64", Runtimes: []api.Runtime{api.RuntimeHailoOllama}},
		{Name: "gpu-server", Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama}},
		{Name: "box", Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama},
			Advertise: func(addr string) string {
				c, err := cable.New(addr)
				require.NoError(t, err)
				link = c
				return c.Addr()
			}},
	}})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, m.Close())
		link.Close()
	})
	_, err = m.Place(ctx,
		localmesh.Placed{Host: "pi5-hailo", Request: api.PlacementRequest{Source: "hailo://qwen2:1.5b", Name: "pi-model", Namespace: "team-a"}},
		localmesh.Placed{Host: "gpu-server", Request: api.PlacementRequest{Source: "ollama://qwen2.5:0.5b", Name: "gpu-model"}},
		localmesh.Placed{Host: "box", Request: api.PlacementRequest{Source: "ollama://qwen2.5:0.5b", Name: "box-model"}},
	)
	require.NoError(t, err)

	connect := func(name, token string) *console.Conn {
		c, err := console.Connect(ctx, console.Options{Join: m.JoinString(), Token: token, Profile: mesh.ProfileLocal, NodeName: name})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close(context.Background()) })
		require.Eventually(t, func() bool { return len(console.Agents(c.View())) == 3 }, 20*time.Second, 20*time.Millisecond)
		return c
	}
	admin := connect("laptop", m.AdminToken())
	teamA, err := api.NamespaceToken(m.AdminToken(), "team-a")
	require.NoError(t, err)
	nsConsole := connect("team-a-laptop", teamA)

	// Healthy: every agent's report is merged, and none finds an error with the mesh's hosts.
	// (Other programs' gossip on this machine's loopback may be reported: it is real.)
	require.Eventually(t, func() bool {
		d := admin.Doctor(ctx)
		return len(d.Agents) == 3 && len(hostErrors(d)) == 0
	}, 20*time.Second, 50*time.Millisecond, "a healthy mesh: %v", hostErrors(admin.Doctor(ctx)))

	t.Run("foreign secret", func(t *testing.T) {
		other, err := api.NewSecret()
		require.NoError(t, err)
		foreign, err := mesh.Start(ctx, mesh.Config{MeshID: m.Join.MeshID, Secret: other, NodeName: "stranger",
			BindAddr: "127.0.0.1", Seeds: m.Join.Seeds, Profile: mesh.ProfileLocal, APIAddr: "127.0.0.1:9"})
		require.NoError(t, err)
		defer foreign.Shutdown()
		// The seed it knocks at sees it; this console does not: only the agents' reports tell.
		f := waitSeen(t, admin, "another mesh's gossip", []string{"pi5-hailo"}, "gossip from 127.0.0.1 belongs to another mesh")
		assert.Equal(t, api.SeverityError, f.Severity)
		assert.NotContains(t, f.SeenBy, "laptop")
		assert.Contains(t, f.Fix, "join string")
	})

	t.Run("dead engine", func(t *testing.T) {
		require.NoError(t, m.Host("gpu-server").Ollama.Close())
		f := waitFinding(t, admin, "engine down", "engine ollama on gpu-server is down", "1 placement(s) wait for it")
		assert.Equal(t, []string{"gpu-server"}, f.SeenBy, "only its host knows")
		f = waitFinding(t, admin, "engine down", `"gpu-model"`, "on gpu-server is not serving", "Ollama at", "does not answer")
		assert.Equal(t, api.DefaultNamespace, f.Namespace)
		_, seen := finding(nsConsole.Doctor(ctx), `"gpu-model"`)
		assert.False(t, seen, "team-a does not see the default namespace's model")
	})

	t.Run("cut link", func(t *testing.T) {
		link.Pull() // box's API falls silent; its gossip goes on
		// The agents find it by dialling it themselves.
		waitSeen(t, admin, "unreachable API", []string{"gpu-server", "pi5-hailo"}, "agent box is unreachable", link.Addr())
		f := waitFinding(t, admin, "unroutable model", `"box-model"`, "on box cannot be served: box is unreachable")
		assert.Equal(t, api.SeverityError, f.Severity)
	})

	t.Run("crashed host", func(t *testing.T) {
		pi := m.Host("pi5-hailo").Node
		require.NoError(t, pi.Mesh.Shutdown()) // no leave: to the others it crashed
		require.NoError(t, pi.Close())
		waitSeen(t, admin, "dead host", []string{"gpu-server", "laptop"}, "agent pi5-hailo", "is dead")
		waitFinding(t, admin, "unroutable model", `"pi-model"`, "on pi5-hailo cannot be served: pi5-hailo is dead")

		d := waitFindingDoc(t, nsConsole, `"pi-model"`)
		_, ok := finding(d, "agent pi5-hailo", "is dead")
		assert.True(t, ok, "host-wide findings reach a namespace token")
		for _, f := range d.Findings {
			assert.NotContains(t, f.Problem, "box-model", "nor another namespace's models")
			assert.NotContains(t, f.Problem, "gpu-model")
			assert.Contains(t, []string{"", "team-a"}, f.Namespace, fmt.Sprint(f))
		}
	})
}

// waitFindingDoc runs the doctor until a finding holds part, and returns that report.
func waitFindingDoc(t *testing.T, c *console.Conn, part string) console.Doctor {
	t.Helper()
	var d console.Doctor
	require.Eventually(t, func() bool {
		d = c.Doctor(t.Context())
		_, ok := finding(d, part)
		return ok
	}, 20*time.Second, 50*time.Millisecond, "no finding with %q", part)
	return d
}
