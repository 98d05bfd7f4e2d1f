package mesh

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/intent"
)

func sharedIntent(name string, replicas int) api.Intent {
	return api.Intent{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: name, Source: "ollama://" + name, Replicas: replicas}}
}

// addShared starts an agent member carrying store as its Shared set.
func (c *cluster) addShared(name string, store *intent.Store) (*Mesh, func(bool)) {
	cfg, link := c.config(name, api.RoleAgent)
	cfg.Shared = store
	return c.start(cfg), link.Cut
}

// agree waits until every store holds the same intents (versions included) as want says.
func agree(t *testing.T, stores []*intent.Store, what string, want func([]api.Intent) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		first := stores[0].All()
		for _, s := range stores[1:] {
			if !assert.ObjectsAreEqual(first, s.All()) {
				return false
			}
		}
		return want(first)
	}, 20*time.Second, 10*time.Millisecond, what)
}

func replicasOf(ins []api.Intent, key string) int {
	for _, in := range ins {
		if in.Key() == key && !in.Deleted {
			return in.Replicas
		}
	}
	return 0
}

// An edit gossips to every member; edits made on both sides of a partition resolve alike
// everywhere once it heals (the later Lamport version wins), and so does a deletion.
func TestIntentsConvergeAcrossAPartition(t *testing.T) {
	c := newCluster(t)
	var stores []*intent.Store
	var cuts []func(bool)
	var ms []*Mesh
	for _, n := range []string{"a", "b", "x"} {
		s, err := intent.Open("", n)
		require.NoError(t, err)
		m, cut := c.addShared(n, s)
		stores, cuts, ms = append(stores, s), append(cuts, cut), append(ms, m)
	}
	waitFor(t, 10*time.Second, ms, "all alive", allAlive("a", "b", "x"))
	put := func(i int, in api.Intent) {
		_, wire, err := stores[i].Put(in)
		require.NoError(t, err)
		ms[i].Share(map[string][]byte{in.Key(): wire})
	}
	put(0, sharedIntent("qwen", 2))
	agree(t, stores, "qwen gossiped", func(ins []api.Intent) bool { return replicasOf(ins, "default/qwen") == 2 })

	cuts[2](true)
	put(0, sharedIntent("qwen", 3)) // a, then x twice: x's is the later version
	put(2, sharedIntent("qwen", 1))
	put(2, sharedIntent("qwen", 4))
	put(2, sharedIntent("llama", 1)) // x alone knows llama
	del := sharedIntent("qwen", 1)
	require.Eventually(t, func() bool { return replicasOf(stores[1].All(), "default/qwen") == 3 }, 10*time.Second, 10*time.Millisecond)
	cuts[2](false)
	agree(t, stores, "x's later edit wins everywhere", func(ins []api.Intent) bool {
		return replicasOf(ins, "default/qwen") == 4 && replicasOf(ins, "default/llama") == 1
	})

	del.Deleted = true
	put(1, del)
	agree(t, stores, "the deletion everywhere", func(ins []api.Intent) bool { return replicasOf(ins, "default/qwen") == 0 && len(ins) == 2 })
}

// Members restarted with different sets (kept in their state dirs) end with the union, each
// key at its latest version.
func TestMembersRestartedWithDifferentIntentsConverge(t *testing.T) {
	c := newCluster(t)
	da, db := t.TempDir(), t.TempDir()
	sa, _ := intent.Open(da, "a")
	sb, _ := intent.Open(db, "b")
	_, _, err := sa.Put(sharedIntent("qwen", 1))
	require.NoError(t, err)
	_, _, err = sa.Put(sharedIntent("qwen", 2))
	require.NoError(t, err)
	_, _, err = sb.Put(sharedIntent("qwen", 5)) // version 1: older than a's
	require.NoError(t, err)
	_, _, err = sb.Put(sharedIntent("llama", 1))
	require.NoError(t, err)
	sa, _ = intent.Open(da, "a")
	sb, _ = intent.Open(db, "b")
	a, _ := c.addShared("a", sa)
	b, _ := c.addShared("b", sb)
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "both alive", allAlive("a", "b"))
	agree(t, []*intent.Store{sa, sb}, "the union, latest versions", func(ins []api.Intent) bool {
		return len(ins) == 2 && replicasOf(ins, "default/qwen") == 2 && replicasOf(ins, "default/llama") == 1
	})
	kept, _ := intent.Open(db, "b")
	assert.Equal(t, 2, replicasOf(kept.All(), "default/qwen"), "b saved what it merged")
}
