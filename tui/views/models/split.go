package models

import (
	"fmt"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/render"
)

// A split placement (one model across hosts) is one row: its main placement, named by its
// members; the members' parts are not rows of their own.

// hostOf is a placement's host, or a split's members, the main first: "h1+h2+h3".
func hostOf(p api.Placement) string {
	if p.Split == nil {
		return p.Host
	}
	names := make([]string, 0, len(p.Split.Members))
	for _, m := range p.Split.Members {
		names = append(names, m.Host)
	}
	return strings.Join(names, "+")
}

// memoryOf is what a placement holds, a split's on every member (its main's llama-server
// among them).
func memoryOf(p api.Placement) int64 {
	if p.Split == nil || len(p.Split.Members) == 0 {
		return p.Memory.Bytes
	}
	var n int64
	for _, m := range p.Split.Members {
		n += m.Reserves()
	}
	return n
}

// splitDetail says each member's share, what it reserves (the plan's figure, its part and on the
// main llama-server's) and its layers: "split: h1 main 1.2 GiB: 0/8 layers (0.00), h2 6.0 GiB:
// 8/8 layers + output (1.00)" (the member holding the output layer says so).
func splitDetail(p api.Placement) string {
	if p.Split == nil {
		return ""
	}
	parts := make([]string, 0, len(p.Split.Members))
	for _, m := range p.Split.Members {
		role := ""
		if m.Main {
			role = " main"
		}
		output := ""
		if m.Output {
			output = " + output"
		}
		parts = append(parts, fmt.Sprintf("%s%s %s: %d/%d layers%s (%.2f)", m.Host, role, render.Bytes(m.Reserves()), m.Layers, p.Split.Layers, output, m.Share))
	}
	return "split: " + strings.Join(parts, ", ")
}
