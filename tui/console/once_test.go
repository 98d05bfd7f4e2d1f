package console

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/agent/api"
)

func TestSame(t *testing.T) {
	p := api.Placement{Host: "pi5", Model: "qwen2:1.5b", Source: "hailo://qwen2:1.5b", Runtime: api.RuntimeHailoOllama,
		Namespace: "default", Context: api.DefaultContext, Priority: api.PriorityNormal, State: api.StateReady}
	req := api.PlacementRequest{Source: "hailo://qwen2:1.5b"}
	assert.True(t, Same(p, req), "the defaults a request leaves out are the placement's")
	for name, change := range map[string]func(*api.PlacementRequest){
		"another source":    func(r *api.PlacementRequest) { r.Source = "hailo://llama3.2:1b" },
		"another namespace": func(r *api.PlacementRequest) { r.Namespace = "team-a" },
		"another context":   func(r *api.PlacementRequest) { r.Context = 4096 },
		"another priority":  func(r *api.PlacementRequest) { r.Priority = api.PriorityHigh },
		"another name":      func(r *api.PlacementRequest) { r.Name = "qwen" },
		"another runtime":   func(r *api.PlacementRequest) { r.Runtime = api.RuntimeOllama },
		"protected":         func(r *api.PlacementRequest) { r.Protected = true },
		"engine arguments":  func(r *api.PlacementRequest) { r.Args = []string{"-ngl", "99"} },
		"a projector":       func(r *api.PlacementRequest) { r.MMProj = "/m/mmproj.gguf" },
	} {
		r := req
		change(&r)
		assert.False(t, Same(p, r), name)
	}
	vision := p
	vision.MMProj = "file:///m/mmproj.gguf"
	assert.True(t, Same(vision, api.PlacementRequest{Source: p.Source, MMProj: "/m/mmproj.gguf"}), "the projector as the agent records it")
	assert.False(t, Same(vision, req), "a request without the projector")
	failed := p
	failed.State = api.StateFailed
	assert.False(t, Same(failed, req), "a failed placement is placed again")
	pulling := p
	pulling.State = api.StatePulling
	assert.True(t, Same(pulling, req), "one on its way is the same")

	v := api.MeshView{Members: []api.Member{{Name: "pi5", Role: api.RoleAgent, Placements: []api.Placement{p}}}}
	got, ok := existing(Placements(v), req, "")
	assert.True(t, ok)
	assert.Equal(t, "pi5", got.Host)
	_, ok = existing(Placements(v), req, "gpu-server")
	assert.False(t, ok, "asked for another host")
}
