package localmesh

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/sim/gguf"
)

// The demo's split, fast: the three demo hosts with the simulated rpc-server hold
// DemoSplitModel only together; it places from the Mac (the host with the file) across all
// three, answers through another host's gateway, and when a worker's host goes the two left
// cannot hold it: the split fails with the reason, and nothing of it keeps running.
func TestDemoSplitAcrossTheThreeHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := Start(ctx, Options{Dir: t.TempDir(), LlamaServer: llamaServer, RPCServer: rpcServer, Fast: true,
		Hosts: DemoSplitHosts(), Models: []gguf.Spec{DemoSplitModel}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })

	mac := m.Host("mac-mini")
	src := FileSource(mac.ModelPath(DemoSplitModel.Name))
	p, err := m.Client("mac-mini").Place(ctx, api.PlacementRequest{Source: src, Split: &api.SplitAsk{}})
	require.NoError(t, err)
	require.NotNil(t, p.Split)
	require.Len(t, p.Split.Members, 3, "no two hosts hold it: %s", p.Split.Reason)
	ready := waitSplit(t, ctx, m, "mac-mini", p.ID, func(p api.Placement) bool { return p.State == api.StateReady })

	// The main's admission says its own need is llama-server's, and what the host reserves for
	// the split in all: the figure the plan showed for it.
	main := p.Split.Members[0]
	want := fmt.Sprintf("that is llama-server's: with its %d/%d layers mac-mini reserves %s of the split", main.Layers, p.Split.Layers, api.FormatBytes(main.Reserves()))
	found := errors.New("found")
	ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
	err = m.Client("mac-mini").Events(ectx, 1, nil, func(ev api.Event) error {
		if ev.Placement != nil && ev.Placement.ID == p.ID && strings.Contains(ev.Message, want) {
			return found
		}
		return nil
	})
	ecancel()
	require.ErrorIs(t, err, found, "an event of %s says %q", p.ID, want)
	assert.ElementsMatch(t, []string{"mac-mini", "gpu-server", "pi5-hailo"}, hostsOf(ready))

	// Through another host's gateway, once gossip carried the split's readiness there.
	require.Eventually(t, func() bool {
		var text strings.Builder
		err := m.Client("gpu-server").ChatStream(ctx, DemoSplitModel.Name, []apiclient.ChatMessage{{Role: "user", Content: "hello"}},
			apiclient.ChatOptions{MaxTokens: 8}, func(d apiclient.ChatDelta) error {
				text.WriteString(d.Content)
				return nil
			})
		return err == nil && text.Len() > 0
	}, 30*time.Second, 100*time.Millisecond, "a chat with the split through gpu-server")

	require.NoError(t, m.Host("pi5-hailo").Node.Close())
	failed := waitSplit(t, ctx, m, "mac-mini", p.ID, func(p api.Placement) bool { return p.State == api.StateFailed })
	assert.Equal(t, api.CodeInsufficientMemory, failed.Code, failed.Reason)
	assert.Contains(t, failed.Reason, "pi5-hailo")
	require.Eventually(t, func() bool {
		return len(partsOf(t, ctx, m, "gpu-server", p.ID))+len(partsOf(t, ctx, m, "mac-mini", p.ID)) == 0 &&
			len(children(t, "llama-server")) == 0 // both simulators are this binary: no llama-server nor rpc-server left
	}, 30*time.Second, 100*time.Millisecond, "a failed split leaves nothing running")
}
