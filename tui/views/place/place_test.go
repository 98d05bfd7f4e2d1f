package place

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/internal/tuitest"
	"github.com/llmkube/mesh/tui/render"
)

var now = tuitest.Now

const mib = int64(1) << 20

func testCtx() *common.Context {
	return tuitest.Context()
}

func keyMsg(k string) tea.KeyMsg {
	switch k {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "tab":
		return tea.KeyMsg{Type: tea.KeyTab}
	case "shift+tab":
		return tea.KeyMsg{Type: tea.KeyShiftTab}
	case "up":
		return tea.KeyMsg{Type: tea.KeyUp}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	case "ctrl+s":
		return tea.KeyMsg{Type: tea.KeyCtrlS}
	case "ctrl+r":
		return tea.KeyMsg{Type: tea.KeyCtrlR}
	case "ctrl+t":
		return tea.KeyMsg{Type: tea.KeyCtrlT}
	case "backspace":
		return tea.KeyMsg{Type: tea.KeyBackspace}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

func press(m *Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		_, cmd = m.Update(keyMsg(k))
	}
	return cmd
}

func typeText(m *Model, s string) {
	for _, r := range s {
		m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
}

var hailoEstimate = api.SizeEstimate{Bytes: 1946 * mib, Method: api.SizeHead, Device: api.DeviceHailo, Detail: "HEF blob 1.9 GiB (HEAD Content-Length)"}

// ranked answers the pending estimate the way an agent would.
func ranked(m *Model, est api.SizeEstimate, by string) {
	m.Update(rankedMsg{seq: m.seq, ranking: console.Ranking{Estimate: est, SizedBy: by}})
}

// More hosts than rows: the list scrolls with the choice, pages, and above its first host is
// the form again.
func TestHostListScrolls(t *testing.T) {
	ctx := testCtx()
	var tower api.Member
	for _, mb := range ctx.Mesh.Members {
		if mb.Name == "tower" {
			tower = mb
		}
	}
	for i := range 20 {
		mb := tower
		mb.Name = fmt.Sprintf("node-%02d", i)
		ctx.Mesh.Members = append(ctx.Mesh.Members, mb)
	}
	m := New(ctx)
	m.SetSize(80, 20)
	typeText(m, "ollama://llama3.2:3b")
	ranked(m, api.SizeEstimate{Bytes: 3 << 30, Method: api.SizeRegistry}, "tower")
	press(m, "enter")
	require.Equal(t, fieldHosts, m.focus)
	require.Greater(t, len(m.hosts), 20)
	_, where := m.screen()
	require.Less(t, where.rows, len(m.hosts), "the list is longer than its rows")

	press(m, "g")
	for range 15 {
		press(m, "down")
	}
	assert.Equal(t, 15, m.hostCur.Pos)
	assert.Contains(t, m.View(), "> "+render.Pad(string(m.hosts[15].Verdict), 7)+" "+m.hosts[15].Host)
	assert.Equal(t, 20, strings.Count(m.View(), "\n")+1, "the view stays within its rows")
	press(m, "pgup")
	assert.Equal(t, 15-(where.rows-1), m.hostCur.Pos, "a page keeps one row of the last in view")
	press(m, "g", "up")
	assert.Equal(t, fieldPriority, m.focus, "above the first host is the form")
}

func TestTypingDebouncesTheEstimate(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	assert.True(t, m.Capturing(), "the source field takes letters at once")
	typeText(m, "ollama://llama3.2:3")
	first := m.seq
	typeText(m, "b")
	assert.Greater(t, m.seq, first, "each edit restarts the wait")
	assert.True(t, m.sizing)

	_, cmd := m.Update(debounceMsg{seq: first})
	assert.Nil(t, cmd, "a pause that an edit interrupted asks nothing")
	_, cmd = m.Update(debounceMsg{seq: m.seq})
	require.NotNil(t, cmd, "the last pause asks an agent")
	msg := cmd()
	require.IsType(t, rankedMsg{}, msg)
	assert.ErrorIs(t, msg.(rankedMsg).err, common.ErrNotConnected)
	m.Update(msg)
	assert.Contains(t, m.View(), "not connected to a mesh")
}

func TestStaleRankingDropped(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	typeText(m, "hailo://qwen2:1.5b")
	old := m.seq
	typeText(m, "x")
	m.Update(rankedMsg{seq: old, ranking: console.Ranking{Estimate: hailoEstimate, SizedBy: "pi5"}})
	assert.Nil(t, m.estimate, "an estimate for the previous text is dropped")
	assert.Empty(t, m.hosts)
	press(m, "backspace")
	ranked(m, hailoEstimate, "pi5")
	require.NotNil(t, m.estimate)
	require.Len(t, m.hosts, 4, "every agent is ranked, the console is not")
}

func TestRanksEveryHostAndTogglesSpread(t *testing.T) {
	ctx := testCtx()
	for i := range ctx.Mesh.Members {
		if h := ctx.Mesh.Members[i].Host; h != nil && h.Name == "tower" {
			h.Engines[0] = api.Engine{Runtime: api.RuntimeLlamaServer, Present: true, Healthy: true, Address: "/usr/bin/llama-server"}
		}
	}
	m := New(ctx)
	m.SetSize(120, 35)
	typeText(m, "hf://TheBloke/Mistral-7B-Instruct-v0.2-GGUF/mistral-7b-instruct-v0.2.Q2_K.gguf")
	ranked(m, api.SizeEstimate{Bytes: 2 << 30, Method: api.SizeHeader, Device: api.DeviceHost}, "mac-mini")
	require.Len(t, m.hosts, 4)
	assert.Equal(t, "tower", m.hosts[0].Host, "best fit: the tightest host first")
	assert.Equal(t, api.VerdictFits, m.hosts[0].Verdict)
	assert.Equal(t, "mac-mini", m.hosts[1].Host)

	cmd := press(m, "ctrl+s")
	assert.Equal(t, common.StatusMsg{Text: "spread: the host with the most room first"}, cmd())
	assert.Equal(t, "mac-mini", m.hosts[0].Host, "spread: the roomiest host first")
	assert.Contains(t, m.View(), "spread: the host with the most room first")

	// A mesh change re-ranks without asking anyone: the estimate is known.
	for i := range ctx.Mesh.Members {
		if ctx.Mesh.Members[i].Name == "mac-mini" {
			ctx.Mesh.Members[i].Liveness = api.Dead
		}
	}
	seq := m.seq
	_, cmd = m.Update(common.MeshMsg{View: ctx.Mesh})
	assert.Nil(t, cmd)
	assert.Equal(t, seq, m.seq)
	assert.Equal(t, "tower", m.hosts[0].Host)
	assert.Contains(t, m.View(), "host is dead")
}

func TestNamespaceReranksLocally(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	typeText(m, "ollama://mistral:7b")
	ranked(m, api.SizeEstimate{Bytes: 4506 * mib, Method: api.SizeShow}, "tower")
	seq := m.seq
	press(m, "tab")
	typeText(m, "team-b")
	assert.Equal(t, seq, m.seq, "the namespace does not change the size")
	for _, h := range m.hosts {
		if h.Host == "tower" {
			assert.Equal(t, api.CodeNamespaceNotAllow, h.Code)
		}
	}
	assert.Contains(t, m.View(), "namespace team-b not allowed")

	press(m, "tab")
	typeText(m, "4096")
	assert.Greater(t, m.seq, seq, "the context changes the KV cache: a new estimate")
}

func TestSuggestionsComplete(t *testing.T) {
	ctx := testCtx()
	ctx.Recent = []string{"hf://Qwen/Qwen2.5-Coder-7B-Instruct-GGUF/qwen2.5-coder-7b-instruct-q4_k_m.gguf"}
	m := New(ctx)
	m.SetSize(80, 24)
	all := m.Suggestions()
	require.Len(t, all, 1+5+3)
	assert.Equal(t, Suggestion{Source: ctx.Recent[0], Note: "recent"}, all[0])
	assert.Equal(t, Suggestion{Source: "hailo://deepseek_r1:1.5b", Note: "zoo on pi5"}, all[1])
	assert.Equal(t, Suggestion{Source: "ollama://llama3.2:3b", Note: "local on tower"}, all[6])

	typeText(m, "qwen2.5-i")
	got := m.Suggestions()
	require.Len(t, got, 1)
	assert.Equal(t, "hailo://qwen2.5-instruct:1.5b", got[0].Source)

	press(m, "down")
	assert.Equal(t, 0, m.sugg)
	assert.Equal(t, fieldSource, m.focus, "down walks the suggestions first")
	press(m, "tab")
	assert.Equal(t, "hailo://qwen2.5-instruct:1.5b", m.inputs[fieldSource].Value())
	assert.True(t, m.sizing, "a completion asks for an estimate")
	assert.Empty(t, m.Suggestions(), "the exact text is not suggested again")
	press(m, "tab")
	assert.Equal(t, fieldNamespace, m.focus, "tab without a suggestion moves on")

	// Typed text that names one source: tab completes it without ↓ first, as a shell does (a
	// user typing "70b" then tab left "70b" in the field and the focus in the next one).
	m = New(ctx)
	m.SetSize(80, 24)
	typeText(m, "qwen2.5-i")
	assert.Contains(t, m.View(), "tab completes it")
	assert.NotContains(t, m.View(), "↓ picks")
	press(m, "tab")
	assert.Equal(t, "hailo://qwen2.5-instruct:1.5b", m.inputs[fieldSource].Value())
	assert.Equal(t, fieldSource, m.focus)
	press(m, "tab")
	assert.Equal(t, fieldNamespace, m.focus, "completed: tab moves on")

	// Several: tab moves on unless one is picked (which one is not for tab to guess).
	m = New(ctx)
	m.SetSize(80, 24)
	typeText(m, "qwen")
	require.Greater(t, len(m.Suggestions()), 1)
	press(m, "tab")
	assert.Equal(t, fieldNamespace, m.focus)
}

// The suggestions show three at a time: the highlighted one stays in sight, and moving back up
// does not jump the window.
func TestSuggestionsScroll(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	all := m.Suggestions()
	require.Greater(t, len(all), 5)
	shown := func() (out []string) {
		for _, s := range all {
			if strings.Contains(m.View(), s.Source+"  ") {
				out = append(out, s.Source)
			}
		}
		return out
	}
	assert.Equal(t, []string{all[0].Source, all[1].Source, all[2].Source}, shown())
	press(m, "down", "down", "down", "down", "down")
	assert.Equal(t, 4, m.sugg)
	assert.Equal(t, []string{all[2].Source, all[3].Source, all[4].Source}, shown())
	press(m, "up")
	assert.Equal(t, []string{all[2].Source, all[3].Source, all[4].Source}, shown(), "the window stays while the highlight is in it")
	press(m, "up", "up")
	assert.Equal(t, []string{all[1].Source, all[2].Source, all[3].Source}, shown())
}

func TestRuntimeInferredAndCycled(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	typeText(m, "hailo://qwen2:1.5b")
	rt, inferred := m.Runtime()
	assert.Equal(t, api.RuntimeHailoOllama, rt)
	assert.True(t, inferred)
	assert.Contains(t, m.View(), "hailo-ollama (from hailo://)")

	seq := m.seq
	press(m, "ctrl+r")
	rt, inferred = m.Runtime()
	assert.Equal(t, api.RuntimeLlamaServer, rt)
	assert.False(t, inferred)
	assert.Greater(t, m.seq, seq, "another runtime is another estimate")
	ranked(m, hailoEstimate, "pi5")
	assert.Equal(t, api.CodeRuntimeMismatch, m.hosts[0].Code)
	assert.Contains(t, m.View(), "ctrl+r until the runtime is inferred")
	press(m, "ctrl+r", "ctrl+r", "ctrl+r")
	_, inferred = m.Runtime()
	assert.True(t, inferred, "the cycle comes back to inferred")
}

// contextField is the form with a source typed and the context field focused.
func contextField() *Model {
	m := New(testCtx())
	m.SetSize(80, 24)
	typeText(m, "ollama://llama3.2:3b")
	press(m, "tab", "tab")
	return m
}

func TestBadOptionsAreSaid(t *testing.T) {
	m := contextField()
	typeText(m, "lots")
	assert.Contains(t, m.View(), `context "lots" is not a number of tokens`)
	assert.False(t, m.sizing, "nothing is asked for a request that is not one")
	press(m, "backspace", "backspace", "backspace", "backspace", "tab")
	typeText(m, "urgent")
	assert.Contains(t, m.View(), `priority "urgent" is not one of batch, low, normal, high, critical`)
}

// The validator's words are read whole under the fields at 80 columns: they say what to type.
func TestSourceErrorWhole(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("hailo://qwen2")
	_, err := m.Request()
	require.Error(t, err)
	require.Greater(t, len(err.Error()), 80-labelWidth, "the message is longer than a line")
	view := m.View()
	assert.NotContains(t, view, "…")
	assert.Contains(t, strings.Join(strings.Fields(view), " "), err.Error())
}

func TestHalfTypedSourceAsksNothing(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	typeText(m, "qwen")
	assert.False(t, m.sizing)
	assert.Contains(t, m.View(), "a source looks like hailo://name:tag")
	for _, s := range []string{"hailo://", "ollama:/x", "qwen2", "/"} {
		assert.False(t, LooksLikeSource(s), s)
	}
	for _, s := range []string{"hailo://qwen2:1.5b", "HF://a/b/c.gguf", "/srv/x.gguf", "https://h/x.gguf", "file:///x.gguf"} {
		assert.True(t, LooksLikeSource(s), s)
	}
}

func TestOpenPrefills(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	cmd := m.Open("hailo://qwen2.5-instruct:1.5b")
	require.NotNil(t, cmd)
	assert.Equal(t, "hailo://qwen2.5-instruct:1.5b", m.inputs[fieldSource].Value())
	assert.True(t, m.sizing)
	assert.Equal(t, fieldSource, m.focus)

	cmd = press(m, "enter")
	assert.Equal(t, fieldSource, m.focus, "enter while sizing keeps the form")
	assert.Equal(t, common.StatusMsg{Text: "still sizing the model: enter again once the hosts are ranked"}, cmd())
	ranked(m, hailoEstimate, "pi5")
	press(m, "enter")
	require.Equal(t, fieldHosts, m.focus)
	m.Open("")
	assert.Equal(t, fieldSource, m.focus, "coming back to the view gives the form")
	assert.True(t, m.Capturing())
	assert.Equal(t, "hailo://qwen2.5-instruct:1.5b", m.inputs[fieldSource].Value())
}

func TestChoosingHosts(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("hailo://qwen2.5-instruct:1.5b")
	ranked(m, hailoEstimate, "pi5")
	press(m, "enter")
	assert.Equal(t, fieldHosts, m.focus)
	assert.False(t, m.Capturing(), "the host list leaves the global keys free")
	require.Equal(t, "pi5", m.hosts[m.hostCur.Pos].Host)
	assert.Equal(t, api.VerdictSwap, m.hosts[m.hostCur.Pos].Verdict)

	assert.Nil(t, press(m, "enter"), "a swap asks first")
	assert.True(t, m.Capturing())
	assert.Contains(t, m.View(), "place on pi5? it replaces qwen2:1.5b on the Hailo-10H (y/n)")
	assert.Contains(t, m.View(), "  it answers until the pull ends, then nothing does for 7–13 s (Hailo's figures)\n",
		"the swap's cost, whole, under the question")
	cmd := press(m, "n")
	assert.Equal(t, common.StatusMsg{Text: "not placed on pi5"}, cmd())
	assert.False(t, m.placing)

	cmd = press(m, "down", "enter")
	msg := cmd()
	require.IsType(t, common.StatusMsg{}, msg)
	assert.True(t, msg.(common.StatusMsg).Err, "a refused host is not asked")
	assert.Contains(t, msg.(common.StatusMsg).Text, "cannot take it: hailo:// needs a Hailo-10H")
	assert.False(t, m.placing)

	press(m, "g", "enter")
	cmd = press(m, "y")
	require.NotNil(t, cmd)
	assert.True(t, m.placing)
	assert.Equal(t, "pi5", m.target)
	assert.Contains(t, m.View(), "asking pi5 to admit it…")
	placed := cmd()
	assert.Equal(t, placedMsg{seq: m.placeSeq, err: common.ErrNotConnected}, placed)
	m.Update(placed)
	assert.False(t, m.placing)
	assert.Contains(t, m.View(), "✗ refused")
	assert.Contains(t, m.View(), "not connected to a mesh")

	press(m, "up")
	press(m, "esc")
	assert.Equal(t, fieldOut, m.focus, "esc: done with the result, out of the form")
	assert.False(t, m.Capturing(), "the next key is the console's (2 for Models), not text in the source")
	assert.Nil(t, m.placeErr)
	press(m, "enter")
	assert.Equal(t, fieldSource, m.focus, "enter edits the form, to place another")
	press(m, "esc")
	assert.False(t, m.Capturing(), "esc in the form gives the global keys back")
}

// Esc steps out, never back in: from the ranked hosts to the form, from the form out of both
// (the console's keys), and there it stays, however often it is pressed. Enter edits the form
// again and ↓ goes back to the hosts, at the best one.
func TestEscStepsOutNeverBackIn(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("hailo://qwen2.5-instruct:1.5b")
	ranked(m, hailoEstimate, "pi5")
	press(m, "enter", "down")
	require.Equal(t, fieldHosts, m.focus)
	require.Equal(t, 1, m.hostCur.Pos)

	press(m, "esc")
	assert.Equal(t, fieldSource, m.focus, "the first esc leaves the list for the form")
	assert.True(t, m.Capturing())
	press(m, "esc")
	assert.Equal(t, fieldOut, m.focus, "the second leaves the form")
	assert.False(t, m.Capturing(), "out of the form the keys are the console's")
	assert.Contains(t, m.View(), "› out of the form: the keys are the console's · enter edits it · ↓ the hosts")
	assert.NotContains(t, m.View(), "> swap", "no host is chosen out of the form")
	for range 3 {
		press(m, "esc")
		assert.Equal(t, fieldOut, m.focus, "esc out of the form leads nowhere back")
	}
	assert.Equal(t, []string{"enter edit the form", "↓/j the ranked hosts", "ctrl+s best-fit / spread", "ctrl+t split across hosts"}, helpOf(m))

	press(m, "j")
	assert.Equal(t, fieldHosts, m.focus, "↓ goes to the hosts")
	assert.Equal(t, m.bestIndex(), m.hostCur.Pos, "at the best one")
	press(m, "esc", "esc", "enter")
	assert.Equal(t, fieldSource, m.focus, "enter edits the form again")
	assert.True(t, m.Capturing())

	// With nothing to choose, out of the form ↓ stays where it is and says enter.
	m = New(testCtx())
	m.SetSize(80, 24)
	press(m, "esc", "down", "esc")
	assert.Equal(t, fieldOut, m.focus)
	assert.Contains(t, m.View(), "› out of the form: the keys are the console's · enter edits the form")
	assert.Equal(t, []string{"enter edit the form"}, helpOf(m))
}

func helpOf(m *Model) []string {
	var out []string
	for _, b := range m.ShortHelp() {
		out = append(out, b.Help().Key+" "+b.Help().Desc)
	}
	return out
}

func pullingPlacement(progress float64) api.Placement {
	return api.Placement{ID: "p-55aa", Host: "mac-mini", Model: "mistral-7b-instruct-v0.2", Runtime: api.RuntimeLlamaServer,
		Source: "hf://TheBloke/Mistral-7B-Instruct-v0.2-GGUF/mistral-7b-instruct-v0.2.Q2_K.gguf",
		State:  api.StatePulling, Progress: progress, PulledBytes: int64(progress * float64(2<<30)), TotalBytes: 2 << 30,
		Memory: api.SizeEstimate{Bytes: 3 << 30, Method: api.SizeHeader, Device: api.DeviceHost}}
}

// startPlacing places the Mistral GGUF on the mac-mini without a connection.
func startPlacing(t *testing.T, m *Model) {
	t.Helper()
	typeText(m, "hf://TheBloke/Mistral-7B-Instruct-v0.2-GGUF/mistral-7b-instruct-v0.2.Q2_K.gguf")
	ranked(m, api.SizeEstimate{Bytes: 3 << 30, Method: api.SizeHeader, Weights: 2 << 30, KV: 768 * mib, Compute: 200 * mib, Overhead: 56 * mib}, "mac-mini")
	press(m, "enter")
	require.Equal(t, "mac-mini", m.hosts[m.hostCur.Pos].Host)
	require.NotNil(t, press(m, "enter"))
	require.True(t, m.placing)
}

func TestFollowsAPlacementToReady(t *testing.T) {
	ctx := testCtx()
	m := New(ctx)
	m.SetSize(80, 24)
	startPlacing(t, m)

	_, cmd := m.Update(placedMsg{seq: m.placeSeq, p: pullingPlacement(0.1)})
	require.NotNil(t, cmd, "admitted: follow it")
	assert.Equal(t, waitedMsg{seq: m.placeSeq, p: pullingPlacement(0.1), err: common.ErrNotConnected}, cmd(), "the wait is a command")

	ch := make(chan tea.Msg)
	_, cmd = m.Update(progressMsg{seq: m.placeSeq, ch: ch, err: &apiclient.UnreachableError{URL: "http://192.168.1.30:7777", Err: fmt.Errorf("i/o timeout")}})
	assert.NotNil(t, cmd, "the wait goes on: its next message is read")
	assert.True(t, m.placing, "a host that does not answer once is asked again")
	assert.Contains(t, m.View(), "does not answer, asking again")

	m.Update(progressMsg{seq: m.placeSeq, ch: ch, p: pullingPlacement(0.42)})
	assert.Contains(t, m.View(), "42%")
	assert.NotContains(t, m.View(), "does not answer")

	loading := pullingPlacement(1)
	loading.State = api.StateLoading
	m.Update(progressMsg{seq: m.placeSeq, ch: ch, p: loading})
	assert.Contains(t, m.View(), "› loading starting llama-server and waiting for it to answer")
	// A daemon that runs already loads the model: nothing is started.
	for rt, says := range map[api.Runtime]string{api.RuntimeHailoOllama: "hailo-ollama loads it onto the Hailo-10H", api.RuntimeOllama: "ollama loads it"} {
		p := loading
		p.Runtime = rt
		assert.Equal(t, says, m.stepNote(api.StateLoading, &p))
	}

	// Ready on its host, while the wait goes on for the other agents to route it: enter does
	// not open the chat yet, so the view does not offer it (it once did, and the enter and the
	// keys typed after it were lost to the global keys).
	ready := loading
	ready.State = api.StateReady
	m.Update(progressMsg{seq: m.placeSeq, ch: ch, p: ready})
	require.True(t, m.placing)
	assert.NotContains(t, m.View(), "press enter to chat")
	assert.Contains(t, m.View(), "ready; waiting for the other hosts to route it · esc stops watching")
	press(m, "enter")
	_, opened := ctx.TakeNavigation()
	assert.False(t, opened, "enter while the wait goes on opens nothing")

	_, cmd = m.Update(waitedMsg{seq: m.placeSeq, p: ready})
	assert.Equal(t, common.StatusMsg{Text: "mistral-7b-instruct-v0.2 is ready on mac-mini"}, cmd())
	assert.False(t, m.placing)
	assert.Equal(t, []string{"hf://TheBloke/Mistral-7B-Instruct-v0.2-GGUF/mistral-7b-instruct-v0.2.Q2_K.gguf"}, ctx.Recent, "a placed source is remembered")
	assert.Contains(t, m.View(), "ready: mistral-7b-instruct-v0.2 on mac-mini — press enter to chat with it")

	press(m, "enter")
	nav, ok := ctx.TakeNavigation()
	require.True(t, ok, "enter on a ready model opens its chat")
	assert.Equal(t, common.Navigation{Page: common.PageChat, Arg: "mistral-7b-instruct-v0.2"}, nav)
}

func TestRefusalShowsTheFix(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	startPlacing(t, m)
	m.Update(placedMsg{seq: m.placeSeq, err: &api.Error{Code: api.CodeInsufficientMemory,
		Message: "needs 3.0 GiB, 1.1 GiB free of a 21.4 GiB budget", Fix: "free 1.9 GiB: delete qwen2.5-coder-7b"}})
	view := m.View()
	assert.Contains(t, view, "✗ refused: InsufficientMemory")
	assert.Contains(t, view, "needs 3.0 GiB, 1.1 GiB free")
	assert.Contains(t, view, "fix: free 1.9 GiB: delete qwen2.5-coder-7b")
}

// A Conflict's fix is one this form can follow: it has no name field.
func TestConflictFixIsOneTheFormCanFollow(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	startPlacing(t, m)
	m.Update(placedMsg{seq: m.placeSeq, err: &api.Error{Code: api.CodeConflict,
		Message: "namespace default already has a placement named qwen2:1.5b on this host (p-1, ready)",
		Fix:     "delete p-1 first (mesh delete p-1), or place it under another name (--name)"}})
	view := m.View()
	assert.Contains(t, view, "✗ refused: Conflict")
	assert.Contains(t, view, "delete it first (2 for Models,")
	assert.NotContains(t, view, "--name")
}

// Placing what runs already there is no error: it is followed like a new one, and said.
func TestAlreadyPlacedIsSaid(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	startPlacing(t, m)
	ready := pullingPlacement(1)
	ready.State = api.StateReady
	_, cmd := m.Update(placedMsg{seq: m.placeSeq, p: ready, existed: true})
	require.NotNil(t, cmd)
	var texts []string
	for _, c := range cmd().(tea.BatchMsg) {
		if c == nil {
			continue
		}
		if st, ok := c().(common.StatusMsg); ok {
			texts = append(texts, st.Text)
		}
	}
	assert.Contains(t, texts, "already placed: mistral-7b-instruct-v0.2 on mac-mini ("+ready.ID+"), nothing new placed")
}

func TestFailedPlacementShowsItsCode(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	startPlacing(t, m)
	m.Update(placedMsg{seq: m.placeSeq, p: pullingPlacement(0.5)})
	failed := pullingPlacement(0.5)
	failed.State, failed.Code, failed.Reason = api.StateFailed, api.CodePullFailed, "huggingface.co answered 503"
	_, err := failed.Outcome()
	m.Update(waitedMsg{seq: m.placeSeq, p: failed, err: err})
	assert.False(t, m.placing)
	assert.Contains(t, m.View(), "✗ refused: PullFailed")
	assert.Contains(t, m.View(), "huggingface.co answered 503")
}

func TestStopWatchingDropsLateAnswers(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	startPlacing(t, m)
	seq := m.placeSeq
	cmd := press(m, "esc")
	assert.Equal(t, common.StatusMsg{Text: "still placing on mac-mini: follow it in Models"}, cmd())
	assert.False(t, m.placing)
	_, cmd = m.Update(placedMsg{seq: seq, p: pullingPlacement(0.1)})
	assert.Nil(t, cmd)
	assert.Nil(t, m.placement, "the answer for a placement no longer watched is dropped")
	_, cmd = m.Update(progressMsg{seq: seq, ch: make(chan tea.Msg), p: pullingPlacement(0.2)})
	assert.Nil(t, cmd, "a wait given up is not read on")
	_, cmd = m.Update(waitedMsg{seq: seq, p: pullingPlacement(0.2)})
	assert.Nil(t, cmd)
	assert.Nil(t, m.placement)
}

func TestDeletedWhileWatching(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	startPlacing(t, m)
	m.Update(placedMsg{seq: m.placeSeq, p: pullingPlacement(0.1)})
	m.Update(waitedMsg{seq: m.placeSeq, p: pullingPlacement(0.1), err: &api.Error{Code: api.CodeNotFound, Message: "no placement p-55aa"}})
	assert.False(t, m.placing)
	assert.Contains(t, m.View(), "it was deleted")
}

func TestHint(t *testing.T) {
	refused := func(code api.Code) api.Ranked { return api.Ranked{Verdict: api.VerdictRefused, Code: code} }
	assert.Empty(t, Hint([]api.Ranked{refused(api.CodeInsufficientMemory), {Verdict: api.VerdictFits}}), "a host fits: no hint")
	assert.Contains(t, Hint([]api.Ranked{refused(api.CodeUnreachable), refused(api.CodeAcceleratorMissing), refused(api.CodeAcceleratorMissing)}), "Hailo-10H")
	// The advice follows the host that came nearest, not the most common verdict: the Hailo
	// host lacks its runtime; the one host with the runtime is out of memory.
	assert.Contains(t, Hint([]api.Ranked{refused(api.CodeAcceleratorMissing), refused(api.CodeAcceleratorMissing), refused(api.CodeEngineUnavailable)}), "install the runtime")
	assert.Contains(t, Hint([]api.Ranked{refused(api.CodeEngineUnavailable), refused(api.CodeEngineUnavailable), refused(api.CodeInsufficientMemory)}), "free memory")
	assert.Contains(t, Hint([]api.Ranked{refused(api.CodeAcceleratorMissing), refused(api.CodeNotFound)}), "check the model's name")
	assert.Empty(t, Hint([]api.Ranked{refused(api.CodeUnreachable)}), "only dead hosts: nothing to say about the request")
}

func TestView(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			m := New(testCtx())
			m.SetSize(size[0], size[1])
			m.Open("hailo://qwen2.5-instruct:1.5b")
			ranked(m, hailoEstimate, "pi5")
			press(m, "enter")
			golden.RequireEqual(t, []byte(m.View()))
			// The swap's question, with what the swap costs under it.
			t.Run("swap question", func(t *testing.T) {
				press(m, "enter")
				golden.RequireEqual(t, []byte(m.View()))
			})
		})
	}
}

