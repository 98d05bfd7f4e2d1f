package node

import (
	"net/http"
	"slices"
	"strings"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/ollama"
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
		return agentPeers(m, self, c, agent.FilesPath+sum, func(h *api.Host) bool {
			if h.Files == nil {
				return false
			}
			_, ok := slices.BinarySearch(h.Files.Holds, prefix)
			return ok
		})
	}
}

// manifestHolders finds the mesh's other agents whose Ollama daemon lists a model (the engine
// models each host gossips), each Peer's URL the model's manifest on that host.
func manifestHolders(m *mesh.Mesh, self string, id *seal.Identity) func(ref string) []download.Peer {
	c := hop.NewClient(0, id, nil)
	return func(ref string) []download.Peer {
		n, err := ollama.ParseName(ref)
		if err != nil {
			return nil
		}
		path := agent.OllamaManifestPath + n.Namespace + "/" + n.Model + "/" + n.Tag
		return agentPeers(m, self, c, path, func(h *api.Host) bool {
			return slices.ContainsFunc(h.Engines, func(e api.Engine) bool {
				return e.Runtime == api.RuntimeOllama && slices.ContainsFunc(e.Models, func(name string) bool { return ollama.SameModel(name, ref) })
			})
		})
	}
}

// everyAgent finds the mesh's other live agents that serve files, each Peer's URL path on that
// host: for what an agent answers from its own records (a Hailo library's digests).
func everyAgent(m *mesh.Mesh, self string, id *seal.Identity) func(path string) []download.Peer {
	c := hop.NewClient(0, id, nil)
	return func(path string) []download.Peer {
		return agentPeers(m, self, c, path, func(h *api.Host) bool { return h.Files != nil })
	}
}

// agentPeers are the mesh's other live agents whose gossiped host has, by name, with path
// on each reached over the sealed channel.
func agentPeers(m *mesh.Mesh, self string, c *hop.Client, path string, has func(*api.Host) bool) []download.Peer {
	var out []download.Peer
	for _, mb := range m.View().Members {
		if mb.Name == self || mb.Role != api.RoleAgent || mb.Liveness != api.Alive || mb.Host == nil ||
			mb.Host.APIAddr == "" || !has(mb.Host) {
			continue
		}
		peer := seal.PeerNamed(mb.Name, mb.SealKey)
		out = append(out, download.Peer{
			Name:   mb.Name,
			URL:    c.Scheme() + "://" + mb.Host.APIAddr + path,
			Client: &http.Client{Transport: sealedTo{c, peer}},
		})
	}
	slices.SortFunc(out, func(a, b download.Peer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// sealedTo sends every request to one peer over the sealed channel.
type sealedTo struct {
	c    *hop.Client
	peer seal.Peer
}

func (s sealedTo) RoundTrip(r *http.Request) (*http.Response, error) { return s.c.Do(r, s.peer) }
