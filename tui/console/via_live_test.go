package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/mesh"
	"github.com/llmkube/mesh/tui/console"
)

// Through one agent (--agent URL) a console places on another host, waits, chats and deletes,
// every call going to that agent, which forwards it (issue 42: the console dialled the owner
// itself). And a wait that says ready means the mesh routes the model: a chat through any
// agent's gateway the moment it returns is answered, not told 404 or "loading" (issue 42: every
// one of 15 tries failed so for up to 0.45 s).
func TestAgentModeActsThroughTheAgentAndWaitMeansRouted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ollama := []api.Runtime{api.RuntimeOllama}
	// The LAN's gossip pace: the local profile's carries a placement to every view before a
	// wait's next look.
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), Fast: true, Profile: mesh.ProfileLAN, Hosts: []localmesh.HostSpec{
		{Name: "door", Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: ollama},
		{Name: "owner", Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: ollama},
		{Name: "third", Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: ollama},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	c, err := console.Connect(ctx, console.Options{AgentURL: m.Host("door").URL, Token: m.AdminToken(), Poll: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.Eventually(t, func() bool { return len(console.Agents(c.View())) == 3 }, 30*time.Second, 20*time.Millisecond)

	msgs := []apiclient.ChatMessage{{Role: "user", Content: "hello"}}
	for i := range 5 {
		p, err := c.Place(ctx, "owner", api.PlacementRequest{Source: "ollama://qwen2.5:0.5b"})
		require.NoError(t, err, "try %d", i)
		require.Equal(t, "owner", p.Host)
		p, err = c.Wait(ctx, p, func(api.Placement, error) error { return nil })
		require.NoError(t, err, "try %d", i)
		require.Equal(t, api.StateReady, p.State)
		for _, h := range m.Hosts {
			err := m.Client(h.Spec.Name).ChatStream(ctx, "qwen2.5:0.5b", msgs, apiclient.ChatOptions{}, func(apiclient.ChatDelta) error { return nil })
			require.NoError(t, err, "try %d: a chat through %s as the wait returned", i, h.Spec.Name)
		}
		_, err = c.Chat(ctx, "qwen2.5:0.5b", msgs, apiclient.ChatOptions{}, func(apiclient.ChatDelta) error { return nil })
		require.NoError(t, err, "try %d: the console's chat, through door's gateway", i)
		gone, err := c.Delete(ctx, p.ID)
		require.NoError(t, err, "try %d", i)
		assert.Equal(t, p.ID, gone.ID)
		_, err = m.Client("owner").Placement(ctx, p.ID)
		var ae *api.Error
		require.ErrorAs(t, err, &ae)
		require.Equal(t, api.CodeNotFound, ae.Code, "deleted on its owner")
		require.Eventually(t, func() bool { return len(console.Placements(c.View())) == 0 }, 10*time.Second, 20*time.Millisecond)
	}

	// A call for a host the agent does not know is NotFound; one already forwarded is not
	// forwarded again.
	for _, c := range []struct {
		host, via string
		status    int
	}{{"nobody", "", http.StatusNotFound}, {"owner", "third", http.StatusBadRequest}, {"door", "third", http.StatusOK}} {
		req, err := http.NewRequestWithContext(ctx, "GET", m.Host("door").URL+"/v1/placements", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+m.AdminToken())
		req.Header.Set(api.HostHeader, c.host)
		if c.via != "" {
			req.Header.Set(api.ViaHeader, c.via)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, c.status, resp.StatusCode, "for %s via %q", c.host, c.via)
	}
}
