package localmesh

import (
	"context"
	"log/slog"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/sim/gguf"
)

// DemoPlacements are what the demo puts on its hosts at start, so there is something to chat
// with: a Hailo zoo model on the Pi, a GGUF file on the Mac, an Ollama model on the server.
func DemoPlacements(m *Mesh) []Placed {
	var out []Placed
	for _, h := range m.Hosts {
		switch {
		case h.Runs(api.RuntimeHailoOllama):
			out = append(out, Placed{Host: h.Spec.Name, Request: api.PlacementRequest{Source: "hailo://qwen2.5-instruct:1.5b"}})
		case h.Runs(api.RuntimeLlamaServer):
			out = append(out, Placed{Host: h.Spec.Name, Request: api.PlacementRequest{Source: FileSource(h.ModelPath("sim-1b")), Name: "llama-sim-1b"}})
		case h.Runs(api.RuntimeOllama):
			out = append(out, Placed{Host: h.Spec.Name, Request: api.PlacementRequest{Source: "ollama://llama3.2:1b"}})
		}
	}
	return out
}

// DemoSplitModel is the demo's model that no host holds alone but the three hold together:
// shaped like Llama-3.1-70B at Q5_1 (~49 GiB, a sparse file on the Mac), over the GPU server's
// budget (47 GiB) and within the three's (68 GiB). Placing it is the demo of a split.
var DemoSplitModel = gguf.Spec{Name: "sim-70b", BlockCount: 80, EmbeddingLength: 8192, HeadCount: 64, HeadCountKV: 8,
	ContextLength: 131072, VocabSize: 128256, FeedForwardLength: 28672, FileType: "Q5_1"}

// DemoSplitHosts are the demo's hosts able to take part in splits when it has an rpc-server
// program: every host runs one (the llama-server host through Options.RPCServer).
func DemoSplitHosts() []HostSpec {
	hosts := DemoHosts()
	for i := range hosts {
		if !hosts[i].runs(api.RuntimeLlamaServer) {
			hosts[i].Runtimes = append(hosts[i].Runtimes, api.RuntimeRPCServer)
		}
	}
	return hosts
}

// StartDemo runs the demo mesh at the real engines' pace and asks for DemoPlacements without
// waiting for them: the console shows them pulling and loading. With rpcServer (a simulated
// ggml-rpc-server) every host takes shares of splits, and the Mac holds DemoSplitModel.
func StartDemo(ctx context.Context, llamaServer, rpcServer string, log *slog.Logger) (*Mesh, error) {
	opts := Options{MeshID: "demo", LlamaServer: llamaServer, Log: log}
	if rpcServer != "" {
		opts.RPCServer, opts.Hosts, opts.Models = rpcServer, DemoSplitHosts(), []gguf.Spec{DemoSplitModel}
	}
	m, err := Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	for _, p := range DemoPlacements(m) {
		if _, err := m.Client(p.Host).Place(ctx, p.Request); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}
