package rank

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// rpcAgent is an agent with llama-server and an rpc-server of protocol v5.0.0.
func rpcAgent(name string, free float64) api.Member {
	m := agent(name, free)
	m.Host.Engines = append(m.Host.Engines, api.Engine{Runtime: api.RuntimeRPCServer, Present: true, Healthy: true, Version: "5.0.0"})
	return m
}

// big is a 40-layer model: 16 GiB of weights, 4 GiB of KV, 1 GiB of compute, 512 MiB overhead.
func big() SplitRequest {
	r := gguf(0)
	r.Estimate = api.SizeEstimate{Weights: 16 * gib, KV: 4 * gib, Compute: gib, Overhead: 512 * mib, Method: api.SizeHeader, Layers: 40}
	r.Estimate.Bytes = r.Estimate.Weights + r.Estimate.KV + r.Estimate.Compute + r.Estimate.Overhead
	return SplitRequest{Request: r}
}

func left(p api.SplitPlan, host string) api.SplitLeftOut {
	for _, l := range p.Left {
		if l.Host == host {
			return l
		}
	}
	return api.SplitLeftOut{}
}

func TestSplitFewestHostsThatFit(t *testing.T) {
	members := []api.Member{rpcAgent("a", 14), rpcAgent("b", 14), rpcAgent("c", 14), rpcAgent("d", 1)}
	p := Split(members, big())
	require.True(t, p.Fits, p.Reason)
	require.Len(t, p.Members, 2, "two 14 GiB hosts hold 21.5 GiB with headroom: %s", p.Reason)
	assert.Equal(t, "5.0.0", p.Protocol)
	layers, shares := 0, 0.0
	for _, m := range p.Members {
		layers += m.Layers
		shares += m.Share
		assert.Equal(t, m.Weights+m.KV+m.Compute+m.Overhead, m.Need, "a member's need is its parts")
		room := int64(float64(m.Free)*(1-DefaultHeadroom)) - m.MainNeed
		assert.LessOrEqual(t, m.Need, room, "member %s within its budget with headroom", m.Host)
	}
	assert.Equal(t, 40, layers)
	assert.InDelta(t, 1, shares, 1e-9)
	assert.True(t, p.Members[0].Main)
	assert.Positive(t, p.Members[0].MainNeed, "the main holds llama-server too")
	assert.Contains(t, left(p, "c").Reason, "not needed")
	assert.Equal(t, api.CodeInsufficientMemory, left(p, "d").Code, "1 GiB holds no layer beyond its fixed cost: %+v", p.Left)
	assert.Equal(t, p.TensorSplit(), []float64{p.Members[0].Share, p.Members[1].Share})
}

func TestSplitPrefersTheHostWithTheFileAsMain(t *testing.T) {
	members := []api.Member{rpcAgent("a", 15), rpcAgent("b", 14)}
	req := big()
	req.HasFiles = map[string]bool{"b": true}
	p := Split(members, req)
	require.True(t, p.Fits, p.Reason)
	assert.Equal(t, "b", p.Main)
	req.Main = "a"
	assert.Equal(t, "a", Split(members, req).Main, "a named main wins")
}

