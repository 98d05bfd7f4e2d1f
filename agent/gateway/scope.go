package gateway

import (
	"strings"

	"github.com/llmkube/mesh/agent/api"
)

// scope narrows the admin's model lookup to one namespace, so a name never resolves across
// namespaces silently (a namespace that gave its model the admin's model's name would
// otherwise share, or take, the admin's chats): a bare name is the default namespace's, and
// "team-a/qwen" is team-a's qwen — unless the default namespace has a model by that very name
// (Ollama names have slashes too), which wins, so no namespace can shadow one of the default
// namespace's. A namespace token keeps its own namespace, and may qualify its names with it
// too (api.Placement.QualifiedName). The principal returned is what the lookups that follow use.
func (g *Gateway) scope(who api.Principal, model string, forwarded bool, v View) (api.Principal, string) {
	if !who.Admin {
		if rest, ok := strings.CutPrefix(model, who.Namespace+"/"); ok && !g.names(who, model, forwarded, v) {
			return who, rest
		}
		return who, model
	}
	def := api.Principal{Namespace: api.DefaultNamespace}
	if g.names(def, model, forwarded, v) {
		return def, model
	}
	if ns, rest, ok := strings.Cut(model, "/"); ok && ns != api.DefaultNamespace && api.ValidNamespace(ns) == nil {
		if in := (api.Principal{Namespace: ns}); g.names(in, rest, forwarded, v) {
			return in, rest
		}
	}
	return def, model
}

// names reports whether who may see a placement of model (or its Ollama twin), in any state.
func (g *Gateway) names(who api.Principal, model string, forwarded bool, v View) bool {
	twin, _ := ollamaTwin(model)
	match := func(p api.Placement) bool {
		return who.Allows(p.Namespace) && (p.Model == model || (twin != "" && p.Model == twin))
	}
	models := []string{model, twin}
	if twin == "" {
		models = models[:1]
	}
	if g.a.Names(who, models...) {
		return true
	}
	if !forwarded && v != nil {
		for _, p := range v.Placements() {
			if match(p) {
				return true
			}
		}
	}
	return false
}

// listedName is the name a placement is listed under for who: its own to a namespace token;
// to the admin, its qualified name — the spelling scope resolves.
func listedName(who api.Principal, p api.Placement) string {
	if !who.Admin {
		return p.Model
	}
	return p.QualifiedName()
}