func TestViewSuggestions(t *testing.T) {
	ctx := testCtx()
	ctx.Recent = []string{"hailo://qwen2:1.5b"}
	m := New(ctx)
	m.SetSize(80, 24)
	typeText(m, "qwen")
	press(m, "down", "down")
	golden.RequireEqual(t, []byte(m.View()))
}

func TestViewEmpty(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	golden.RequireEqual(t, []byte(m.View()))
}

func TestViewPulling(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	startPlacing(t, m)
	m.Update(placedMsg{seq: m.placeSeq, p: pullingPlacement(0.42)})
	golden.RequireEqual(t, []byte(m.View()))
}

func TestViewRefused(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	startPlacing(t, m)
	m.Update(placedMsg{seq: m.placeSeq, err: &api.Error{Code: api.CodeInsufficientMemory,
		Message: "needs 3.0 GiB, 1.1 GiB free of a 21.4 GiB budget (4.7 GiB committed, 5.6 GiB reserved by an admission in flight)",
		Fix:     "free 1.9 GiB: delete qwen2.5-coder-7b, or wait for llama-3.1-8b-instruct to finish"}})
	golden.RequireEqual(t, []byte(m.View()))
}

// A long reason is read whole: the current host's (the one chosen, or when none can take it the
// nearest, here the only host with a Hailo) wraps under its row, and the hint under the list
// wraps too; the other rows keep one line each.
func TestViewLongReason(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			m := New(testCtx())
			m.SetSize(size[0], size[1])
			typeText(m, "hailo://qwen9:1b")
			m.Update(rankedMsg{seq: m.seq, ranking: console.Ranking{SizedBy: "pi5", SizeCode: api.CodeNotFound,
				SizeError: "no such model in the Hailo zoo 5.1.1 of pi5: available are qwen2:1.5b, qwen2.5-instruct:1.5b, qwen2.5-coder:1.5b, llama3.2:1b, deepseek-r1:1.5b"}})
			press(m, "enter")
			require.Equal(t, "pi5", m.hosts[m.hostCur.Pos].Host, "none fits: the list starts at the nearest")
			view := m.View()
			words := strings.ReplaceAll(strings.Join(strings.Fields(view), " "), "- ", "-") // a wrap may break at a hyphen
			assert.Contains(t, words, "does not offer qwen9:1b; it offers deepseek_r1:1.5b, llama3.2:1b, qwen2:1.5b, qwen2.5-coder:1.5b, qwen2.5-instruct:1.5b", "the reason, whole")
			assert.NotContains(t, view, "…")
			golden.RequireEqual(t, []byte(view))

			// Moving on wraps that host's reason instead; a click on a wrapped line is a
			// click on its host, and the line after it is the next host.
			press(m, "up")
			_, where := m.screen()
			assert.Equal(t, []int{0, 1, 2, 3}, where.owner, "pi4's reason is short: one line a host")
			press(m, "down")
			_, where = m.screen()
			first := slices.Index(where.owner, 2)
			last := first
			for last+1 < len(where.owner) && where.owner[last+1] == 2 {
				last++
			}
			require.Greater(t, last, first, "pi5's reason takes more than its row")
			click := func(line int) tea.Cmd {
				cmd, ok := m.click(tea.MouseMsg{X: 40, Y: where.top + line, Action: tea.MouseActionPress, Button: tea.MouseButtonLeft})
				require.True(t, ok)
				return cmd
			}
			msg := click(last)()
			assert.Contains(t, msg.(common.StatusMsg).Text, "pi5 cannot take it", "a click on the selected host's last line is a click on it")
			click(last + 1)
			assert.Equal(t, "tower", m.hosts[m.hostCur.Pos].Host)
		})
	}
}