func TestSplitRefusals(t *testing.T) {
	old := rpcAgent("old", 12)
	old.Host.Engines[len(old.Host.Engines)-1].Version = "4.0.0"
	far := rpcAgent("far", 12)
	none := agent("none", 12) // llama-server but no rpc-server
	dead := with(rpcAgent("dead", 12), func(m *api.Member) { m.Liveness = api.Dead })
	members := []api.Member{rpcAgent("main", 12), old, far, none, dead, rpcAgent("small", 1)}
	req := big()
	req.Main = "main"
	req.RTT = map[string]time.Duration{"far": 80 * time.Millisecond}
	p := Split(members, req)
	assert.False(t, p.Fits)
	assert.Equal(t, "refused: no other host can take part", p.Reason)
	assert.Contains(t, left(p, "old").Reason, "RPC protocol v4.0.0 differs from the main's v5.0.0")
	assert.Contains(t, left(p, "far").Reason, "RTT 80ms over the bound of 50ms")
	assert.Zero(t, p.MaxRTTMillis, "the default bound")
	// The user's bound takes the far host in, and the plan keeps it for a re-plan.
	wide := req
	wide.MaxRTT = 100 * time.Millisecond
	pw := Split(members, wide)
	assert.NotContains(t, left(pw, "far").Reason, "RTT", "far is within 100 ms")
	assert.Equal(t, 100.0, pw.MaxRTTMillis)
	assert.Contains(t, left(p, "none").Reason, "no RPC runtime")
	assert.Equal(t, api.CodeUnreachable, left(p, "dead").Code)
	assert.Contains(t, left(p, "small").Reason, "not enough budget")

	// Two hosts that hold only part of it together: the arithmetic says how much.
	p = Split([]api.Member{rpcAgent("a", 8), rpcAgent("b", 8)}, big())
	assert.False(t, p.Fits)
	assert.Regexp(t, `the 2 hosts that can take part hold \d+ of the model's 40 layers`, p.Reason)
	require.Len(t, p.Members, 2)

	req = big()
	req.Estimate.Layers = 0
	assert.Contains(t, Split(members, req).Reason, "layer count are unknown")
	req = big()
	req.Source = "ollama://qwen2"
	assert.Contains(t, Split(members, req).Reason, "only GGUF models")
	req = big()
	req.Hosts = []string{"main", "dead"}
	p = Split(members, req)
	assert.False(t, p.Fits)
	assert.Equal(t, "not among the hosts asked for", left(p, "old").Reason)
}

func TestSplitSpeedRestsOnMeasurements(t *testing.T) {
	a, b := rpcAgent("a", 14), rpcAgent("b", 14)
	req := big()
	req.Main = "a"
	p := Split([]api.Member{a, b}, req)
	require.True(t, p.Fits)
	assert.Zero(t, p.TokensPerS, "no measurement: no number")
	assert.Contains(t, p.Basis, "no measured speed for this model on a, b")
	assert.Contains(t, p.Basis, "b RTT not measured")

	for _, m := range []*api.Member{&a, &b} {
		m.Placements = []api.Placement{{Source: req.Source, TokensPerS: 10}}
	}
	req.RTT = map[string]time.Duration{"b": time.Millisecond}
	p = Split([]api.Member{a, b}, req)
	require.True(t, p.Fits)
	// 10 tok/s on each half, plus one 1 ms round trip to b a token: 1/(0.1 + 0.001).
	assert.InDelta(t, 1/0.101, p.TokensPerS, 0.001)
	assert.Contains(t, p.Basis, "a 10.0 tok/s measured")
	assert.Contains(t, p.Basis, "b 1.00 ms RTT")
}

func TestLayersForStaysWithinCapacity(t *testing.T) {
	cs := []*candidate{{capacity: 7}, {capacity: 3}, {capacity: 1}}
	got := layersFor(cs, 10)
	assert.Equal(t, 10, got[0]+got[1]+got[2])
	for i, c := range cs {
		assert.LessOrEqual(t, got[i], c.capacity)
	}
}

func TestSplitMainMayHoldNoLayer(t *testing.T) {
	req := big()
	req.Main = "main"
	// 2 GiB holds llama-server (1.5 GiB) but no layer beside it; the others hold them all.
	p := Split([]api.Member{rpcAgent("main", 2), rpcAgent("a", 14), rpcAgent("b", 14)}, req)
	require.True(t, p.Fits, p.Reason)
	assert.Equal(t, "main", p.Members[0].Host)
	assert.Zero(t, p.Members[0].Layers)
	assert.Zero(t, p.Members[0].Need, "no rpc-server on the main")
	assert.Positive(t, p.Members[0].MainNeed)
	p = Split([]api.Member{rpcAgent("main", 1), rpcAgent("a", 14)}, req)
	assert.False(t, p.Fits)
	assert.Contains(t, p.Reason, "needs 1.5 GiB for llama-server")
}

func TestRTTsFromTheView(t *testing.T) {
	got := RTTs([]api.Member{{Name: "a", RTTMillis: 0.5}, {Name: "b"}})
	assert.Equal(t, map[string]time.Duration{"a": 500 * time.Microsecond}, got, "an unmeasured member is not judged on it")
}

// withEnds is big() with 1 GiB of token embeddings and 1 GiB of output layer among its weights.
func withEnds() SplitRequest {
	r := big()
	r.Estimate.InputWeights, r.Estimate.OutputWeights = gib, gib
	r.Estimate.Cache = 256 * mib
	return r
}

