package localmesh

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/api/source"
	llamaserversim "github.com/llmkube/mesh/sim/llamaserver"
	"github.com/llmkube/mesh/sim/simtest"
)

// llamaServer is the llama-server simulator, rpcServer the same linked as the simulated
// ggml-rpc-server beside it.
var llamaServer, rpcServer string

func TestMain(m *testing.M) {
	simtest.Main(m, func(dir string) (err error) {
		if llamaServer, err = simtest.LlamaServer(dir); err != nil {
			return err
		}
		rpcServer, err = simtest.RPCServer(llamaServer)
		return err
	})
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
	// The Hailo model sizes as the real one (1.56 GB, Hailo's figure), not as the fake HEF on disk.
	assert.EqualValues(t, 1_560_000_000, placed[0].Memory.Bytes, placed[0].Memory.Detail)

	// Every host's gateway serves every model: locally or by forwarding to the owner.
	for _, from := range m.Hosts {
		for _, model := range []string{"qwen2:1.5b", "tiny", "qwen2.5:0.5b"} {
			var text strings.Builder
			err := m.Client(from.Spec.Name).ChatStream(ctx, model, []apiclient.ChatMessage{{Role: "user", Content: "hello"}}, apiclient.ChatOptions{}, func(d apiclient.ChatDelta) error {
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

// The demo's own placements all become ready at the real engines' pace; every host runs the
// simulated rpc-server, of one protocol, and the Mac holds the model to split.
func TestDemoPlacementsBecomeReady(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo's pace takes some seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := StartDemo(ctx, llamaServer, rpcServer, nil)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	for _, h := range m.Hosts {
		info, err := m.Client(h.Spec.Name).Host(ctx)
		require.NoError(t, err)
		assert.Equal(t, llamaserversim.RPCProtocol, info.RPCProtocol(), "%s: %+v", h.Spec.Name, info.Engines)
	}
	assert.FileExists(t, m.Host("mac-mini").ModelPath(DemoSplitModel.Name))
	for _, p := range DemoPlacements(m) {
		c := m.Client(p.Host)
		require.Eventually(t, func() bool {
			ps, err := c.Placements(ctx)
			return err == nil && len(ps) == 1 && ps[0].State == api.StateReady
		}, time.Minute, 100*time.Millisecond, "placement on %s", p.Host)
	}
}

// A namespace token reads the mesh (GET /v1/mesh) and a host (GET /v1/host) as it reads
// placements: its own namespace's placements, counts of those alone, and no model name of
// another namespace, not in an engine's listing, not on a busy accelerator.
func TestNamespaceTokenSeesOnlyItsNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := Start(ctx, Options{Dir: t.TempDir(), LlamaServer: llamaServer, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })

	mac := m.Host("mac-mini")
	own := FileSource(mac.ModelPath("sim-tiny"))
	_, err = m.Place(ctx,
		Placed{Host: "pi5-hailo", Request: api.PlacementRequest{Source: "hailo://qwen2:1.5b", Name: "b-hailo", Namespace: "team-b"}},
		Placed{Host: "gpu-server", Request: api.PlacementRequest{Source: "ollama://qwen2.5:0.5b", Name: "b-ollama", Namespace: "team-b"}},
		Placed{Host: "mac-mini", Request: api.PlacementRequest{Source: FileSource(mac.ModelPath("sim-1b")), Name: "b-file", Namespace: "team-b"}},
		Placed{Host: "mac-mini", Request: api.PlacementRequest{Source: own, Name: "a-tiny", Namespace: "team-a"}},
	)
	require.NoError(t, err)
	tokA, err := api.NamespaceToken(m.AdminToken(), "team-a")
	require.NoError(t, err)
	secrets := []string{"b-hailo", "b-ollama", "b-file", "qwen2.5:0.5b", "sim-1b", "team-b"}

	// The admin sees everything, through every host, once gossip carried it there.
	require.Eventually(t, func() bool {
		for _, h := range m.Hosts {
			v, err := m.Client(h.Spec.Name).Mesh(ctx)
			if err != nil {
				return false
			}
			n := 0
			for _, mb := range v.Members {
				n += len(mb.Placements)
			}
			if n != 4 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "the admin sees the four placements through every host")

	for _, h := range m.Hosts {
		c := apiclient.New(h.URL, tokA)
		v, err := c.Mesh(ctx)
		require.NoError(t, err)
		b, err := json.Marshal(v)
		require.NoError(t, err)
		host, err := c.Host(ctx)
		require.NoError(t, err)
		hb, err := json.Marshal(host)
		require.NoError(t, err)
		for _, s := range secrets {
			assert.NotContains(t, string(b), s, "GET /v1/mesh on %s", h.Spec.Name)
			assert.NotContains(t, string(hb), s, "GET /v1/host on %s", h.Spec.Name)
		}
		for _, mb := range v.Members {
			if mb.Host == nil {
				continue
			}
			assert.Len(t, mb.Placements, mb.Host.Placements, "%s's count is of what team-a sees", mb.Name)
			assert.Positive(t, mb.Host.Memory.Budget, "capacity stays: ranking needs it")
			switch mb.Name {
			case "mac-mini":
				require.Len(t, mb.Placements, 1)
				assert.Equal(t, "a-tiny", mb.Placements[0].Model)
				assert.Contains(t, engineModels(mb.Host, api.RuntimeLlamaServer), strings.TrimPrefix(own, "file://"), "team-a's own file stays listed")
			case "pi5-hailo":
				assert.Equal(t, "a model of another namespace", mb.Host.Accelerators[0].Loaded, "the Hailo is busy, with what is not said")
				assert.Contains(t, engineModels(mb.Host, api.RuntimeHailoOllama), "qwen2:1.5b", "Hailo's public zoo stays listed")
			}
		}
	}
}

func engineModels(h *api.Host, r api.Runtime) []string {
	for _, e := range h.Engines {
		if e.Runtime == r {
			return e.Models
		}
	}
	return nil
}

// The demo is offline by construction: its own placements name no internet host, and an hf://
// or https:// source a user types is refused before any connection, saying why, with nothing
// pulled.
func TestDemoReachesNoInternetHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := Start(ctx, Options{Dir: t.TempDir(), LlamaServer: llamaServer, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })

	placements := DemoPlacements(m)
	require.Len(t, placements, len(m.Hosts))
	for _, p := range placements {
		s, err := source.Parse(p.Request.Source)
		require.NoError(t, err, p.Request.Source)
		switch s.Kind {
		case source.KindFile, source.KindOllama, source.KindHailo: // served by the host's own simulator
		default:
			t.Errorf("the demo places %s, a %s source that a simulator cannot serve", p.Request.Source, s.Kind)
		}
	}

	for _, src := range []string{
		"hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf",
		"https://example.com/models/x.gguf",
	} {
		p, err := m.Client("mac-mini").Place(ctx, api.PlacementRequest{Source: src})
		if err == nil {
			// Accepted for later: the placement must fail on the allowlist, not on a network.
			require.Eventually(t, func() bool {
				got, gerr := m.Client("mac-mini").Placement(ctx, p.ID)
				if gerr == nil && got.State == api.StateFailed {
					err = errors.New(got.Reason)
					return true
				}
				return false
			}, time.Minute, 20*time.Millisecond, src)
		}
		require.Error(t, err, src)
		assert.Contains(t, err.Error(), "not on the download allowlist", src)
		assert.Contains(t, err.Error(), "this local mesh is offline: place a GGUF file", src)
	}
}
