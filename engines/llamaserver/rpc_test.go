package llamaserver

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/enginetest"
)

func TestRPCArgs(t *testing.T) {
	assert.Nil(t, rpcArgs(nil, nil), "one host: no RPC")
	assert.Equal(t, []string{"--rpc", "127.0.0.1:1,127.0.0.1:2", "-ngl", "99", "--tensor-split", "0.25,0.75"},
		rpcArgs([]string{"127.0.0.1:1", "127.0.0.1:2"}, []float64{0.25, 0.75}))
}

func TestRPCDriverDetectsNothingWithoutTheBinary(t *testing.T) {
	d, err := NewRPC(RPCConfig{Binary: "/nonexistent/ggml-rpc-server", LogDir: t.TempDir()}, nil)
	require.NoError(t, err)
	e := d.Detect(t.Context())
	assert.False(t, e.Present)
	assert.Contains(t, e.Detail, "ggml-rpc-server not found")
}

// The real worker and llama-server: two workers take the tiny model's layers in the shares
// given, a chat answers through them, and a worker that dies takes llama-server down (which the
// agent's supervision relies on).
func TestRPCDriverRealSplit(t *testing.T) {
	bin := enginetest.RPCServer(t)
	model := enginetest.TinyGGUF(t)
	ctx := t.Context()
	rd, err := NewRPC(RPCConfig{Binary: bin, LogDir: t.TempDir(), CacheDir: t.TempDir(), Threads: 1, StopGrace: 2 * time.Second}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { rd.StopAll(context.Background()) })

	e := rd.Detect(ctx)
	require.True(t, e.Healthy, e.Detail)
	assert.Equal(t, api.RuntimeRPCServer, e.Runtime)
	assert.Regexp(t, `^\d+\.\d+\.\d+$`, e.Version, "the RPC protocol version")

	var ends []string
	var workers []engines.Instance
	for _, id := range []string{"part-a", "part-b"} {
		inst, err := rd.Load(ctx, engines.Model{ID: id})
		require.NoError(t, err)
		require.NoError(t, rd.Health(ctx, engines.Model{ID: id}))
		assert.Regexp(t, `^127\.0\.0\.1:\d+$`, inst.Endpoint(), "a loopback host:port, never the LAN")
		ends = append(ends, inst.Endpoint())
		workers = append(workers, inst)
	}
	loaded, _ := rd.Loaded(ctx)
	assert.Equal(t, []string{"part-a", "part-b"}, loaded)

	d := newDriver(t, func(c *Config) { c.Binary = enginetest.LlamaServer(t) })
	m := engines.Model{ID: "main", Name: "tiny", Source: model, Context: 256, RPC: ends, TensorSplit: []float64{0.5, 0.5}}
	inst, err := d.Load(ctx, m)
	require.NoError(t, err)
	args := strings.Join(inst.(*Instance).cmd.Args, " ")
	assert.Contains(t, args, "--rpc "+ends[0]+","+ends[1]+" -ngl 99 --tensor-split 0.5,0.5")
	zero := 0.0
	chunks := collect(t, d, m, engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: "hello"}}, MaxTokens: 4, Temperature: &zero})
	require.NotEmpty(t, chunks)
	assert.True(t, chunks[len(chunks)-1].Done)

	// A worker killed under it aborts llama-server at its next request.
	syscall.Kill(workers[1].(rpcInstance).Pid(), syscall.SIGKILL)
	<-workers[1].Done()
	_ = d.Chat(ctx, m, engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: "again"}}, MaxTokens: 4}, func(engines.ChatChunk) error { return nil })
	select {
	case <-inst.Done():
		assert.Error(t, inst.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("llama-server went on without its worker")
	}
	assert.Error(t, rd.Health(ctx, engines.Model{ID: "part-b"}))
	require.NoError(t, rd.Unload(ctx, engines.Model{ID: "part-a"}))
	require.NoError(t, rd.Unload(ctx, engines.Model{ID: "part-b"}))
	loaded, _ = rd.Loaded(ctx)
	assert.Empty(t, loaded)
}
