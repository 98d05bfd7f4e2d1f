package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/console"
)

const gib = 1 << 30

func TestHostsTable(t *testing.T) {
	members := []api.Member{
		{Name: "pi5", Role: api.RoleAgent, Liveness: api.Alive, Host: &api.Host{
			OS: "linux", Arch: "arm64", Chip: "BCM2712", APIAddr: "10.0.0.5:7777",
			Memory:       api.Memory{Total: 16 * gib, Budget: 10 * gib, Committed: 2 * gib},
			Accelerators: []api.Accelerator{{Kind: "hailo", Name: "Hailo-10H"}},
			Engines: []api.Engine{{Runtime: api.RuntimeLlamaServer, Present: true, Healthy: true},
				{Runtime: api.RuntimeOllama, Present: false}, {Runtime: api.RuntimeHailoOllama, Present: true}},
		}, Placements: []api.Placement{{ID: "a"}}},
		{Name: "gone", Role: api.RoleAgent, Liveness: api.Dead},
	}
	var b bytes.Buffer
	require.NoError(t, hostsTable(&b, members, false))
	want := `HOST  STATE  OS/ARCH      CHIP     ACCELERATORS  RUNTIMES                         FREE     BUDGET    TOTAL     MODELS  API
pi5   alive  linux/arm64  BCM2712  Hailo-10H     llama-server,hailo-ollama(down)  8.0 GiB  10.0 GiB  16.0 GiB  1       10.0.0.5:7777
gone  dead   -            -        -             -                                -        -         -         -       -
`
	assert.Equal(t, want, b.String())

	b.Reset()
	require.NoError(t, hostsTable(&b, members[:1], true))
	assert.True(t, strings.HasPrefix(b.String(), "HOST  ROLE   STATE"), b.String())
	assert.Contains(t, b.String(), "pi5   agent  alive")

	members[0].Host.OnBattery = true
	b.Reset()
	require.NoError(t, hostsTable(&b, members[:1], false))
	assert.Contains(t, b.String(), "\npi5   alive (on battery)  linux/arm64", "a host on battery says so beside its state")
}

func TestPlacementsTable(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, placementsTable(&b, []api.Placement{
		{ID: "p1", Model: "qwen2:0.5b", Host: "pi5", Namespace: "default", Runtime: api.RuntimeOllama,
			State: api.StatePulling, Progress: 0.42, Memory: api.SizeEstimate{Bytes: 600 << 20}, Source: "ollama://qwen2:0.5b"},
		{ID: "p2", Model: "big", Host: "mac", Namespace: "team-a", Runtime: api.RuntimeLlamaServer,
			State: api.StateFailed, Code: api.CodeInsufficientMemory, Source: "hf://o/r/big.gguf"},
	}))
	want := `ID  MODEL       HOST  NAMESPACE  RUNTIME       STATE                        MEMORY   SOURCE
p1  qwen2:0.5b  pi5   default    ollama        pulling 42%                  600 MiB  ollama://qwen2:0.5b
p2  big         mac   team-a     llama-server  failed (InsufficientMemory)  -        hf://o/r/big.gguf
`
	assert.Equal(t, want, b.String())
}

func TestRankingTable(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, rankingTable(&b, console.Ranking{
		Estimate: api.SizeEstimate{Bytes: 2 * gib, Method: api.SizeHeader, Detail: "weights 1.5 GiB\n+ KV"},
		SizedBy:  "pi5",
		Hosts: []api.Ranked{
			{Host: "mac", Verdict: api.VerdictFits, Reason: "fits: needs 2.0 GiB, 6.0 GiB free", Need: 2 * gib, Free: 6 * gib, Runtime: api.RuntimeLlamaServer},
			{Host: "pi5", Verdict: api.VerdictRefused, Code: api.CodeInsufficientMemory, Reason: "refused: needs 2.0 GiB, 1.0 GiB free", Need: 2 * gib, Free: gib},
		},
	}))
	want := `size: 2.0 GiB (header, sized by pi5): weights 1.5 GiB + KV
HOST  VERDICT                       NEED     FREE     RUNTIME       REASON
mac   fits                          2.0 GiB  6.0 GiB  llama-server  fits: needs 2.0 GiB, 6.0 GiB free
pi5   refused (InsufficientMemory)  2.0 GiB  1.0 GiB  -             refused: needs 2.0 GiB, 1.0 GiB free
`
	assert.Equal(t, want, b.String())

	// Unsized: no empty "( , sized by …)"; no such model says so.
	for _, c := range []struct {
		r    console.Ranking
		want string
	}{
		{console.Ranking{SizedBy: "mac", SizeError: "cannot resolve host"}, "size: - (unknown, sized by mac): cannot resolve host\n"},
		{console.Ranking{SizedBy: "pi5", SizeError: "hailo model x:1b is not in hailo-ollama's zoo", SizeCode: api.CodeNotFound},
			"no such model (asked pi5): hailo model x:1b is not in hailo-ollama's zoo\n"},
	} {
		b.Reset()
		require.NoError(t, rankingTable(&b, c.r))
		assert.Equal(t, c.want, strings.SplitAfter(b.String(), "\n")[0])
	}
}

