package gateway

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/dialect"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/agent/route"
)

// listed is one model name the caller may use, with every ready placement serving it.
type listed struct {
	name       string
	placements []api.Placement // local first, then by host
}

// served lists the models the caller may use now, mesh-wide: every ready placement in the
// caller's namespaces, on this host or on an alive, reachable agent; one entry per name (per
// namespace and name for the admin: route.ListedName).
func (g *Gateway) served(who api.Principal) []listed {
	byName := map[string]*listed{}
	var names []string
	add := func(p api.Placement) {
		name := route.ListedName(who, p)
		l, ok := byName[name]
		if !ok {
			l = &listed{name: name}
			byName[name] = l
			names = append(names, name)
		}
		l.placements = append(l.placements, p)
	}
	for _, l := range g.a.ServingAll(who) {
		add(l.Placement)
	}
	// A sleeping model is listed too, as Ollama lists a model it has but has not loaded: a
	// request for it wakes it. (Not in /api/ps: nothing of it is loaded.) Dormant ones are
	// added after every ready one, which they do not displace.
	var dormant []api.Placement
	for _, p := range g.a.List(who) {
		if agent.Dormant(p) {
			dormant = append(dormant, p)
		}
	}
	if v := g.router.View(); v != nil {
		seen := map[string]bool{}
		for _, p := range v.Placements() {
			if p.Host == g.self || !who.Allows(p.Namespace) {
				continue
			}
			if agent.Dormant(p) {
				dormant = append(dormant, p)
				continue
			}
			if p.State != api.StateReady || seen[p.Model] {
				continue
			}
			seen[p.Model] = true
			for _, q := range v.Ready(route.NSFilter(who), p.Model) {
				if q.Host != g.self && who.Allows(q.Namespace) {
					add(q)
				}
			}
		}
	}
	for _, p := range dormant {
		if l, ok := byName[route.ListedName(who, p)]; !ok || agent.Dormant(l.placements[0]) {
			add(p)
		}
	}
	slices.Sort(names)
	out := make([]listed, len(names))
	for i, n := range names {
		out[i] = *byName[n]
	}
	return out
}