func TestViewRankedGGUF(t *testing.T) {
	m := New(testCtx())
	m.SetSize(120, 35)
	typeText(m, "hf://TheBloke/Mistral-7B-Instruct-v0.2-GGUF/mistral-7b-instruct-v0.2.Q2_K.gguf")
	ranked(m, api.SizeEstimate{Bytes: 3 << 30, Method: api.SizeHeader, Weights: 2 << 30, KV: 768 * mib, Compute: 200 * mib, Overhead: 56 * mib}, "mac-mini")
	golden.RequireEqual(t, []byte(m.View()))
}

// fakeAgent answers the agent API calls the place view makes, on loopback: the mesh (every
// agent's API is this server), an estimate, an admission, and a placement that goes pulling →
// loading → ready one read at a time, the agent too busy to answer one read in between.
func fakeAgent(t *testing.T) *console.Conn {
	t.Helper()
	var mu sync.Mutex
	reads := 0
	var placed api.PlacementRequest
	mux := http.NewServeMux()
	var addr string
	mux.HandleFunc("GET /v1/mesh", func(w http.ResponseWriter, r *http.Request) {
		v := tuitest.SampleMesh(now)
		for i := range v.Members {
			if h := v.Members[i].Host; h != nil {
				h.APIAddr = addr
			}
		}
		_ = json.NewEncoder(w).Encode(v)
	})
	mux.HandleFunc("POST /v1/estimate", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(api.Estimation{Estimate: hailoEstimate, Verdict: api.VerdictFits})
	})
	mux.HandleFunc("POST /v1/placements", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewDecoder(r.Body).Decode(&placed)
		_ = json.NewEncoder(w).Encode(api.Placement{ID: "p-1", Host: "pi5", Model: "qwen2.5-instruct:1.5b", Source: placed.Source,
			Runtime: api.RuntimeHailoOllama, State: api.StateSizing, Memory: hailoEstimate})
	})
	mux.HandleFunc("GET /v1/placements/p-1", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		p := api.Placement{ID: "p-1", Host: "pi5", Model: "qwen2.5-instruct:1.5b", Source: placed.Source, Runtime: api.RuntimeHailoOllama, Memory: hailoEstimate}
		switch reads {
		case 1:
			p.State, p.Progress = api.StatePulling, 0.5
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: api.CodeTooBusy, Message: "busy"}})
			return
		case 3:
			p.State = api.StateLoading
		default:
			p.State = api.StateReady
		}
		_ = json.NewEncoder(w).Encode(p)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	addr = srv.Listener.Addr().String()
	conn, err := console.Connect(context.Background(), console.Options{AgentURL: srv.URL, Token: "t", Poll: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// placeThroughAgent places the Hailo model through fakeAgent, ranking it for real on the way,
// and returns the view, admitted, with the command that starts its wait.
func placeThroughAgent(t *testing.T, ctx *common.Context) (*Model, tea.Cmd) {
	t.Helper()
	ctx.Conn = fakeAgent(t)
	m := New(ctx)
	m.SetSize(80, 24)
	m.Open("hailo://qwen2.5-instruct:1.5b")
	_, cmd := m.Update(debounceMsg{seq: m.seq})
	require.NotNil(t, cmd)
	m.Update(cmd())
	require.NoError(t, m.rankErr)
	require.NotNil(t, m.estimate)
	assert.Equal(t, int64(1946*mib), m.estimate.Estimate.Bytes)
	assert.Equal(t, "pi5", m.hosts[0].Host)

	press(m, "enter", "enter")
	cmd = press(m, "y")
	_, cmd = m.Update(cmd())
	require.NotNil(t, m.placement, "admitted")
	require.True(t, m.placing)
	require.NotNil(t, cmd)
	return m, cmd
}

// TestPlacesThroughAnAgent runs the view's commands for real against an agent API on loopback;
// only the debounce timer is skipped (its message is sent directly).
func TestPlacesThroughAnAgent(t *testing.T) {
	ctx := testCtx()
	m, cmd := placeThroughAgent(t, ctx)
	// The wait's messages, each read by the command the last one re-armed, until it ends.
	var states []api.PlacementState
	askedAgain := false
	for m.placing {
		require.NotNil(t, cmd)
		_, cmd = m.Update(cmd())
		if s := m.placement.State; states == nil || states[len(states)-1] != s {
			states = append(states, s)
		}
		if m.pollErr != nil {
			askedAgain = true
			assert.Contains(t, m.View(), "pi5 does not answer, asking again: TooBusy: busy")
		}
	}
	assert.Equal(t, []api.PlacementState{api.StatePulling, api.StateLoading, api.StateReady}, states)
	assert.True(t, askedAgain, "the busy answer was shown, and the wait went on")
	assert.Nil(t, m.placeErr)
	assert.Equal(t, []string{"hailo://qwen2.5-instruct:1.5b"}, ctx.Recent)
	assert.Contains(t, m.View(), "ready: qwen2.5-instruct:1.5b on pi5")
}

// Stopping watching ends the wait behind the view: its channel closes, so neither the goroutine
// nor the command reading it is left behind.
func TestStopWatchingEndsTheWait(t *testing.T) {
	m, cmd := placeThroughAgent(t, testCtx())
	_, cmd = m.Update(cmd())
	require.Equal(t, api.StatePulling, m.placement.State, "the first look")
	require.NotNil(t, cmd)

	press(m, "esc")
	assert.False(t, m.placing)
	for msg := cmd(); msg != nil; msg = cmd() {
		_, next := m.Update(msg)
		assert.Nil(t, next, "what the wait still sent is dropped")
	}
}

// GGUF files a llama-server host offers are suggested as file:// sources on that host.
func TestSuggestsLocalGGUF(t *testing.T) {
	v := tuitest.SampleMesh(now)
	for i, mb := range v.Members {
		if mb.Host == nil {
			continue
		}
		for j, e := range mb.Host.Engines {
			if e.Runtime == api.RuntimeLlamaServer && e.Present {
				v.Members[i].Host.Engines[j].Models = []string{"/srv/models/tinyllama.gguf"}
			}
		}
	}
	var found *Suggestion
	for _, s := range Suggest(v, nil) {
		if s.Source == "file:///srv/models/tinyllama.gguf" {
			found = &s
		}
	}
	require.NotNil(t, found)
	assert.Contains(t, found.Note, "file on ")
}

// Long paths at 80 columns: three GGUF files in one deep folder are told apart by their names
// (a path loses its middle, not its end), and the size's breakdown wraps rather than losing
// its last part.
func TestViewLongPaths(t *testing.T) {
	ctx := testCtx()
	dir := "/var/folders/x1/abcdefghij0123456789/T/llmkube-localmesh-1562507473/mac-mini/gguf/"
	for i, mb := range ctx.Mesh.Members {
		if mb.Host == nil {
			continue
		}
		for j, e := range mb.Host.Engines {
			if e.Runtime == api.RuntimeLlamaServer && e.Present {
				ctx.Mesh.Members[i].Host.Engines[j].Models = []string{dir + "llama-sim-1b.gguf", dir + "sim-tiny.gguf", dir + "sim-split.gguf"}
			}
		}
	}
	m := New(ctx)
	m.SetSize(80, 24)
	typeText(m, "file://")
	press(m, "down")
	view := m.View()
	for _, name := range []string{"/llama-sim-1b.gguf", "/sim-tiny.gguf", "/sim-split.gguf"} {
		assert.Contains(t, view, name)
	}
	golden.RequireEqual(t, []byte(view))

	t.Run("breakdown", func(t *testing.T) {
		press(m, "enter")
		ranked(m, api.SizeEstimate{Bytes: 557 * mib, Method: api.SizeHeader, Weights: 5 * mib, KV: 4 * mib, Compute: 31 * mib, Cache: 4 * mib, Overhead: 513 * mib}, "mac-mini")
		view := m.View()
		assert.Contains(t, view, "overhead 513 MiB")
		golden.RequireEqual(t, []byte(view))
	})
}

// An unknown size says why, in the sizer's words.
func TestUnknownSizeSaysWhy(t *testing.T) {
	r := console.Ranking{SizedBy: "gpu-server", SizeError: "the model's size cannot be known before pulling it, so it is refused: the Ollama registry did not answer: dial tcp: no route to host"}
	assert.Equal(t, "size unknown (sized by gpu-server): "+r.SizeError, Estimate(r))
	assert.Equal(t, "size unknown: sized by gpu-server, nothing will load blind", Estimate(console.Ranking{SizedBy: "gpu-server"}))
}

// A click on a ranked host selects it (out of the form); a second click places there.
func TestClickOnARankedHost(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	typeText(m, "hf://TheBloke/Mistral-7B-Instruct-v0.2-GGUF/mistral-7b-instruct-v0.2.Q2_K.gguf")
	ranked(m, api.SizeEstimate{Bytes: 3 << 30, Method: api.SizeHeader}, "mac-mini")
	require.True(t, m.Capturing(), "typing in the form")
	lines := strings.Split(m.View(), "\n")
	y := -1
	for i, l := range lines {
		if strings.Contains(l, m.hosts[0].Host) && strings.Contains(l, string(m.hosts[0].Verdict)) {
			y = i
		}
	}
	require.GreaterOrEqual(t, y, 0, "the best host is on screen")
	click := tea.MouseMsg{X: 4, Y: y, Action: tea.MouseActionPress, Button: tea.MouseButtonLeft}
	m.Update(click)
	assert.Equal(t, fieldHosts, m.focus, "out of the form, into the list")
	assert.Equal(t, 0, m.hostCur.Pos)
	assert.False(t, m.Capturing())
	require.Equal(t, api.VerdictFits, m.hosts[0].Verdict, m.hosts[0].Host)
	_, cmd := m.Update(click)
	require.NotNil(t, cmd)
	assert.True(t, m.placing, "a second click places there")
	assert.Equal(t, m.hosts[0].Host, m.target)
	_, cmd = m.Update(tea.MouseMsg{X: 4, Y: 0, Action: tea.MouseActionPress, Button: tea.MouseButtonLeft})
	assert.Nil(t, cmd, "a click elsewhere does nothing")
}

// A refusal whose fix is a switch the form lacks says how to do it from a shell.
func TestMemoryCheckFixIsOneTheUserCanRun(t *testing.T) {
	m := New(testCtx())
	m.SetSize(120, 35)
	startPlacing(t, m)
	m.Update(placedMsg{seq: m.placeSeq, err: &api.Error{Code: api.CodeMemoryCheckFailed,
		Message: "the model's size cannot be known before pulling it, so it is refused: no answer",
		Fix:     `fix the cause, or load it anyway with memory_check "warn" (admin) or --memory-check-mode warn`}})
	view := m.View()
	assert.Contains(t, view, "from a shell: llmkube-tui mesh place hf://TheBloke/")
	assert.Contains(t, view, "--host mac-mini --load-anyway")
	assert.NotContains(t, view, "memory-check-mode")
}

// The context field reads what the CLI's --context reads: 8k, 0 for the default, nothing cut;
// the breakdown adds up to the total, prompt cache included.
func TestContextFieldAndBreakdown(t *testing.T) {
	m := contextField()
	typeText(m, "8k")
	req, err := m.Request()
	require.NoError(t, err)
	assert.Equal(t, 8192, req.Context)
	press(m, "backspace", "backspace")
	typeText(m, "0")
	req, err = m.Request()
	require.NoError(t, err, "0 is the default, as the message says")
	assert.Equal(t, 0, req.Context)
	press(m, "backspace")
	typeText(m, "104857600")
	assert.Equal(t, "104857600", m.inputs[fieldContext].Value(), "nothing is cut silently")
	assert.Contains(t, m.View(), `context "104857600" is past the limit`)

	e := api.SizeEstimate{Bytes: 17 * 1024 * mib, Weights: 4 * 1024 * mib, KV: 4 * 1024 * mib, Compute: 1024 * mib, Cache: 7 * 1024 * mib, Overhead: 1024 * mib}
	assert.Equal(t, "weights 4.0 GiB + KV cache 4.0 GiB + compute 1.0 GiB + prompt cache 7.0 GiB + overhead 1.0 GiB", Breakdown(e))
}

// A confirmed swap says what it replaced once the new model is ready.
func TestSwapSaysWhatItReplaced(t *testing.T) {
	m := New(testCtx())
	m.SetSize(80, 24)
	m.Open("hailo://qwen2.5-instruct:1.5b")
	ranked(m, hailoEstimate, "pi5")
	press(m, "enter", "enter") // pi5 swaps: it asks
	require.NotNil(t, press(m, "y"))
	require.True(t, m.placing)
	cmd := m.waited(waitedMsg{seq: m.placeSeq, p: api.Placement{ID: "p-9", Model: "qwen2.5-instruct:1.5b", Host: "pi5", State: api.StateReady}})
	assert.Equal(t, common.StatusMsg{Text: "replaced qwen2:1.5b on pi5 by qwen2.5-instruct:1.5b, ready"}, cmd())
}

// In a mesh whose every agent is offline (the demo's), the source field's placeholder offers
// what its hosts hold, not an hf:// source they would refuse; elsewhere it shows every kind.
func TestSourceHintOffline(t *testing.T) {
	ctx := testCtx()
	m := New(ctx)
	m.SetSize(120, 35)
	assert.Contains(t, m.View(), "hf://owner/repo/file.gguf", "an online mesh: hf:// is an example")
	m.SetSize(80, 24)

	offline := ctx.Mesh
	offline.Members = slices.Clone(offline.Members)
	for i, mb := range offline.Members {
		if mb.Host != nil {
			h := *mb.Host
			h.Offline = true
			offline.Members[i].Host = &h
		}
	}
	ctx.Mesh = offline
	m.Update(common.MeshMsg{})
	v := m.View()
	assert.NotContains(t, v, "hf://")
	assert.Contains(t, v, "offline mesh: ↓ lists its GGUF files, hailo://, ollama://")
}

// splitCtx is the sample mesh with an rpc-server of one protocol on pi5, mac-mini and tower, and
// llama-server on the Mac: the hosts a GGUF model may be split across.
func splitCtx() *common.Context {
	ctx := testCtx()
	for i := range ctx.Mesh.Members {
		h := ctx.Mesh.Members[i].Host
		if h == nil || ctx.Mesh.Members[i].Liveness != api.Alive {
			continue
		}
		h.Engines = append(h.Engines, api.Engine{Runtime: api.RuntimeRPCServer, Present: true, Healthy: true, Version: "5.0.0"})
	}
	return ctx
}

// bigGGUF is a 32-layer model of 16.8 GiB: no sample host holds it alone.
var bigGGUF = api.SizeEstimate{Bytes: 16*1024*mib + 768*mib, Weights: 14 * 1024 * mib, KV: 2 * 1024 * mib, Compute: 512 * mib,
	Overhead: 256 * mib, Method: api.SizeHeader, Layers: 32}

const bigSource = "hf://owner/repo/big-q4.gguf"

func TestViewSplit(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 35}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			m := New(splitCtx())
			m.SetSize(size[0], size[1])
			m.Open(bigSource)
			ranked(m, bigGGUF, "mac-mini")
			press(m, "enter")
			require.True(t, m.showsSplit(), "no host holds it alone: the split is shown")
			golden.RequireEqual(t, []byte(m.View()))
		})
	}
}

