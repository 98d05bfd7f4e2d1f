package rank

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/agent/api"
)

// A host that gossips holding the file has it; the others get it from that host over the LAN,
// which counts for them too, less than holding it, and the preview says so.
func TestAPeerHoldingTheFileCounts(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	holds := func(m *api.Member) {
		m.Host.Files = &api.FileService{Holds: []string{sum[:api.HoldPrefix]}, MaxUploads: 2}
	}
	req := gguf(gibs(1.9))
	req.SHA256 = sum
	members := []api.Member{agent("tight", 2.5), with(agent("holder", 30), holds), with(agent("gone", 30), func(m *api.Member) {
		holds(m)
		m.Liveness = api.Dead
	})}
	got := byHost(Rank(members, req))
	assert.Equal(t, "fits: needs 1.9 GiB, 30.0 GiB free; has the files", got["holder"].Reason)
	assert.Equal(t, "fits: needs 1.9 GiB, 2.5 GiB free; files from holder over the LAN", got["tight"].Reason,
		"a dead host's copy is no source")
	assert.Greater(t, got["holder"].Score, got["tight"].Score)

	// Without a digest, nothing names the content: no host counts as holding it.
	req.SHA256 = ""
	got = byHost(Rank(members, req))
	assert.Equal(t, "fits: needs 1.9 GiB, 2.5 GiB free", got["tight"].Reason)
	assert.Equal(t, "fits: needs 1.9 GiB, 30.0 GiB free", got["holder"].Reason)
}
