package hosts

import (
	"fmt"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/internal/tuitest"
)

// At 80 columns and below, names stay whole: the least telling columns shrink and go first,
// and STATE is as wide as the longest state shown, not as the longest possible.
func TestNarrowKeepsNames(t *testing.T) {
	ctx := tuitest.Context()
	long := "rack2-gpu-node-0042.lab"
	ctx.Mesh.Members[0].Name = long
	for _, w := range []int{120, 80, 60} {
		m := New(ctx)
		m.SetSize(w, 20)
		view := m.View()
		assert.Contains(t, view, long, "at %d columns", w)
		assert.LessOrEqual(t, lipgloss.Width(view), w)
		head := strings.Split(view, "\n")[2]
		assert.Contains(t, head, "STATE   ", "at %d columns", w)
		assert.NotContains(t, head, "STATE    ", "no blank room kept for states not shown")
		if w <= 80 {
			assert.NotContains(t, head, "CHIP", "the chip goes first")
		}
	}
}

func TestClickSelectsAndOpens(t *testing.T) {
	ctx := tuitest.Context()
	m := New(ctx)
	m.SetSize(120, 20)
	press := tea.MouseMsg{X: 3, Y: 3 + 1, // under the summary, the legend and the titles
		Action: tea.MouseActionPress, Button: tea.MouseButtonLeft}
	_, cmd := m.Update(press)
	assert.Nil(t, cmd)
	_, opened := ctx.TakeNavigation()
	assert.False(t, opened, "a first click selects only")
	sel, ok := m.Selected()
	require.True(t, ok)
	assert.Equal(t, m.Rows()[1].Name, sel.Name)
	m.Update(press)
	nav, opened := ctx.TakeNavigation()
	require.True(t, opened, "a second click opens the host")
	assert.Equal(t, common.Navigation{Page: common.PageHostDetail, Arg: sel.Name}, nav)
}

// MODELS counts what a host holds: placements evicted by swaps stay listed in Models (to place
// again) but a Hailo-10H that swapped twice holds one model, not three.
func TestModelsCountsWhatIsHeld(t *testing.T) {
	mb := api.Member{Name: "pi5", Role: api.RoleAgent, Placements: []api.Placement{
		{State: api.StateReady}, {State: api.StateEvicted}, {State: api.StateEvicted}, {State: api.StateFailed}, {State: api.StatePulling}}}
	assert.Equal(t, 2, Held(mb))
}

// A host's shares of splits show beside its models, "+Ns", at 120 and 80 columns, with the
// legend where it fits; a share is not a model, in the count nor in the summary's ready.
func TestSplitSharesShown(t *testing.T) {
	ctx := tuitest.Context()
	part := func(host string) api.Placement {
		return api.Placement{ID: "p-split.part." + host, Host: host, Model: "big", Runtime: api.RuntimeRPCServer, State: api.StateReady,
			Part: &api.SplitPart{Parent: "p-split", Main: "mac-mini", Member: api.SplitMember{Host: host}}}
	}
	readyBefore := Summary(ctx.Mesh, 120)
	for i, mb := range ctx.Mesh.Members {
		if mb.Name == "mac-mini" || mb.Name == "tower" {
			ctx.Mesh.Members[i].Placements = append(ctx.Mesh.Members[i].Placements, part(mb.Name))
		}
	}
	assert.Equal(t, readyBefore, Summary(ctx.Mesh, 120), "the parts add no ready model")
	for _, w := range []int{120, 80} {
		m := New(ctx)
		m.SetSize(w, 20)
		view := m.View()
		assert.LessOrEqual(t, lipgloss.Width(view), w)
		rows := map[string]string{}
		for _, l := range strings.Split(view, "\n") {
			for _, name := range []string{"mac-mini", "tower", "pi5 "} {
				if strings.Contains(l, name) {
					rows[name] = l
				}
			}
		}
		for _, mb := range ctx.Mesh.Members {
			if mb.Name == "mac-mini" || mb.Name == "tower" {
				assert.Contains(t, rows[mb.Name], fmt.Sprintf("%d +1s", Held(mb)), "at %d columns", w)
			}
		}
		assert.NotContains(t, rows["pi5 "], "+", "no share, no mark")
		if w == 120 {
			assert.Contains(t, view, "+Ns: shares of N splits")
		}
	}
	for _, mb := range ctx.Mesh.Members {
		if mb.Name == "mac-mini" {
			assert.Equal(t, 1, SplitShares(mb))
		}
	}
}

// The summary's memory is read whole at 80 columns: the RAM goes, then the word "budget",
// before the figures are cut; at 120 it is all there.
func TestSummaryFitsItsWidth(t *testing.T) {
	v := tuitest.Context().Mesh
	wide := Summary(v, 120)
	assert.Contains(t, wide, " budget used (")
	for _, w := range []int{90, 80} {
		s := Summary(v, w)
		assert.LessOrEqual(t, ansi.StringWidth(s), w, s)
		assert.Regexp(t, ` of \S+ GiB( budget)? used$`, s)
	}
}
