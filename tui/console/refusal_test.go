package console_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/rank"
	"github.com/llmkube/mesh/tui/console"
)

// A refusal's code is its cause: the host that came nearest to taking the request, not the
// first host by name. `mesh rank hailo://nosuch:1b` is NotFound on the host with the Hailo,
// not AcceleratorMissing from the ones without; a model too big for the only host with its
// runtime is InsufficientMemory, not EngineUnavailable.
func TestRefusalCodeIsTheNearestHostsCause(t *testing.T) {
	pi := member("pi5", api.RuntimeHailoOllama)
	gpu, mac := member("gpu", api.RuntimeOllama), member("mac", api.RuntimeLlamaServer)
	members := []api.Member{gpu, mac, pi}
	r := console.Ranking{SizeError: "hailo model nosuch:1b is not in hailo-ollama's zoo; known models: qwen2:1.5b", SizeCode: api.CodeNotFound, SizedBy: "pi5"}
	req := api.PlacementRequest{Source: "hailo://nosuch:1b"}
	r.Hosts = rank.Rank(members, r.Request(req, false))
	var ae *api.Error
	require.True(t, errors.As(r.Refusal(), &ae))
	assert.Equal(t, api.CodeNotFound, ae.Code)
	assert.Contains(t, ae.Message, "no host can take it — pi5: refused: hailo model nosuch:1b is not in hailo-ollama's zoo", "the cause first")

	big := console.Ranking{Estimate: api.SizeEstimate{Bytes: 40 << 30}, SizedBy: "gpu"}
	big.Hosts = rank.Rank(members, big.Request(api.PlacementRequest{Source: "ollama://llama3.1:70b"}, false))
	require.True(t, errors.As(big.Refusal(), &ae))
	assert.Equal(t, api.CodeInsufficientMemory, ae.Code)

	near, ok := console.Nearest([]api.Ranked{{Host: "a", Verdict: api.VerdictRefused, Code: api.CodeUnreachable}})
	assert.True(t, ok)
	assert.Equal(t, "a", near.Host)
	_, ok = console.Nearest([]api.Ranked{{Verdict: api.VerdictRefused, Code: api.CodeUnreachable}, {Verdict: api.VerdictFits}})
	assert.False(t, ok, "a host fits: no refusal")
}
