package doctor

import (
	"errors"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/discovery"
	"github.com/stretchr/testify/require"
)

func TestLoopbackAdvertisementIsAFinding(t *testing.T) {
	problem, fix := Advert("127.0.0.1:7777", "192.168.1.20:7946")
	require.Contains(t, problem, "advertises its API at 127.0.0.1:7777, which no other host can reach")
	require.Equal(t, "restart it with --advertise 192.168.1.20:7777 (the address peers gossip with)", fix)
	problem, _ = Advert("0.0.0.0:7777", "10.0.0.5:7946")
	require.NotEmpty(t, problem)
	problem, _ = Advert("localhost:7777", "10.0.0.5:7946")
	require.NotEmpty(t, problem)
	for _, ok := range [][2]string{
		{"192.168.1.20:7777", "192.168.1.20:7946"}, // a real address
		{"127.0.0.1:7777", "127.0.0.1:7946"},       // a mesh on one machine
	} {
		problem, _ = Advert(ok[0], ok[1])
		require.Empty(t, problem, ok)
	}
}

// TestReportOfADeadAgent: a dead agent is one finding, and each model it held that is not over
// is another, with the model's namespace so that a namespace token sees it; once this member is
// cut off, neither is reported, only the cut.
func TestReportOfADeadAgent(t *testing.T) {
	now := time.Now()
	f := Facts{Mesh: "home", Node: "a", Gossip: "10.0.0.1:7946", Members: 2, ProbeEvery: time.Second,
		Others: []Member{{Name: "b", Agent: true, Live: api.Dead, Addr: "10.0.0.2:7946", Since: now,
			Placements: []api.Placement{
				{Model: "qwen", Namespace: "team-a", Runtime: api.RuntimeOllama, State: api.StateReady},
				{Model: "gone", Namespace: "team-a", State: api.StateFailed},
			}}},
	}
	r := Report(f, now)
	require.Len(t, r.Findings, 2, "%+v", r.Findings)
	require.Equal(t, "agent b (10.0.0.2:7946) is dead: it stopped answering the mesh's probes", r.Findings[0].Problem)
	require.Equal(t, `model "qwen" (namespace team-a, ollama) on b cannot be served: b is dead`, r.Findings[1].Problem)
	require.Equal(t, "team-a", r.Findings[1].Namespace)

	f.Cut, f.Alone, f.PeersHad, f.LastHeard = true, true, 1, now
	r = Report(f, now)
	require.Len(t, r.Findings, 1, "%+v", r.Findings)
	require.Contains(t, r.Findings[0].Problem, "this host is cut off")
	require.Contains(t, r.Findings[0].Fix, "port 7946")
}

// TestSeedFindings: why a join through a seed failed is told from its error.
func TestSeedFindings(t *testing.T) {
	for err, want := range map[string]string{
		"dial tcp 10.0.0.9:7946: connect: connection refused": "last-known peer 10.0.0.9:7946 refused the gossip port",
		"i/o timeout":          "does not answer on the gossip port",
		"failed to decrypt":    "it holds another mesh secret",
		"unexpected EOF":       "hung up on us",
		"something else again": "could not join last-known peer 10.0.0.9:7946",
	} {
		problem, _ := seed(Candidate{Addr: "10.0.0.9:7946", Via: discovery.ViaLastKnown, Err: errors.New(err)}, "7946", "")
		require.Contains(t, problem, want, err)
	}
}
