package localmesh

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/sim/simtest"
)

var llamaServer string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "localmesh-bin-")
	if err != nil {
		panic(err)
	}
	llamaServer, err = simtest.LlamaServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The demo's mesh, fast: three hosts see each other, take a model each, and any of them
// answers a chat for any model.
func TestDemoMeshEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := Start(ctx, Options{Dir: t.TempDir(), LlamaServer: llamaServer, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })

	mac := m.Host("mac-mini")
	placed, err := m.Place(ctx,
		Placed{Host: "pi5-hailo", Request: api.PlacementRequest{Source: "hailo://qwen2:1.5b"}},
		Placed{Host: "mac-mini", Request: api.PlacementRequest{Source: FileSource(mac.ModelPath("sim-tiny")), Name: "tiny"}},
		Placed{Host: "gpu-server", Request: api.PlacementRequest{Source: "ollama://qwen2.5:0.5b"}},
	)
	require.NoError(t, err)
	require.Len(t, placed, 3)
	for _, p := range placed {
		assert.Equal(t, api.StateReady, p.State, p.Model)
	}

	// Every host's gateway serves every model: locally or by forwarding to the owner.
	for _, from := range m.Hosts {
		for _, model := range []string{"qwen2:1.5b", "tiny", "qwen2.5:0.5b"} {
			var text strings.Builder
			err := m.Client(from.Spec.Name).ChatStream(ctx, model, []api.ChatMessage{{Role: "user", Content: "hello"}}, api.ChatOptions{}, func(d api.ChatDelta) error {
				text.WriteString(d.Content)
				return nil
			})
			require.NoError(t, err, "chat with %s through %s", model, from.Spec.Name)
			assert.NotEmpty(t, strings.TrimSpace(text.String()), "chat with %s through %s", model, from.Spec.Name)
		}
	}

	// The placements are visible mesh-wide once gossip carries them.
	require.Eventually(t, func() bool {
		v, err := m.Client("gpu-server").Mesh(ctx)
		if err != nil {
			return false
		}
		ready := 0
		for _, mb := range v.Members {
			for _, p := range mb.Placements {
				if p.State == api.StateReady {
					ready++
				}
			}
		}
		return ready == 3
	}, 10*time.Second, 20*time.Millisecond)

	require.NoError(t, m.Client("pi5-hailo").Delete(ctx, placed[0].ID))
	_, err = m.Client("pi5-hailo").Placement(ctx, placed[0].ID)
	var apiErr *api.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, api.CodeNotFound, apiErr.Code)
}

// The demo's own placements all become ready at the real engines' pace.
func TestDemoPlacementsBecomeReady(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo's pace takes some seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := StartDemo(ctx, llamaServer, nil)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	for _, p := range DemoPlacements(m) {
		c := m.Client(p.Host)
		require.Eventually(t, func() bool {
			ps, err := c.Placements(ctx)
			return err == nil && len(ps) == 1 && ps[0].State == api.StateReady
		}, time.Minute, 100*time.Millisecond, "placement on %s", p.Host)
	}
}