// listWith answers a listing to an authenticated caller.
func (g *Gateway) listWith(w http.ResponseWriter, r *http.Request, d dialect.Dialect, f func(api.Principal) any) {
	who, ok := principal(r)
	if !ok {
		g.fail(w, d, &dialect.Failure{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Msg: "no authenticated caller"})
		return
	}
	b, err := json.Marshal(f(who))
	if err != nil {
		g.fail(w, d, &dialect.Failure{Status: http.StatusInternalServerError, Code: api.CodeInternal, Msg: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(append(b, '\n'))
}

// openAIModel is GET /v1/models/{id}: one model the caller may use, or 404 in OpenAI's shape.
// The id may hold slashes ("library/qwen2") and, as Ollama names go, drop or add ":latest".
func (g *Gateway) openAIModel(w http.ResponseWriter, r *http.Request) {
	who, ok := principal(r)
	if !ok {
		g.fail(w, dialect.OpenAI, &dialect.Failure{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Msg: "no authenticated caller"})
		return
	}
	v := g.router.View()
	forwarded := r.Header.Get(hop.Header) != ""
	in, id := g.router.Scope(who, r.PathValue("id"), forwarded, v)
	name := g.router.Resolve(in, id, forwarded, v)
	for _, l := range g.served(in) {
		if l.name == name {
			l.name = route.ListedName(who, l.placements[0]) // as the caller's own listing spells it
			g.listWith(w, r, dialect.OpenAI, func(api.Principal) any { return dialect.OAModelOf(l.name, l.placements) })
			return
		}
	}
	g.fail(w, dialect.OpenAI, unserved(g.router.NotServed(in, name, forwarded, v)))
}

// openAIModels is GET /v1/models: every model the caller may use, owned_by the host serving it
// (a local replica first; replicas on several hosts are listed once, their hosts joined by ",").
func (g *Gateway) openAIModels(w http.ResponseWriter, r *http.Request) {
	g.listWith(w, r, dialect.OpenAI, func(who api.Principal) any {
		list := dialect.OAModelList{Object: "list", Data: []dialect.OAModel{}}
		for _, l := range g.served(who) {
			list.Data = append(list.Data, dialect.OAModelOf(l.name, l.placements))
		}
		return list
	})
}

// ollamaTags is GET /api/tags over the same set as /v1/models.
func (g *Gateway) ollamaTags(w http.ResponseWriter, r *http.Request) {
	g.listWith(w, r, dialect.OllamaChat, func(who api.Principal) any {
		models := []dialect.OllamaTag{}
		for _, l := range g.served(who) {
			models = append(models, dialect.OllamaTagOf(l.name, l.placements[0]))
		}
		return map[string]any{"models": models}
	})
}

// ollamaPS is GET /api/ps: what is loaded and ready, which is every served model.
func (g *Gateway) ollamaPS(w http.ResponseWriter, r *http.Request) {
	g.listWith(w, r, dialect.OllamaChat, func(who api.Principal) any {
		models := []dialect.OllamaRunning{}
		expires := dialect.NeverExpires()
		for _, l := range g.served(who) {
			p := l.placements[0]
			if agent.Dormant(p) {
				continue
			}
			models = append(models, dialect.OllamaRunningOf(l.name, p, expires))
		}
		return map[string]any{"models": models}
	})
}

// ollamaVersion is GET /api/version.
func (g *Gateway) ollamaVersion(w http.ResponseWriter, r *http.Request) {
	g.listWith(w, r, dialect.OllamaChat, func(api.Principal) any {
		return map[string]string{"version": g.cfg.Version}
	})
}

// hailoList is hailo-ollama's GET /hailo/v1/list, for its clients (Home Assistant's
// integration, hailo-ollama CLIs): every model the caller may use now, on any runtime — what
// this gateway can answer, rather than Hailo's whole zoo.
func (g *Gateway) hailoList(w http.ResponseWriter, r *http.Request) {
	g.listWith(w, r, dialect.OllamaChat, func(who api.Principal) any {
		names := []string{}
		for _, l := range g.served(who) {
			names = append(names, l.name)
		}
		return map[string]any{"models": names}
	})
}

// ollamaShow is POST /api/show {"model"} (or the older {"name"}): what the gateway knows of a
// served model, in Ollama's shape. The engine's template and parameters stay with the engine.
func (g *Gateway) ollamaShow(w http.ResponseWriter, r *http.Request) {
	who, ok := principal(r)
	if !ok {
		g.fail(w, dialect.OllamaChat, &dialect.Failure{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Msg: "no authenticated caller"})
		return
	}
	body, f := dialect.ReadBody(w, r, 64<<10)
	if f != nil {
		g.fail(w, dialect.OllamaChat, f)
		return
	}
	var req struct{ Model, Name string }
	if f := dialect.DecodeJSON(body, &req); f != nil {
		g.fail(w, dialect.OllamaChat, f)
		return
	}
	model := cmp.Or(req.Model, req.Name)
	if model == "" {
		g.fail(w, dialect.OllamaChat, dialect.BadRequest("model is required"))
		return
	}
	forwarded := r.Header.Get(hop.Header) != ""
	v := g.router.View()
	who, model = g.router.Scope(who, model, forwarded, v)
	name := g.router.Resolve(who, model, forwarded, v)
	var found *listed
	for _, l := range g.served(who) {
		if l.name == name {
			found = &l
			break
		}
	}
	if found == nil {
		g.fail(w, dialect.OllamaChat, unserved(g.router.NotServed(who, name, forwarded, v)))
		return
	}
	g.listWith(w, r, dialect.OllamaChat, func(api.Principal) any { return dialect.OllamaShowOf(name, found.placements[0]) })
}
