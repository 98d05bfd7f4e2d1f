package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/engines/llamaserver"
)

// TestRealLlamaServerProjector places the tiny model on the real llama-server twice: with a
// projector (made at test time, random weights) images reach the engine in every dialect and
// are answered, counted in the prompt; without one they are refused in the client's dialect,
// naming the projector. The projector's weights are admitted with the model's.
func TestRealLlamaServerProjector(t *testing.T) {
	bin := enginetest.LlamaServer(t)
	model := enginetest.TinyGGUF(t)
	mmproj := enginetest.TinyMMProj(t, 64) // tiny.gguf's embedding length
	d, err := llamaserver.New(llamaserver.Config{Binary: bin, LogDir: t.TempDir(), ModelsDir: t.TempDir(),
		StopGrace: 5 * time.Second, HealthTimeout: 2 * time.Minute}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.StopAll(context.Background()) })
	n := newNode(t, nodeOpts{name: "box", drivers: []engines.Driver{d}})
	plain := place(t, n, api.PlacementRequest{Source: model, Name: "tiny", Context: 512})
	vision := place(t, n, api.PlacementRequest{Source: model, Name: "vision", Context: 512, MMProj: mmproj})

	assert.Equal(t, "file://"+mmproj, vision.MMProj, "written in its canonical form")
	assert.Equal(t, plain.Memory.Weights+43904, vision.Memory.Weights, "the projector's tensors (sizing's TestProjector)")
	assert.Equal(t, plain.Memory.Bytes+43904, vision.Memory.Bytes, "one reservation for both")
	assert.Contains(t, vision.Memory.Detail, "projector 43 KiB")
	_, err = n.a.Place(t.Context(), api.Principal{Admin: true}, api.PlacementRequest{Source: model, Name: "wrong", MMProj: model})
	var e *api.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, api.CodeInvalidSource, e.Code)
	assert.Contains(t, e.Message, "mmproj: ")
	assert.Contains(t, e.Message, "not a multimodal projector")

	for _, c := range imageChats {
		t.Run(c.dialect+c.route, func(t *testing.T) {
			resp, with := call(t, "POST", n.url+c.route, adminToken, strings.ReplaceAll(c.with, "%s", "vision"))
			require.Equal(t, 200, resp.StatusCode, "%s", with)
			resp, without := call(t, "POST", n.url+c.route, adminToken, strings.ReplaceAll(c.without, "%s", "vision"))
			require.Equal(t, 200, resp.StatusCode, "%s", without)
			assert.Greater(t, c.promptTokens(t, with), c.promptTokens(t, without), "the image's tokens reached the engine's prompt")

			resp, b := call(t, "POST", n.url+c.route, adminToken, strings.ReplaceAll(c.with, "%s", "tiny"))
			require.Equal(t, 400, resp.StatusCode, "%s", b)
			msg := dialectErr(t, c.dialect, b)
			assert.Contains(t, msg, `"tiny"`)
			assert.Contains(t, msg, "cannot read images")
			assert.Contains(t, msg, "projector")
		})
	}
}
