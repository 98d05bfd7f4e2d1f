package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/internal/tuitest"
)

var now = tuitest.Now

func testCtx() *common.Context {
	return tuitest.Context()
}

var sample = console.Doctor{Mode: "member", Node: "laptop", Agents: []string{"mac-mini", "pi5-hailo"}, Findings: []api.Finding{
	{Severity: SevInfo, Problem: "mDNS browses on en0 (192.168.1.50) and wlan0", Fix: "nothing to do", SeenBy: []string{"laptop"}},
	{Severity: SevWarning, Problem: "seed 10.0.0.9:7946 does not resolve or refuses the gossip port", Fix: "check the address given with --join, or drop it"},
	{Severity: SevError, Problem: "gossip from 192.168.1.9 could not be decrypted: that host holds another mesh secret", Detail: "14 message(s), the last 3s ago",
		Fix:    "check the join string: every host of mesh \"home\" must use the same one (`llmkube-agent init` made it); restart the host at 192.168.1.9 with it",
		SeenBy: []string{"mac-mini", "pi5-hailo"}},
}}

func TestStaleReportDropped(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.seq, m.running = 2, true
	m.Update(reportMsg{seq: 1, report: sample})
	assert.Nil(t, m.report, "an answer to a replaced run is dropped")
	assert.True(t, m.Running())
	m.Update(reportMsg{seq: 2, report: sample})
	require.NotNil(t, m.report)
	assert.False(t, m.Running())
}

func TestNotConnected(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	assert.Nil(t, m.Init(), "nothing to run without a connection")
	_, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("r")})
	assert.Nil(t, cmd)
	assert.Contains(t, m.View(), "not connected to a mesh")
}

func TestCounts(t *testing.T) {
	assert.Equal(t, "1 error · 1 warning · 1 note", Counts(sample.Findings))
	assert.Equal(t, "no problems found", Counts(nil))
	assert.Equal(t, "no problems found · 2 notes", Counts([]api.Finding{{Severity: SevInfo}, {Severity: SevInfo}}))
	assert.Equal(t, "2 errors", Counts([]api.Finding{{Severity: SevError}, {Severity: SevError}}))
}

// TestRunsAgainstAnAgent runs the doctor for real through a console connected to an agent's API
// on loopback: Init returns the command, the command does the I/O, Update shows the answer.
func TestRunsAgainstAnAgent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/mesh":
			_ = json.NewEncoder(w).Encode(tuitest.SampleMesh(now))
		case "/v1/doctor":
			_ = json.NewEncoder(w).Encode(api.DoctorReport{Node: "mac-mini", Findings: []api.Finding{
				{Severity: SevInfo, Problem: "mDNS browses on en0", Fix: "nothing to do"}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	conn, err := console.Connect(context.Background(), console.Options{AgentURL: srv.URL, Token: "t", Poll: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })

	ctx := testCtx()
	ctx.Conn = conn
	m := New(ctx)
	m.SetSize(80, 24)
	cmd := m.Init()
	require.NotNil(t, cmd)
	assert.Contains(t, m.View(), "checking…")
	_, again := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("r")})
	assert.Nil(t, again, "one run at a time")
	m.Update(cmd())
	assert.False(t, m.Running())
	assert.Contains(t, m.View(), "agent mode · checked 0s ago")
	assert.Contains(t, m.View(), "no problems found: this console and agent mac-mini saw nothing wrong · 1 note")
	assert.Contains(t, m.View(), "seen by mac-mini", "the watched agent's report, asked of it alone")

	_, cmd = m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("r")})
	require.NotNil(t, cmd, "r runs it again")
	assert.Contains(t, m.View(), "checking again…")
	m.Update(cmd())
	assert.Contains(t, m.View(), "r runs it again")
}

func TestView(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			ctx := testCtx()
			m := New(ctx)
			m.SetSize(size[0], size[1])
			m.seq, m.running = 1, true
			m.Update(reportMsg{seq: 1, report: sample})
			ctx.Now = func() time.Time { return now.Add(12 * time.Second) }
			golden.RequireEqual(t, []byte(m.View()))
		})
	}
}

func TestViewNoProblems(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.seq, m.running = 1, true
	m.Update(reportMsg{seq: 1, report: console.Doctor{Mode: "member"}})
	golden.RequireEqual(t, []byte(m.View()))
}
