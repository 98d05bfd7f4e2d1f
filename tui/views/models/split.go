package models

import (
	"fmt"
	"strings"

	"github.com/llmkube/mesh/agent/api"
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

// memoryOf is what a placement holds, a split's on every member.
func memoryOf(p api.Placement) int64 {
	n := p.Memory.Bytes
	if p.Split != nil {
		for _, m := range p.Split.Members {
			n += m.Need
		}
	}
	return n
}

// splitDetail says each member's share: "split: h1 main 0/8 layers, h2 8/8 layers (1.0)".
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
		parts = append(parts, fmt.Sprintf("%s%s %d/%d layers (%.2f)", m.Host, role, m.Layers, p.Split.Layers, m.Share))
	}
	return "split: " + strings.Join(parts, ", ")
}
