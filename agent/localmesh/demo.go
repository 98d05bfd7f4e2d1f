package localmesh

import (
	"context"
	"log/slog"

	"github.com/llmkube/mesh/agent/api"
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

// StartDemo runs the demo mesh at the real engines' pace and asks for DemoPlacements without
// waiting for them: the console shows them pulling and loading.
func StartDemo(ctx context.Context, llamaServer string, log *slog.Logger) (*Mesh, error) {
	m, err := Start(ctx, Options{MeshID: "demo", LlamaServer: llamaServer, Log: log})
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