// The split is offered when no host holds the model alone, and on ctrl+t when one does; enter
// sends it to the main with the plan's members.
func TestSplitKeys(t *testing.T) {
	m := New(splitCtx())
	m.SetSize(80, 24)
	m.Open(bigSource)
	ranked(m, bigGGUF, "mac-mini")
	require.True(t, noneFits(m.hosts))
	require.NotNil(t, m.plan)
	require.True(t, m.plan.Fits, m.plan.Reason)
	view := m.View()
	assert.Contains(t, view, "no host holds it alone")
	assert.Contains(t, view, "main "+m.plan.Main)
	for _, mb := range m.plan.Members {
		assert.Contains(t, view, mb.Host)
	}
	assert.Contains(t, view, "left out pi4: host is suspect")

	// ctrl+t with no host holding it alone keeps the split: there is nothing else to place.
	cmd := press(m, "ctrl+t")
	assert.True(t, m.showsSplit())
	assert.Contains(t, statusOf(cmd), "the only way")

	press(m, "enter")
	require.Equal(t, fieldHosts, m.focus)
	cmd = press(m, "enter")
	require.NotNil(t, cmd)
	require.True(t, m.placing)
	assert.Equal(t, m.plan.Main, m.target)
	require.NotNil(t, m.req.Split)
	var hosts []string
	for _, mb := range m.plan.Members {
		hosts = append(hosts, mb.Host)
	}
	assert.Equal(t, hosts, m.req.Split.Hosts)
	assert.Contains(t, m.View(), "split across "+strings.Join(hosts, ", ")+" · "+m.plan.Main+" is the main")

	// A small model: the hosts are ranked, and ctrl+t asks for the split all the same.
	m = New(splitCtx())
	m.SetSize(80, 24)
	m.Open(bigSource)
	small := api.SizeEstimate{Bytes: 3 << 30, Weights: 2 << 30, KV: 768 * mib, Compute: 200 * mib, Overhead: 56 * mib, Method: api.SizeHeader, Layers: 24}
	ranked(m, small, "mac-mini")
	require.False(t, m.showsSplit(), "a host holds it: the ranked hosts first")
	assert.NotContains(t, m.View(), "LAYERS")
	press(m, "ctrl+t")
	require.True(t, m.showsSplit())
	assert.Contains(t, m.View(), "ctrl+t: the hosts for the whole model")
	press(m, "enter", "enter")
	require.True(t, m.placing)
	assert.Equal(t, m.plan.Main, m.target)
	require.NotNil(t, m.req.Split)

	// A split that cannot be: enter says why, nothing is placed.
	m = New(splitCtx())
	m.SetSize(80, 24)
	m.Open(bigSource)
	huge := bigGGUF
	huge.Weights *= 4
	huge.Bytes += 3 * bigGGUF.Weights
	ranked(m, huge, "mac-mini")
	require.False(t, m.plan.Fits)
	require.False(t, m.showsSplit(), "no split holds it either: the refusals are shown")
	assert.Contains(t, m.View(), "nor split across hosts (ctrl+t): the")
	press(m, "ctrl+t", "enter")
	assert.Contains(t, m.View(), "refused: the")
	cmd = press(m, "enter")
	assert.False(t, m.placing)
	assert.Contains(t, statusOf(cmd), "the split cannot be placed")
}

