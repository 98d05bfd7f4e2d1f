package cli_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/tui/cli"
)

// Bad --label and --max-replicas values are usage errors, found before anything reaches a mesh.
func TestPlaceLabelAndMaxReplicasAreChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--label", "gpu"}, "--label: label \"gpu\": want key=value"},
		{[]string{"--label", "gpu=a b"}, "keys and values are up to 63"},
		{[]string{"--replicas", "2", "--max-replicas", "1"}, "--max-replicas 1: want --replicas (2) to 16"},
		{[]string{"--max-replicas", "17"}, "--max-replicas 17: want --replicas (1) to 16"},
	} {
		r := runCLI(t, t.Context(), nil, "", append([]string{"mesh", "place", "ollama://qwen2.5:0.5b", "--host", "x"}, c.args...)...)
		assert.Equal(t, cli.ExitUsage, r.code, "%v: %s", c.args, r.stderr)
		assert.Contains(t, r.stderr, c.want, c.args)
	}
}
