package node

import (
	"net/http"
	"slices"
	"strings"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh"
)

// holders finds the mesh's other agents that gossip holding a file, as peers to copy it from
// over the sealed channel: each request goes to the member the view names, its key checked.
func holders(m *mesh.Mesh, self string, id *seal.Identity) func(sum string) []download.Peer {
	c := hop.NewClient(0, id, nil)
	return func(sum string) []download.Peer {
		if len(sum) < api.HoldPrefix {
			return nil
		}
		prefix := sum[:api.HoldPrefix]
		var out []download.Peer
		for _, mb := range m.View().Members {
			if mb.Name == self || mb.Role != api.RoleAgent || mb.Liveness != api.Alive || mb.Host == nil ||
				mb.Host.Files == nil || mb.Host.APIAddr == "" {
				continue
			}
			if _, ok := slices.BinarySearch(mb.Host.Files.Holds, prefix); !ok {
				continue
			}
			peer := seal.PeerNamed(mb.Name, mb.SealKey)
			out = append(out, download.Peer{
				Name:   mb.Name,
				URL:    c.Scheme() + "://" + mb.Host.APIAddr + agent.FilesPath + sum,
				Client: &http.Client{Transport: sealedTo{c, peer}},
			})
		}
		slices.SortFunc(out, func(a, b download.Peer) int { return strings.Compare(a.Name, b.Name) })
		return out
	}
}

// sealedTo sends every request to one peer over the sealed channel.
type sealedTo struct {
	c    *hop.Client
	peer seal.Peer
}

func (s sealedTo) RoundTrip(r *http.Request) (*http.Response, error) { return s.c.Do(r, s.peer) }