func TestSplitTheMainHoldsTheOutputLayer(t *testing.T) {
	members := []api.Member{rpcAgent("a", 14), rpcAgent("b", 14)}
	req := withEnds()
	req.Main = "a"
	p := Split(members, req)
	require.True(t, p.Fits, p.Reason)
	main, other := p.Members[0], p.Members[1]
	require.True(t, main.Main)
	assert.True(t, main.Output, "the main holds the output layer, so the logits stay on it")
	assert.False(t, other.Output)
	assert.Equal(t, 40, main.Layers+other.Layers)
	perLayer := float64(14*gib) / 40 // the repeating layers' weights
	assert.InDelta(t, perLayer*float64(main.Layers)+float64(gib), float64(main.Weights), 1, "the main's part: its layers and the output layer")
	assert.InDelta(t, perLayer*float64(other.Layers), float64(other.Weights), 1, "the other's: its layers only")
	assert.Equal(t, req.Estimate.Compute+req.Estimate.Overhead+gib, main.MainNeed,
		"llama-server holds the token embeddings, and no prompt cache (it would pull the members' KV over the LAN)")
	for _, m := range p.Members {
		assert.LessOrEqual(t, m.Need, int64(float64(m.Free)*(1-DefaultHeadroom))-m.MainNeed, "member %s within its budget", m.Host)
	}
	devices := p.Devices()
	require.Len(t, devices, 2)
	assert.Equal(t, []string{"b", "a"}, []string{devices[0].Host, devices[1].Host}, "the output's holder is llama-server's last device")
	assert.Equal(t, []float64{other.Share, main.Share}, p.TensorSplit(), "--tensor-split follows --rpc's order")
}

func TestSplitOutputLayerOnAnotherWhenTheMainHasNoRoom(t *testing.T) {
	// The main has room for llama-server (with the embeddings) but not for a layer beside the
	// output layer: it holds no layer, and the member with the most room takes the output.
	members := []api.Member{rpcAgent("small", 4.2), rpcAgent("b", 14), rpcAgent("c", 11)}
	req := withEnds()
	req.Main = "small"
	p := Split(members, req)
	require.True(t, p.Fits, p.Reason)
	byHost := map[string]api.SplitMember{}
	for _, m := range p.Members {
		byHost[m.Host] = m
	}
	assert.Zero(t, byHost["small"].Layers, "%+v", p.Members)
	assert.True(t, byHost["b"].Output, "%+v", p.Members)
	devices := p.Devices()
	assert.Equal(t, "b", devices[len(devices)-1].Host)
	for _, m := range p.Members {
		assert.LessOrEqual(t, m.Need, int64(float64(m.Free)*(1-DefaultHeadroom))-m.MainNeed, "member %s within its budget", m.Host)
	}
}

func TestSplitWithoutTheEndsKnownSpreadsThem(t *testing.T) {
	p := Split([]api.Member{rpcAgent("a", 14), rpcAgent("b", 14)}, big())
	require.True(t, p.Fits, p.Reason)
	var total int64
	for _, m := range p.Members {
		assert.False(t, m.Output, "no output layer known")
		total += m.Weights
	}
	assert.InDelta(t, float64(16*gib), float64(total), 40, "every weight counted once")
}

func TestSplitOutputGoesWithTheLastDeviceWhenItsHolderHasNoLayer(t *testing.T) {
	est := withEnds().Estimate
	a := &candidate{m: &api.Member{Name: "a"}, capacity: 30, output: true}
	b := &candidate{m: &api.Member{Name: "b"}, capacity: 40}
	// a was to hold the output layer but holds no layer: the output lands on llama-server's last
	// device, b, and is counted there.
	ms := arithmetic([]*candidate{a, b}, est, []int{0, 40})
	assert.False(t, ms[0].Output)
	require.True(t, ms[1].Output)
	assert.Equal(t, (est.Weights-2*gib)+gib, ms[1].Weights, "b's layers and the output layer")
	assert.Equal(t, ms[1].Weights+ms[1].KV+ms[1].Compute+ms[1].Overhead, ms[1].Need)
	assert.Equal(t, "b", api.SplitPlan{Members: ms}.Devices()[0].Host)
}
