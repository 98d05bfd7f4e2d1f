package console_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/tui/console"
)

// The view lags the owner: a placement deleted a moment ago may still be in it. Placing it again
// then places it, rather than answering "already placed" with a placement that is gone.
func TestPlaceOnceAsksTheOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), Fast: true, Hosts: []localmesh.HostSpec{
		{Name: "gpu-server", Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama}},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	req := api.PlacementRequest{Source: "ollama://qwen2.5:0.5b"}
	placed, err := m.Place(ctx, localmesh.Placed{Host: "gpu-server", Request: req})
	require.NoError(t, err)
	first := placed[0]

	// Agent mode with a poll that never comes round again: the view stays as Connect read it.
	c, err := console.Connect(ctx, console.Options{AgentURL: m.Host("gpu-server").URL, Token: m.AdminToken(), Poll: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	_, ok := c.Existing(ctx, req, "gpu-server")
	require.True(t, ok, "the view holds the placement, and so does its owner")

	p, existed, err := c.PlaceOnce(ctx, "gpu-server", req)
	require.NoError(t, err)
	assert.True(t, existed, "placing what runs is placing once")
	assert.Equal(t, first.ID, p.ID)

	require.NoError(t, m.Client("gpu-server").Delete(ctx, first.ID))
	require.True(t, slices.ContainsFunc(console.Placements(c.View()), func(p api.Placement) bool { return p.ID == first.ID }),
		"the stale view still holds it")
	_, ok = c.Existing(ctx, req, "gpu-server")
	assert.False(t, ok, "but it does not exist: its owner has the last word (place --wait trusted the view, and waited for a placement that was gone)")
	p, existed, err = c.PlaceOnce(ctx, "gpu-server", req)
	require.NoError(t, err)
	assert.False(t, existed, "a placement its owner no longer has is placed again")
	assert.NotEqual(t, first.ID, p.ID)
}
