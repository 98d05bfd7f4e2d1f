package tui

import (
	"fmt"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/internal/tuitest"
)

// bigMesh is the sample mesh's agents repeated up to n hosts.
func bigMesh(n int) api.MeshView {
	sample := tuitest.SampleMesh(now)
	var agents []api.Member
	for _, m := range sample.Members {
		if m.Role == api.RoleAgent {
			agents = append(agents, m)
		}
	}
	v := api.MeshView{Mesh: "big", At: now}
	for i := 0; i < n; i++ {
		m := agents[i%len(agents)]
		m.Name = fmt.Sprintf("%s-%03d", m.Name, i)
		v.Members = append(v.Members, m)
	}
	return v
}

// BenchmarkHostsView is one frame of the hosts view, the console's home, at 120×35: the frame
// budget at 60 fps is 16 ms.
func BenchmarkHostsView(b *testing.B) {
	for _, n := range []int{10, 100, 500} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			a := New(nil, Options{Renderer: tuitest.Renderer()})
			a.Update(tea.WindowSizeMsg{Width: 120, Height: 35})
			a.ctx.Mesh = bigMesh(n)
			a.Update(common.MeshMsg{View: a.ctx.Mesh})
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				_ = a.View()
			}
		})
	}
}
