// Package route is where a model request goes: the replicas of the model the caller may use,
// on this agent and on the others the mesh view shows, least busy first, with the namespace
// rules that say which model a name means; and the one failover loop that tries them in turn.
// How a request is served on a replica (its dialects, the local engine, the hop to another
// agent) is the gateway's.
package route

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
)

// Router finds the replicas of a model for a caller, and counts the requests in flight on each.
type Router struct {
	a    *agent.Agent
	self string
	view func() View
	// inflight counts the requests in flight on each replica (a *atomic.Int64 by replica):
	// written once a replica, read by every request.
	inflight sync.Map
}

// New is a router over the agent's local placements and, when view is not nil, the mesh's;
// self is this agent's node name in the mesh.
func New(a *agent.Agent, self string, view func() View) *Router {
	return &Router{a: a, self: self, view: view}
}

// View is what the router reads of the mesh now, or nil when it runs without one.
func (rt *Router) View() View {
	if rt.view == nil {
		return nil
	}
	return rt.view()
}

// Unserved says why no replica takes a request.
type Unserved struct {
	// NotReady: the caller may see a placement of the model, but none is ready; otherwise the
	// caller may see none (whether the model exists in another namespace or nowhere).
	NotReady bool
	Msg      string
}

// View is what routing reads of the mesh. *mesh.Mesh satisfies it, answering each call
// from the mesh's state at that moment, without building a whole view (an agent asks per
// request, and building one copied every member's state); mesh.View, a snapshot, does too.
type View interface {
	// Ready lists the placements serving model that can take a request now (state ready, on an
	// alive agent whose API answers); namespace "" matches every namespace.
	Ready(namespace, model string) []api.Placement
	// Member finds a member by node name (for its API address).
	Member(name string) (api.Member, bool)
	// Placements lists every placement of every member, unavailable ones included.
	Placements() []api.Placement
}

// NSFilter is the namespace filter a principal's lookups use: "" (every namespace) for the admin.
func NSFilter(who api.Principal) string {
	if who.Admin {
		return ""
	}
	return who.Namespace
}

// replica names one placement on one host.
type replica struct{ host, id string }