// statusOf is the status line a command sets.
func statusOf(cmd tea.Cmd) string {
	if cmd == nil {
		return ""
	}
	if s, ok := cmd().(common.StatusMsg); ok {
		return s.Text
	}
	return ""
}

// Enter on the split sends it through the console's placement call: the agent is asked for a
// split with the plan's members.
func TestSplitPlacesThroughTheMain(t *testing.T) {
	ctx := splitCtx()
	var mu sync.Mutex
	var placed []api.PlacementRequest
	mux := http.NewServeMux()
	var addr string
	mux.HandleFunc("GET /v1/mesh", func(w http.ResponseWriter, r *http.Request) {
		v := splitCtx().Mesh
		for i := range v.Members {
			if h := v.Members[i].Host; h != nil {
				h.APIAddr = addr
			}
		}
		_ = json.NewEncoder(w).Encode(v)
	})
	mux.HandleFunc("POST /v1/estimate", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(api.Estimation{Estimate: bigGGUF, Verdict: api.VerdictRefused})
	})
	mux.HandleFunc("POST /v1/placements", func(w http.ResponseWriter, r *http.Request) {
		var req api.PlacementRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		placed = append(placed, req)
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(api.Placement{ID: "p-s", Host: "mac-mini", Model: "big-q4", Source: req.Source,
			Runtime: api.RuntimeLlamaServer, State: api.StateSizing})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	addr = srv.Listener.Addr().String()
	conn, err := console.Connect(context.Background(), console.Options{AgentURL: srv.URL, Token: "t", Poll: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	ctx.Conn = conn

	m := New(ctx)
	m.SetSize(80, 24)
	m.Open(bigSource)
	_, cmd := m.Update(debounceMsg{seq: m.seq})
	require.NotNil(t, cmd)
	m.Update(cmd())
	require.NoError(t, m.rankErr)
	require.True(t, m.showsSplit(), "no host holds it alone")
	cmd = press(m, "enter", "enter")
	require.NotNil(t, cmd)
	msg := cmd()
	m.Update(msg)
	require.NoError(t, m.placeErr)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, placed, 1)
	require.NotNil(t, placed[0].Split, "the agent is asked for a split")
	assert.Equal(t, []string{"mac-mini", "tower"}, placed[0].Split.Hosts)
	assert.Equal(t, bigSource, placed[0].Source)
}

// Ranked again after a placement, the host the model runs on (the sample mesh's tower runs
// llama3.2:3b) is tagged "runs" and says so, not "best" for another copy.
func TestRankedAgainShowsWhereItRuns(t *testing.T) {
	m := New(testCtx())
	m.SetSize(100, 24)
	typeText(m, "ollama://llama3.2:3b")
	ranked(m, api.SizeEstimate{Bytes: 3 << 30, Method: api.SizeRegistry}, "tower")
	var row string
	for _, l := range strings.Split(m.View(), "\n") {
		if strings.Contains(l, " tower ") {
			row = l
		}
	}
	require.NotEmpty(t, row, m.View())
	assert.Contains(t, row, "fits    tower      runs already runs here (p-4d5e6f, ready)")
	assert.NotContains(t, row, "best")
}

// Following a split, the sizing step says what each member reserves, the figure the plan showed
// for it (NEED: the main's llama-server and its layers), not the main placement's own part.
func TestViewSplitFollowed(t *testing.T) {
	m := New(splitCtx())
	m.SetSize(80, 24)
	m.Open(bigSource)
	ranked(m, bigGGUF, "mac-mini")
	require.True(t, m.showsSplit())
	press(m, "enter")
	require.NotNil(t, press(m, "enter"))
	require.True(t, m.placing)
	plan := *m.plan
	main := plan.Members[0]
	require.True(t, main.Main)
	require.Positive(t, main.Need, "the main holds layers too")
	preview := render.Bytes(main.Reserves())

	// The main placement as the agent makes it: its own Memory is llama-server's part alone.
	p := api.Placement{ID: "p-s", Host: plan.Main, Model: "big-q4", Source: bigSource, Runtime: api.RuntimeLlamaServer,
		State: api.StatePulling, Memory: api.SizeEstimate{Bytes: main.MainNeed, Method: api.SizeHeader, Device: api.DeviceHost},
		Split: &plan}
	m.Update(placedMsg{seq: m.placeSeq, p: p})
	view := m.View()
	assert.NotContains(t, view, render.Bytes(main.MainNeed)+" reserved", "not the main's own part as the split's")
	assert.Contains(t, view, fmt.Sprintf("%s %s = llama-server %s + ", plan.Main, preview, render.Bytes(main.MainNeed)),
		"the main's figure is the plan's, with its parts named")
	golden.RequireEqual(t, []byte(view))

	// Starting: what the main has sent its members of their weights.
	p.State, p.Progress, p.PulledBytes, p.TotalBytes = api.StateLoading, 0.25, 1<<30, 4<<30
	m.Update(progressMsg{seq: m.placeSeq, p: p})
	assert.Contains(t, m.View(), "25%  1.0 GiB of 4.0 GiB sent to the members")
}
