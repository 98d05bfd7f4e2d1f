package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/tui/cli"
)

// `mesh place --replicas` records what the mesh keeps; `mesh models` says what it wants and has,
// and why not more: the demo has one Ollama host, so a second replica has nowhere to go. A bad
// count is a usage error before anything reaches the mesh.
func TestE2EPlaceReplicasShowsWantsAndHas(t *testing.T) {
	m := localMesh(t)
	env := connections(m)[0].env
	r := runCLI(t, t.Context(), env, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--host", "gpu-server", "--replicas", "17")
	assert.Equal(t, cli.ExitUsage, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--replicas 17: want 1 to 16")

	r = runCLI(t, t.Context(), env, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--host", "gpu-server", "--replicas", "2", "--ttl", "10m", "--wait")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Eventually(t, func() bool {
		r = runCLI(t, t.Context(), env, "", "mesh", "models")
		return r.code == cli.ExitOK && strings.Contains(r.stdout, "kept running:\n  qwen2.5:0.5b wants 2, has 1 (no host can take it: ")
	}, 20*time.Second, 100*time.Millisecond, "wants vs has")
	doc := decode[cli.PlacementsDoc](t, runCLI(t, t.Context(), env, "", "mesh", "models", "--json"))
	require.Len(t, doc.Intents, 1)
	assert.Equal(t, 2, doc.Intents[0].Replicas)
	assert.Equal(t, 1, doc.Intents[0].Has)
	assert.Equal(t, "10m", doc.Intents[0].TTL)
	require.Len(t, doc.Placements, 1)

	// Deleting the one replica it has deletes the intent: nothing is placed again.
	r = runCLI(t, t.Context(), env, "", "mesh", "delete", doc.Placements[0].ID)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Eventually(t, func() bool {
		d := decode[cli.PlacementsDoc](t, runCLI(t, t.Context(), env, "", "mesh", "models", "--json"))
		return len(d.Intents) == 0 && len(d.Placements) == 0
	}, 20*time.Second, 100*time.Millisecond, "the intent and its placement gone")
}

// `mesh run` places a model nothing runs, waits for it and chats, like `ollama run`; a second
// run chats at once; a name no host can run is refused with the reasons.
func TestE2EMeshRun(t *testing.T) {
	m := localMesh(t)
	env := connections(m)[0].env
	r := runCLI(t, t.Context(), env, "", "mesh", "run", "qwen2.5:0.5b", "hello")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.NotEmpty(t, strings.TrimSpace(r.stdout))
	assert.Contains(t, r.stderr, "placing qwen2.5:0.5b (ollama://qwen2.5:0.5b) where it ranks best")
	r = runCLI(t, t.Context(), env, "", "mesh", "run", "qwen2.5:0.5b", "again")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "placing")

	r = runCLI(t, t.Context(), env, "", "mesh", "run", "no-such-model:7b", "hello")
	assert.NotEqual(t, cli.ExitOK, r.code)
	assert.Contains(t, r.stderr, `no host can run "no-such-model:7b"`)
}

// `mesh alias set` names a source mesh-wide; `mesh alias rm` forgets it.
func TestE2EAlias(t *testing.T) {
	m := localMesh(t)
	env := connections(m)[1].env
	r := runCLI(t, t.Context(), env, "", "mesh", "alias", "set", "tiny-qwen", "ollama://qwen2.5:0.5b")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Equal(t, "tiny-qwen is ollama://qwen2.5:0.5b, placed on the first request\n", r.stdout)
	r = runCLI(t, t.Context(), env, "", "mesh", "models")
	assert.Contains(t, r.stdout, "tiny-qwen is ollama://qwen2.5:0.5b, placed on the first request")
	r = runCLI(t, t.Context(), env, "", "mesh", "alias", "rm", "tiny-qwen")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Equal(t, "forgot default/tiny-qwen\n", r.stdout)
	r = runCLI(t, t.Context(), env, "", "mesh", "alias", "rm", "tiny-qwen")
	assert.Equal(t, 4, r.code, "not found: %s", r.stderr)
}

// `mesh run hailo://…` is recorded by an agent that can size it: the first agent of the view
// (gpu-server) has no hailo-ollama data, and refused it "cannot size" while pi5-hailo could.
func TestE2EMeshRunHailo(t *testing.T) {
	m := localMesh(t)
	env := connections(m)[0].env
	r := runCLI(t, t.Context(), env, "", "mesh", "run", "hailo://qwen2:1.5b", "hello")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "cannot size")
	assert.Contains(t, r.stderr, "placing qwen2:1.5b (hailo://qwen2:1.5b) where it ranks best")
	assert.NotEmpty(t, strings.TrimSpace(r.stdout))
}
