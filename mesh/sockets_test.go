package mesh

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// TestRealSockets runs three agents and a console on 127.0.0.1 with real UDP and TCP, real
// HTTP APIs and the real dial-back.
func TestRealSockets(t *testing.T) {
	var ms []*Mesh
	var seed string
	for i, role := range []api.Role{api.RoleAgent, api.RoleAgent, api.RoleAgent, api.RoleConsole} {
		cfg := Config{
			MeshID: "sockets", Secret: testSecret, NodeName: fmt.Sprintf("n%d", i), Role: role,
			BindAddr: "127.0.0.1", Profile: ProfileLocal, Log: testLog(),
		}
		if role == api.RoleAgent {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			t.Cleanup(srv.Close)
			cfg.APIAddr = strings.TrimPrefix(srv.URL, "http://")
		}
		if seed != "" {
			cfg.Seeds = []string{seed}
		}
		m, err := Start(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { m.Shutdown() })
		require.True(t, strings.HasPrefix(m.GossipAddr(), "127.0.0.1:"), m.GossipAddr())
		if seed == "" {
			seed = m.GossipAddr()
		}
		ms = append(ms, m)
	}
	for i, m := range ms[:3] {
		require.NoError(t, m.SetLocal(hostOf(int64(i)<<30), []api.Placement{placement(fmt.Sprintf("p%d", i), "llama3", api.StateReady)}))
	}
	waitFor(t, 10*time.Second, ms, "every member sees three verified agents", func(v View) bool {
		return len(v.Members) == 4 && len(v.Ready("default", "llama3")) == 3
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	require.NoError(t, ms[3].Close(ctx), "the console leaves gracefully")
	waitFor(t, 5*time.Second, ms[:3], "console gone", func(v View) bool { return liveness(v, "n3") == "" })
}

// TestOnMemberlistMockNetwork runs members on memberlist's own MockNetwork, as memberlist's
// tests do. (Most tests use memnet instead: MockNetwork blocks a sender forever on a stopped
// member and cannot add members while others run, see internal/memnet.)
func TestOnMemberlistMockNetwork(t *testing.T) {
	var mock memberlist.MockNetwork
	names := []string{"a", "b", "c"}
	transports := map[string]*memberlist.MockTransport{}
	for _, n := range names {
		transports[n] = mock.NewTransport(n) // all before any member runs: the mock is unsynchronised
	}
	var ms []*Mesh
	for i, n := range names {
		cfg := Config{
			MeshID: "mock", Secret: testSecret, NodeName: n, Profile: ProfileLocal, Transport: transports[n],
			APIAddr: n + ".test:7777", DialBack: func(context.Context, string) error { return nil }, Log: testLog(),
		}
		if i > 0 {
			cfg.Seeds = []string{ms[0].GossipAddr()}
		}
		m, err := Start(context.Background(), cfg)
		require.NoError(t, err)
		ms = append(ms, m)
	}
	t.Cleanup(func() {
		// Leave first, all of them, so no member sends to a stopped one (which would block).
		for _, m := range ms {
			m.Leave(time.Second)
		}
		for _, m := range ms {
			m.Shutdown()
		}
	})
	require.NoError(t, ms[2].SetLocal(hostOf(2<<30), []api.Placement{placement("p", "phi3", api.StateReady)}))
	waitFor(t, 10*time.Second, ms, "state shared over the mock network", func(v View) bool {
		return len(v.Members) == 3 && len(v.Ready("default", "phi3")) == 1
	})
}
