package keeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/localmesh"
)

// startPis starts hosts with a (simulated) Hailo-10H each, which runs one model at a time.
func startPis(t *testing.T, names ...string) (*localmesh.Mesh, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	var hosts []localmesh.HostSpec
	for _, n := range names {
		hosts = append(hosts, localmesh.HostSpec{Name: n, Demo: "pi5-hailo", OS: "linux", Arch: "arm64", Runtimes: []api.Runtime{api.RuntimeHailoOllama}})
	}
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), Hosts: hosts, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m, ctx
}

// intentOf is the kept intent of model name as c sees it (ok false: none is kept, or c did
// not answer).
func intentOf(ctx context.Context, c *apiclient.Client, name string) (api.IntentStatus, bool) {
	sts, err := c.Intents(ctx)
	if err != nil {
		return api.IntentStatus{}, false
	}
	for _, st := range sts {
		if st.Name == name {
			return st, true
		}
	}
	return api.IntentStatus{}, false
}

func waitReady(ctx context.Context, t *testing.T, c *apiclient.Client, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		p, err := c.Placement(ctx, id)
		return err == nil && p.State == api.StateReady
	}, 30*time.Second, 20*time.Millisecond, "placement %s ready", id)
}

// Placing a model that replaces the one on a Hailo-10H is the user's choice: the replaced
// model's intent goes (it had no other replica), so no host keeps wanting it and the doctor
// says nothing of it; placing it again swaps back and keeps it again.
func TestASwapStopsKeepingTheReplacedModel(t *testing.T) {
	m, ctx := startPis(t, "pi")
	c := m.Client("pi")
	first, err := c.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2.5-instruct:1.5b"})
	require.NoError(t, err)
	waitReady(ctx, t, c, first.ID)
	_, kept := intentOf(ctx, c, "qwen2.5-instruct:1.5b")
	require.True(t, kept, "a placement by hand is kept")

	second, err := c.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
	require.NoError(t, err)
	waitReady(ctx, t, c, second.ID)
	old, err := c.Placement(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, second.ID, old.ReplacedBy, "the first was swapped out")
	require.Eventually(t, func() bool {
		_, kept := intentOf(ctx, c, "qwen2.5-instruct:1.5b")
		return !kept
	}, 10*time.Second, 20*time.Millisecond, "the replaced model is no longer kept")
	st, kept := intentOf(ctx, c, "qwen2:1.5b")
	require.True(t, kept)
	assert.Equal(t, 1, st.Replicas)
	require.Eventually(t, func() bool {
		rep, err := c.Doctor(ctx)
		if err != nil {
			return false
		}
		for _, f := range rep.Findings {
			if strings.Contains(f.Problem, "qwen2.5-instruct") {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "the doctor warns of no replaced model")

	// Swapping back keeps the first again and stops keeping the second.
	again, err := c.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2.5-instruct:1.5b"})
	require.NoError(t, err)
	waitReady(ctx, t, c, again.ID)
	require.Eventually(t, func() bool {
		_, keptOld := intentOf(ctx, c, "qwen2:1.5b")
		_, keptNew := intentOf(ctx, c, "qwen2.5-instruct:1.5b")
		return !keptOld && keptNew
	}, 10*time.Second, 20*time.Millisecond, "swapped back: the first kept, the second not")
}

// A swap on one Pi of a model with two replicas lowers its intent by the replaced one: the
// replica on the other Pi stays kept, and no Pi swaps it back.
func TestASwapLowersAKeptCountByOne(t *testing.T) {
	m, ctx := startPis(t, "pi-a", "pi-b")
	a := m.Client("pi-a")
	_, err := a.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2.5-instruct:1.5b", Replicas: 2})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, ok := intentOf(ctx, a, "qwen2.5-instruct:1.5b")
		return ok && st.Has == 2
	}, 30*time.Second, 20*time.Millisecond, "two replicas")

	b := m.Client("pi-b")
	second, err := b.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
	require.NoError(t, err)
	waitReady(ctx, t, b, second.ID)
	require.Eventually(t, func() bool {
		st, ok := intentOf(ctx, a, "qwen2.5-instruct:1.5b")
		return ok && st.Replicas == 1 && st.Has == 1 && st.Intent.Origin == "pi-b"
	}, 10*time.Second, 20*time.Millisecond, "the intent wants 1 and has 1, as pi-a sees it")
	ps, err := b.Placements(ctx)
	require.NoError(t, err)
	for _, p := range ps {
		if p.Model == "qwen2.5-instruct:1.5b" {
			assert.Equal(t, api.StateEvicted, p.State, "pi-b keeps the record of what it replaced, nothing more")
		}
	}
}
