package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	enginels "github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/sim/llamaserver"
)

// Linked as ggml-rpc-server, the simulator is a worker the agent's rpc-server driver runs as it
// runs the real one: found beside llama-server, its protocol read from its banner, started on a
// loopback port it listens on, and stopped.
func TestRunsAsTheRPCWorker(t *testing.T) {
	link := filepath.Join(filepath.Dir(binary), enginels.RPCBinaryName)
	if err := os.Symlink(binary, link); err != nil && !os.IsExist(err) {
		require.NoError(t, err)
	}
	d, err := enginels.NewRPC(enginels.RPCConfig{LlamaServer: binary, LogDir: t.TempDir()}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := d.Detect(ctx)
	require.True(t, e.Present, e.Detail)
	assert.Equal(t, link, e.Address)
	assert.Equal(t, llamaserver.RPCProtocol, e.Version, e.Detail)

	m := engines.Model{ID: "p-1.part.h1", Name: "tiny"}
	inst, err := d.Load(ctx, m)
	require.NoError(t, err)
	c, err := net.Dial("tcp", inst.Endpoint())
	require.NoError(t, err, "the worker listens at its endpoint")
	c.Close()
	require.NoError(t, d.Health(ctx, m))
	require.NoError(t, d.Unload(ctx, m))
	var ee *engines.Error
	require.ErrorAs(t, d.Health(ctx, m), &ee)
	assert.Equal(t, api.CodeEngineUnavailable, ee.Code)
}
