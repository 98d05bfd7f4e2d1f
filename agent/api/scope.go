package api

import "strings"

// otherNamespaceModel stands in for the name of a model a namespace token may not see: the
// device is busy (ranking needs to know a placement there is a swap), but not with what.
const otherNamespaceModel = "a model of another namespace"

// ScopeView is what p may see of a mesh view: an admin sees everything; a namespace token sees
// only its namespace's placements, each host's placement count of those alone, and no name of a
// model another namespace runs or pulled (engine listings, a loaded accelerator). Capacity
// figures stay: ranking needs them. The view's members and hosts are copied, never changed.
func (p Principal) ScopeView(v MeshView) MeshView {
	if p.Admin {
		return v
	}
	members := make([]Member, len(v.Members))
	for i, m := range v.Members {
		var ps []Placement
		for _, pl := range m.Placements {
			if p.Allows(pl.Namespace) {
				ps = append(ps, pl)
			}
		}
		m.Placements = ps
		if m.Host != nil {
			h := p.ScopeHost(*m.Host, ps)
			m.Host = &h
		}
		members[i] = m
	}
	v.Members = members
	return v
}

// ScopeHost is what p may see of a host, given the host's placements p may see (already
// filtered, or all of them: only those p's namespace allows count). See ScopeView.
//
// Engine listings name what a runtime can run without a pull. Hailo's zoo is Hailo's public
// catalogue and stays; an Ollama daemon's local tags and a llama-server host's GGUF files are
// what the host's users pulled, so a namespace token sees only those its own placements use.
func (p Principal) ScopeHost(h Host, visible []Placement) Host {
	if p.Admin {
		return h
	}
	own := map[string]bool{}  // sources of p's placements, without their scheme
	mine := map[string]bool{} // names p's placements are served under
	n := 0
	for _, pl := range visible {
		if !p.Allows(pl.Namespace) {
			continue
		}
		mine[pl.Model] = true
		if _, rest, ok := strings.Cut(pl.Source, "://"); ok {
			own[rest] = true // ollama://llama3.2:1b is the tag llama3.2:1b; file:///m.gguf the file /m.gguf
		}
		own[pl.Source] = true // a bare /abs/m.gguf
		if !pl.State.Terminal() && pl.State != StateSizing {
			n++
		}
	}
	h.Placements = n
	if len(h.Engines) > 0 {
		engines := make([]Engine, len(h.Engines))
		for i, e := range h.Engines {
			if e.Runtime != RuntimeHailoOllama && len(e.Models) > 0 {
				var keep []string
				for _, name := range e.Models {
					if own[name] {
						keep = append(keep, name)
					}
				}
				e.Models = keep
			}
			engines[i] = e
		}
		h.Engines = engines
	}
	if len(h.Accelerators) > 0 {
		accs := make([]Accelerator, len(h.Accelerators))
		for i, a := range h.Accelerators {
			if a.Loaded != "" && !mine[a.Loaded] {
				a.Loaded = otherNamespaceModel
			}
			accs[i] = a
		}
		h.Accelerators = accs
	}
	return h
}
