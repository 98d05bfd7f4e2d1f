package keeper_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/localmesh"
)

const model = "qwen2.5:0.5b"

// startMesh starts hosts running Ollama (simulated), with on-demand placement for onDemand.
func startMesh(t *testing.T, onDemand []string, names ...string) (*localmesh.Mesh, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	var hosts []localmesh.HostSpec
	for _, n := range names {
		hosts = append(hosts, localmesh.HostSpec{Name: n, Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama}})
	}
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), Hosts: hosts, Fast: true, OnDemand: onDemand})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m, ctx
}

// hostsOf are the hosts holding a replica of the model that counts, as host from sees them.
func hostsOf(ctx context.Context, m *localmesh.Mesh, from string) (wants int, hosts []string, note string) {
	sts, err := m.Client(from).Intents(ctx)
	if err != nil || len(sts) != 1 {
		return 0, nil, ""
	}
	for _, r := range sts[0].Where {
		if r.Counts {
			hosts = append(hosts, r.Host)
		}
	}
	return sts[0].Replicas, hosts, sts[0].Note
}

// servingOn counts the ready placements of the model mesh-wide, as host from sees them.
func servingOn(ctx context.Context, m *localmesh.Mesh, from string) []string {
	return readyOn(ctx, m, from, model)
}

// A placement with two replicas is kept on two hosts: the one that took it places the first,
// the best-ranked other host the second; when a replica's host leaves, the third host takes
// its place; deleting the intent removes every replica.
func TestAnIntentKeepsItsReplicas(t *testing.T) {
	m, ctx := startMesh(t, nil, "a", "b", "c")
	_, err := m.Client("a").Place(ctx, api.PlacementRequest{Source: "ollama://" + model, Replicas: 2})
	require.NoError(t, err)
	var hosts []string
	require.Eventually(t, func() bool {
		hosts = servingOn(ctx, m, "c")
		return len(hosts) == 2
	}, 30*time.Second, 50*time.Millisecond, "two replicas serve")
	assert.Contains(t, hosts, "a", "the host that took it keeps one")
	other := hosts[0]
	if other == "a" {
		other = hosts[1]
	}
	third := map[string]string{"b": "c", "c": "b"}[other]
	wants, counted, _ := hostsOf(ctx, m, third)
	assert.Equal(t, 2, wants)
	assert.ElementsMatch(t, hosts, counted)

	require.NoError(t, m.Host(other).Node.Close())
	require.Eventually(t, func() bool {
		s := servingOn(ctx, m, "a")
		return len(s) == 2 && assert.ObjectsAreEqual([]string{"a", third}, slices.Sorted(slices.Values(s)))
	}, 30*time.Second, 50*time.Millisecond, "the third host took the departed one's replica")
	_, _, note := hostsOf(ctx, m, "a")
	assert.NotContains(t, note, "re-placing", "met: nothing more to do")

	_, err = m.Client(third).Unintend(ctx, api.DefaultNamespace, model)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, h := range []string{"a", third} {
			ps, err := m.Client(h).Placements(ctx)
			if err != nil || len(ps) != 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every replica removed")
}

// Absurd replica counts are refused, and so is an intent no host could ever run; a namespace
// token sees and deletes only its namespace's intents.
func TestIntentsRefusedAndScoped(t *testing.T) {
	m, ctx := startMesh(t, nil, "a", "b")
	c := m.Client("a")
	var e *api.Error
	_, err := c.Intend(ctx, api.PlacementRequest{Source: "ollama://" + model, Replicas: api.MaxReplicas + 1})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, api.CodeBadRequest, e.Code)
	_, err = c.Intend(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
	require.Error(t, err, "no host here can size or run a Hailo model")
	_, err = c.Intend(ctx, api.PlacementRequest{Source: "ollama://" + model, Hosts: []string{"elsewhere"}})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, api.CodeNotFound, e.Code)
	assert.Contains(t, e.Message, "no agent in the mesh may run")

	_, err = c.Intend(ctx, api.PlacementRequest{Source: "ollama://" + model})
	require.NoError(t, err)
	tok, err := api.NamespaceToken(m.AdminToken(), "team")
	require.NoError(t, err)
	team := apiclient.New(m.Host("b").URL, tok)
	require.Eventually(t, func() bool {
		sts, err := c.Intents(ctx)
		return err == nil && len(sts) == 1
	}, 10*time.Second, 20*time.Millisecond)
	sts, err := team.Intents(ctx)
	require.NoError(t, err)
	assert.Empty(t, sts, "another namespace's intent is not shown")
	_, err = team.Unintend(ctx, api.DefaultNamespace, model)
	require.ErrorAs(t, err, &e)
	assert.Equal(t, api.CodeNotFound, e.Code)
	_, err = team.Intend(ctx, api.PlacementRequest{Source: "ollama://" + model, Namespace: api.DefaultNamespace})
	require.ErrorAs(t, err, &e)
	assert.Equal(t, api.CodeForbidden, e.Code)
}

// Under load (more than api.BusyInFlight chats at once on its one replica, through the real
// gateway) an intent with max_replicas 2 gets a second replica, and loses it once idle.
func TestABusyIntentScalesOutAndBackIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	var hosts []localmesh.HostSpec
	for _, n := range []string{"a", "b"} {
		hosts = append(hosts, localmesh.HostSpec{Name: n, Demo: "gpu-server", OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama}})
	}
	// Not Fast: the simulated Ollama writes 30 tokens a second, so chats stay in flight.
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), Hosts: hosts, ScaleAfter: time.Second, ScaleIdle: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	_, err = m.Client("a").Place(ctx, api.PlacementRequest{Source: "ollama://" + model, Replicas: 1, MaxReplicas: 2})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.Equal(servingOn(ctx, m, "b"), []string{"a"}) }, 30*time.Second, 50*time.Millisecond)

	load, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 3 * api.BusyInFlight {
		wg.Go(func() {
			for load.Err() == nil {
				_ = m.Client("a").ChatStream(load, model, []apiclient.ChatMessage{{Role: "user", Content: "hello"}}, apiclient.ChatOptions{},
					func(apiclient.ChatDelta) error { return nil })
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	require.Eventually(t, func() bool {
		return slices.Equal(slices.Sorted(slices.Values(servingOn(ctx, m, "a"))), []string{"a", "b"})
	}, 60*time.Second, 50*time.Millisecond, "a second replica under load")
	wants, _, _ := hostsOf(ctx, m, "a")
	assert.Equal(t, 1, wants, "the intent itself still wants 1")

	stop()
	wg.Wait()
	require.Eventually(t, func() bool { return slices.Equal(servingOn(ctx, m, "a"), []string{"a"}) }, 60*time.Second, 50*time.Millisecond,
		"the added replica goes once idle, the first stays")
}
