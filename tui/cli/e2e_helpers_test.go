package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/sim/simtest"
)

// The end-to-end tests share one local mesh (the demo's three hosts with fast simulated
// engines: pi5-hailo runs hailo-ollama, mac-mini llama-server, gpu-server Ollama); each test
// removes what it placed.
var (
	meshOnce  sync.Once
	shared    *localmesh.Mesh
	sharedErr error
	sharedDir string
)

func localMesh(t *testing.T) *localmesh.Mesh {
	t.Helper()
	meshOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "cli-e2e-")
		if sharedErr != nil {
			return
		}
		bin, err := simtest.LlamaServer(sharedDir)
		if err != nil {
			sharedErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared, sharedErr = localmesh.Start(ctx, localmesh.Options{Dir: filepath.Join(sharedDir, "mesh"), LlamaServer: bin, Fast: true})
		if sharedErr == nil {
			sharedErr = enginesKnown(ctx, shared)
		}
	})
	require.NoError(t, sharedErr)
	t.Cleanup(func() { clearPlacements(t, shared) })
	return shared
}

// enginesKnown waits until every agent's view shows every host's engines: Start returns once
// the hosts see each other, which can be before each agent has found its engines, and a
// console that joins then is told of them only a gossip round later.
func enginesKnown(ctx context.Context, m *localmesh.Mesh) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		known := true
		for _, h := range m.Hosts {
			v, err := m.Client(h.Spec.Name).Mesh(ctx)
			if err != nil {
				return err
			}
			for _, mb := range v.Members {
				if mb.Host == nil || len(mb.Host.Engines) == 0 || !mb.Host.Engines[0].Present {
					known = false
				}
			}
		}
		if known {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agents' engines never showed in the mesh: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// closeShared stops the shared mesh after every test ran.
func closeShared() {
	if shared != nil {
		shared.Close()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
}

// clearPlacements deletes every placement of the mesh, so the next test starts from none.
func clearPlacements(t *testing.T, m *localmesh.Mesh) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, h := range m.Hosts {
		c := m.Client(h.Spec.Name)
		ps, err := c.Placements(ctx)
		require.NoError(t, err)
		for _, p := range ps {
			require.NoError(t, c.Delete(ctx, p.ID))
		}
	}
	// Gossip carries the deletions; a console must not see them afterwards.
	require.Eventually(t, func() bool {
		for _, h := range m.Hosts {
			v, err := m.Client(h.Spec.Name).Mesh(ctx)
			if err != nil {
				return false
			}
			for _, mb := range v.Members {
				if len(mb.Placements) > 0 {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
}

// connection is a way of reaching the mesh: joined as a console, or through one agent.
type connection struct {
	name string
	env  map[string]string
}

func connections(m *localmesh.Mesh) []connection {
	return []connection{
		{"member", map[string]string{"LLMKUBE_JOIN": m.JoinString(), "LLMKUBE_MESH_PROFILE": "local"}},
		{"agent", map[string]string{"LLMKUBE_AGENT": m.Host("gpu-server").URL, "LLMKUBE_TOKEN": m.AdminToken()}},
	}
}

// with returns env plus more.
func with(env map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}
