package cli_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/tui/cli"
)

// --join-file takes the agent's own mesh.json, as the agent does (issue 42: the console said
// "must start with llmk1:").
func TestJoinFileTakesTheAgentsMeshJSON(t *testing.T) {
	j, _ := newJoin(t, "agentfile")
	sd, err := state.Open(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, sd.SaveJoin(j))
	r := runCLI(t, t.Context(), nil, "", "mesh", "token", "--namespace", "team-a", "--join-file", sd.Path()+"/"+state.JoinFile)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	assert.Equal(t, nsToken(t, j.Secret, "team-a")+"\n", r.stdout)
}