// counter returns the in-flight counter of one placement.
func (rt *Router) counter(host, id string) *atomic.Int64 {
	key := replica{host, id} // not a joined string: no allocation per look-up
	if c, ok := rt.inflight.Load(key); ok {
		return c.(*atomic.Int64)
	}
	c, _ := rt.inflight.LoadOrStore(key, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// Replica is one replica a request may go to.
type Replica struct {
	P     api.Placement
	Local *agent.Local // nil: on another agent
	// Busy counts the requests this agent has on the replica: its caller adds one while it
	// serves or forwards a request there.
	Busy *atomic.Int64
	load int64 // busy at the time of choosing
}

// candidates lists the replicas of model the caller may use, least busy first. Local ones come
// from the agent; remote ones from the mesh view (never for a forwarded request). Busy is what
// this agent knows: requests it is serving on a local placement (queued ones included), or
// forwards in flight to a remote one. Other agents' traffic to a remote replica is invisible
// here; measured speed breaks ties.
func (rt *Router) candidates(who api.Principal, model string, forwarded bool, v View) []Replica {
	var out []Replica
	locals := rt.a.Serving(who, model)
	for i := range locals {
		l := &locals[i] // not a copy: a Local is 700 bytes
		c := Replica{P: l.Placement, Local: l, Busy: rt.counter(l.Placement.Host, l.Placement.ID)}
		c.load = c.Busy.Load()
		out = append(out, c)
	}
	if !forwarded && v != nil {
		for _, p := range v.Ready(NSFilter(who), model) {
			if p.Host == rt.self || !who.Allows(p.Namespace) {
				continue
			}
			c := Replica{P: p, Busy: rt.counter(p.Host, p.ID)}
			c.load = c.Busy.Load()
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		out = rt.dormant(who, model, forwarded, v)
	}
	slices.SortStableFunc(out, func(a, b Replica) int {
		return cmp.Or(
			cmp.Compare(a.load, b.load),
			boolOrder(a.Local == nil, b.Local == nil), // a local replica saves a hop
			cmp.Compare(b.P.TokensPerS, a.P.TokensPerS),
			cmp.Compare(a.P.TTFTMillis, b.P.TTFTMillis),
		)
	})
	return out
}

// dormant lists the sleeping (or waking) replicas of model the caller may use, for when none
// is ready: a request for one wakes it on its owner. Local ones first, which wake without a hop.
func (rt *Router) dormant(who api.Principal, model string, forwarded bool, v View) []Replica {
	var out []Replica
	locals := rt.a.Dormant(who, model)
	for i := range locals {
		l := &locals[i]
		out = append(out, Replica{P: l.Placement, Local: l, Busy: rt.counter(l.Placement.Host, l.Placement.ID)})
	}
	if forwarded || v == nil {
		return out
	}
	for _, p := range v.Placements() {
		if p.Model == model && p.Host != rt.self && who.Allows(p.Namespace) && agent.Dormant(p) {
			out = append(out, Replica{P: p, Busy: rt.counter(p.Host, p.ID)})
		}
	}
	return out
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// NotServed is why no replica of model takes the request: not ready when the caller may see a
// placement of it that is not ready (loading, restarting, on an unreachable host), evicted or
// failed (with why) when it may see only such a record, no such model when there is none — the same answer whether the model exists in a namespace the caller may
// not see or nowhere, so a token learns nothing of other namespaces.
func (rt *Router) NotServed(who api.Principal, model string, forwarded bool, v View) *Unserved {
	var seen []api.Placement
	for _, p := range rt.a.List(who) {
		if p.Model == model {
			seen = append(seen, p)
		}
	}
	if !forwarded && v != nil {
		for _, p := range v.Placements() {
			if p.Model == model && who.Allows(p.Namespace) && p.Host != rt.self {
				seen = append(seen, p)
			}
		}
	}
	var ended *api.Placement
	for _, p := range seen {
		if p.State.Terminal() {
			if ended == nil {
				ended = &p
			}
			continue
		}
		why := string(p.State)
		if p.Reason != "" {
			why += ": " + p.Reason
		}
		return &Unserved{NotReady: true, Msg: fmt.Sprintf("model %q is not ready on %s (%s)", model, p.Host, why)}
	}
	if ended != nil {
		// Evicted (a swap replaced it on a one-model device, or memory ran short) or failed: the
		// caller may see the record, so it learns why, not that its namespace lacks the model.
		return &Unserved{Msg: fmt.Sprintf("model %q is not served: it was %s on %s: %s; place it again to use it", model, ended.State, ended.Host, ended.Reason)}
	}
	where := "in the mesh"
	if forwarded || v == nil {
		where = "on " + rt.self
	}
	return &Unserved{Msg: fmt.Sprintf("model %q is not served %s for this token's namespace", model, where)}
}

// Lookup finds the replicas of a requested model: by its name, else (only then, as looking
// costs a walk over every placement) by its Ollama twin. It returns the name they serve.
func (rt *Router) Lookup(who api.Principal, model string, forwarded bool, v View) (string, []Replica) {
	if cands := rt.candidates(who, model, forwarded, v); len(cands) > 0 {
		return model, cands
	}
	name := rt.Resolve(who, model, forwarded, v)
	if name == model {
		return model, nil
	}
	return name, rt.candidates(who, name, forwarded, v)
}

// Resolve is the name a requested model is served under for who: the name itself when a
// placement the caller may see has it, else its Ollama twin when one has that ("x" and
// "x:latest" are one model to Ollama clients, which add or drop the tag as they please).
func (rt *Router) Resolve(who api.Principal, model string, forwarded bool, v View) string {
	twin, ok := ollamaTwin(model)
	if !ok {
		return model
	}
	found := false
	for _, p := range rt.a.List(who) {
		if p.Model == model {
			return model
		}
		found = found || p.Model == twin
	}
	if !forwarded && v != nil {
		for _, p := range v.Placements() {
			if !who.Allows(p.Namespace) {
				continue
			}
			if p.Model == model {
				return model
			}
			found = found || p.Model == twin
		}
	}
	if found {
		return twin
	}
	return model
}

// ollamaTwin is the other spelling of an Ollama model name: without ":latest", or with it when
// the name has no tag.
func ollamaTwin(model string) (string, bool) {
	if base, ok := strings.CutSuffix(model, ":latest"); ok && base != "" {
		return base, true
	}
	if i := strings.LastIndex(model, "/"); !strings.Contains(model[i+1:], ":") {
		return model + ":latest", true
	}
	return "", false
}

// Scope narrows the admin's model lookup to one namespace, so a name never resolves across
// namespaces silently (a namespace that gave its model the admin's model's name would
// otherwise share, or take, the admin's chats): a bare name is the default namespace's, and
// "team-a/qwen" is team-a's qwen — unless the default namespace has a model by that very name
// (Ollama names have slashes too), which wins, so no namespace can shadow one of the default
// namespace's. A namespace token keeps its own namespace, and may qualify its names with it
// too (api.Placement.QualifiedName). The principal returned is what the lookups that follow use.
func (rt *Router) Scope(who api.Principal, model string, forwarded bool, v View) (api.Principal, string) {
	if !who.Admin {
		if rest, ok := strings.CutPrefix(model, who.Namespace+"/"); ok && !rt.names(who, model, forwarded, v) {
			return who, rest
		}
		return who, model
	}
	def := api.Principal{Namespace: api.DefaultNamespace}
	if rt.names(def, model, forwarded, v) {
		return def, model
	}
	if ns, rest, ok := strings.Cut(model, "/"); ok && ns != api.DefaultNamespace && api.ValidNamespace(ns) == nil {
		if in := (api.Principal{Namespace: ns}); rt.names(in, rest, forwarded, v) {
			return in, rest
		}
	}
	return def, model
}

// names reports whether who may see a placement of model (or its Ollama twin), in any state.
func (rt *Router) names(who api.Principal, model string, forwarded bool, v View) bool {
	twin, _ := ollamaTwin(model)
	match := func(p api.Placement) bool {
		return who.Allows(p.Namespace) && (p.Model == model || (twin != "" && p.Model == twin))
	}
	models := []string{model, twin}
	if twin == "" {
		models = models[:1]
	}
	if rt.a.Names(who, models...) {
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

// ListedName is the name a placement is listed under for who: its own to a namespace token;
// to the admin, its qualified name — the spelling scope resolves.
func ListedName(who api.Principal, p api.Placement) string {
	if !who.Admin {
		return p.Model
	}
	return p.QualifiedName()
}

// Policy is what the failover loop asks of its request.
type Policy struct {
	// Skip, if not nil, passes over a replica the failures so far say cannot do better.
	Skip func(r Replica) bool
	// Judge is the failure the client is told of when replica r failed with err before
	// answering, and whether the next replica may do better.
	Judge func(r Replica, err error) (error, bool)
	// Log, if not nil, is told of each failure after which the next replica is tried.
	Log *slog.Logger
}

// Failover serves a request from its replicas in turn (try; final for the last of them): the
// first that answers, or writes anything (committed), answers it, and Failover returns nil. A
// failure before the first byte tries the next replica while the policy's Judge says another
// may do better; otherwise Failover returns the last failure, as judged. ctx is the client's: once
// it has left, Failover returns ctx's error.
func Failover(ctx context.Context, reps []Replica, pol Policy, try func(r Replica, final bool) (committed bool, err error)) error {
	var last error
	for i, r := range reps {
		if pol.Skip != nil && pol.Skip(r) {
			continue
		}
		committed, err := try(r, i == len(reps)-1)
		if committed || err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var again bool
		if last, again = pol.Judge(r, err); !again {
			break
		}
		if pol.Log != nil && i < len(reps)-1 {
			pol.Log.Info("replica failed before answering; trying the next", "model", r.P.Model,
				"host", r.P.Host, "placement", r.P.ID, "err", err)
		}
	}
	return last
}