func TestEventTextAndDoctor(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.Local)
	got := eventText(api.Event{Time: at, Type: api.EventRefused, Host: "pi5", Code: api.CodeAcceleratorMissing,
		Message: "hailo:// needs\na Hailo-10H", Placement: &api.Placement{ID: "p1", Model: "qwen2:1.5b", State: api.StateFailed}})
	assert.Equal(t, "03:04:05  pi5  refused AcceleratorMissing  qwen2:1.5b [p1] failed  hailo:// needs a Hailo-10H", got)
	assert.Equal(t, "03:04:05  -  mesh  mac joined", eventText(api.Event{Time: at, Type: api.EventMesh, Message: "mac joined"}))

	var b bytes.Buffer
	require.NoError(t, doctorText(&b, console.Doctor{Mode: "member", Agents: []string{"mac", "pi5"}, Findings: []api.Finding{
		{Severity: "error", Problem: "UDP blocked", Detail: "5 probes", Fix: "open 7946/udp", SeenBy: []string{"mac", "pi5"}}, {Severity: "info", Problem: "mDNS off"}}}, 2))
	assert.Equal(t, "mode: member, 2 agent(s) visible, 2 report(s) merged\nerror    UDP blocked (5 probes)\n         fix: open 7946/udp\n         seen by: mac, pi5\ninfo     mDNS off\n", b.String())
	b.Reset()
	require.NoError(t, doctorText(&b, console.Doctor{Mode: "agent", Agents: []string{"mac"}}, 1))
	assert.Equal(t, "mode: agent, 1 agent(s) visible, 1 report(s) merged\nno problems found\n", b.String())
}

// The documents' field names are the stable schema the README's Scripting section documents.
func TestJSONSchemaFields(t *testing.T) {
	keys := func(v any) []string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &m))
		var out []string
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	assert.ElementsMatch(t, []string{"schema", "mesh", "mode", "hosts"}, keys(HostsDoc{Schema: Schema}))
	assert.ElementsMatch(t, []string{"schema", "placements"}, keys(PlacementsDoc{Schema: Schema}))
	assert.ElementsMatch(t, []string{"schema", "placement", "error"}, keys(PlacementDoc{Schema: Schema, Placement: &api.Placement{}, Error: &JSONError{}}))
	assert.ElementsMatch(t, []string{"schema", "deleted"}, keys(DeletedDoc{Schema: Schema}))
	assert.ElementsMatch(t, []string{"schema", "ranking"}, keys(RankingDoc{Schema: Schema}))
	assert.ElementsMatch(t, []string{"schema", "doctor"}, keys(DoctorDoc{Schema: Schema}))
	assert.ElementsMatch(t, []string{"schema", "namespace", "token"}, keys(TokenDoc{Schema: Schema}))
	assert.ElementsMatch(t, []string{"code", "message", "exit"}, keys(JSONError{}))
	// An event line is the api.Event's own fields plus the schema.
	assert.ElementsMatch(t, []string{"schema", "seq", "time", "type", "message", "host"},
		keys(EventLine{Schema: Schema, Event: api.Event{Host: "pi5"}}))
	assert.ElementsMatch(t, []string{"schema", "delta"}, keys(ChatLine{Schema: Schema, Delta: "Hi"}))
	assert.ElementsMatch(t, []string{"schema", "done", "model", "host", "finish_reason", "usage"},
		keys(ChatLine{Schema: Schema, Done: true, Model: "m", Host: "h", FinishReason: "stop", Usage: &apiclient.ChatUsage{}}))
}

// mesh place's progress on stderr: each state once, and what moves in steps of 10% — a pull,
// and a split's main sending its members their weights.
func TestPlaceProgress(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &app{stderr: newSafeWriter(&redactor{}, &buf)}}
	split := &api.SplitPlan{}
	for _, pl := range []api.Placement{
		{Host: "h1", State: api.StatePulling, Progress: 0.05, PulledBytes: 50 << 20, TotalBytes: 1000 << 20},
		{Host: "h1", State: api.StatePulling, Progress: 0.08, PulledBytes: 80 << 20, TotalBytes: 1000 << 20},
		{Host: "h1", State: api.StatePulling, Progress: 0.5, PulledBytes: 500 << 20, TotalBytes: 1000 << 20},
		{Host: "h1", State: api.StateLoading, Split: split},
		{Host: "h1", State: api.StateLoading, Split: split, Progress: 0.02, PulledBytes: 80 << 20, TotalBytes: 4 << 30},
		{Host: "h1", State: api.StateLoading, Split: split, Progress: 0.31, PulledBytes: 1270 << 20, TotalBytes: 4 << 30},
		{Host: "h1", State: api.StateLoading, Split: split, Progress: 0.33, PulledBytes: 1352 << 20, TotalBytes: 4 << 30},
		{Host: "h1", State: api.StateReady},
	} {
		p.show(pl)
	}
	assert.Equal(t, `h1: pulling 5% (50 MiB of 1000 MiB pulled)
h1: pulling 50% (500 MiB of 1000 MiB pulled)
h1: loading
h1: loading 31% (1.2 GiB of 4.0 GiB sent to the members)
h1: ready
`, buf.String())
}
