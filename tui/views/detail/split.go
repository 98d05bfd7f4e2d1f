package detail

import (
	"fmt"

	"github.com/llmkube/mesh/agent/api"
)

// modelCell names a placement in the host's list: a split's main says it is one, a split's
// part says whose share it is.
func modelCell(p api.Placement) string {
	switch {
	case p.Part != nil:
		return fmt.Sprintf("share of split %s on %s: %d layers (%.0f%%)", p.Part.Parent, p.Part.Main, p.Part.Member.Layers, p.Part.Member.Share*100)
	case p.Split != nil:
		return fmt.Sprintf("%s (split main, %d members)", p.Model, len(p.Split.Members))
	}
	return p.Model
}
