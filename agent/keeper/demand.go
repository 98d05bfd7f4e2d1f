package keeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
)

// On demand: a request for a model that no host runs places it, in the namespaces where the
// operator turned it on (Config.OnDemand). The model is found by its intent (one kept with no
// replica, or an alias: SetAlias), in any namespace, else by its name read as an Ollama model (ollama://name) or a Hailo zoo model
// (hailo://name) that some host of the view could run; the keeper records an intent for it
// (one replica) and the keepers place it where it ranks best. The request waits for it to serve,
// up to Config.DemandWait.
//
// A name that resolves to nothing, or to what no host can take, is refused the same way each
// time, from a short memory of the refusal (demandRefusalTTL): a flood of such requests costs
// one sizing, places nothing, and each gets the reason.

// demandRefusalTTL is how long a refused on-demand name is answered from memory.
const demandRefusalTTL = 10 * time.Second

// OnDemandFor reports whether requests of namespace ns place what they ask for.
func (k *Keeper) OnDemandFor(ns string) bool {
	return slices.Contains(k.cfg.OnDemand, "*") || slices.Contains(k.cfg.OnDemand, ns)
}

// Demand makes model serve for who, placing it when nothing runs it, and waits until a replica
// is ready (nil), the wait ends (an EngineUnavailable error saying how far it got, which
// clients retry), or it cannot be placed (the refusal). A model with an intent is waited for in
// any case; without one, off in who's namespace or a name that resolves to no source, it is
// NotFound.
func (k *Keeper) Demand(ctx context.Context, who api.Principal, model string) error {
	ns := who.Namespace
	if ns == "" {
		ns = api.DefaultNamespace
	}
	if err := k.mayDemand(ns, model); err != nil {
		return err
	}
	in, err := k.demanded(ctx, api.Principal{Namespace: ns, Admin: who.Admin}, ns, model)
	if err != nil {
		return err
	}
	return k.waitServing(ctx, in, nil)
}

// mayDemand refuses a request that would place model in ns when on-demand placement is off
// there and the mesh keeps no intent (nor alias) for it.
func (k *Keeper) mayDemand(ns, model string) error {
	if k.OnDemandFor(ns) || k.intended(ns, model) {
		return nil
	}
	return api.Errorf(api.CodeNotFound, "model %q is not served in the mesh for namespace %s, and placing models on demand is off there (--on-demand)", model, ns)
}

// intended reports whether the mesh keeps an intent for model in ns: one asked for explicitly
// (a pull, a placement) is waited for whatever the on-demand switch says.
func (k *Keeper) intended(ns, model string) bool {
	for _, name := range names(model) {
		if in, ok := k.cfg.Store.Get(api.IntentKey(ns, name)); ok && !in.Deleted {
			return true
		}
	}
	return false
}

// demanded is the intent for model in ns: the one kept, or a new one for the source the name
// resolves to. Concurrent demands of one name share one resolution.
func (k *Keeper) demanded(ctx context.Context, who api.Principal, ns, model string) (api.Intent, error) {
	for _, name := range names(model) {
		if in, ok := k.cfg.Store.Get(api.IntentKey(ns, name)); ok && !in.Deleted {
			if in.Replicas == 0 { // an alias, asked for the first time
				in.Replicas = 1
				k.event(in, fmt.Sprintf("placing %s (%s) on demand: a request named the alias", in.Key(), in.Source), "")
				return k.put(in)
			}
			return in, nil
		}
	}
	key := api.IntentKey(ns, model)
	k.mu.Lock()
	if r, ok := k.refused[key]; ok && time.Now().Before(r.until) {
		k.mu.Unlock()
		return api.Intent{}, r.err
	}
	wait, busy := k.resolving[key]
	if !busy {
		wait = make(chan struct{})
		k.resolving[key] = wait
	}
	k.mu.Unlock()
	if busy {
		select {
		case <-wait:
		case <-ctx.Done():
			return api.Intent{}, ctx.Err()
		}
		return k.demanded(ctx, who, ns, model)
	}
	in, err := k.resolve(ctx, who, ns, model)
	k.mu.Lock()
	delete(k.resolving, key)
	if err != nil {
		k.refused[key] = refusal{err: err, until: time.Now().Add(demandRefusalTTL)}
	}
	k.mu.Unlock()
	close(wait)
	return in, err
}

// refusal is an on-demand name refused, remembered for a while.
type refusal struct {
	err   error
	until time.Time
}

// names are the spellings of one Ollama model: as asked, and its twin with or without
// ":latest".
func names(model string) []string {
	if base, ok := strings.CutSuffix(model, ":latest"); ok {
		return []string{model, base}
	}
	if !strings.Contains(model[strings.LastIndex(model, "/")+1:], ":") {
		return []string{model, model + ":latest"}
	}
	return []string{model}
}

// resolve finds the source model names and records its intent: an Ollama model, else a Hailo
// zoo model, whichever some host could run (Accept asks the view).
func (k *Keeper) resolve(ctx context.Context, who api.Principal, ns, model string) (api.Intent, error) {
	var errs []error
	for _, src := range []string{"ollama://" + model, "hailo://" + model} {
		if _, err := source.Parse(src); err != nil {
			errs = append(errs, err)
			continue
		}
		in, err := k.Accept(ctx, who, api.PlacementRequest{Source: src, Namespace: ns})
		if err == nil {
			k.event(in, fmt.Sprintf("placing %s on demand: a request asked for it and no host runs it", in.Key()), "")
			return in, nil
		}
		errs = append(errs, err)
	}
	e := api.Errorf(api.CodeNotFound, "model %q is not served in the mesh for namespace %s, and no host can place it on demand", model, ns)
	e.Message += ": " + errors.Join(errs...).Error()
	return api.Intent{}, e
}

// waitServing waits until a replica of in serves, or says why it will not; look, when set, is
// shown the intent's placements at every change.
func (k *Keeper) waitServing(ctx context.Context, in api.Intent, look func([]api.Placement)) error {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.DemandWait)
	defer cancel()
	views, stop := k.cfg.Mesh.Subscribe()
	defer stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		v := k.cfg.Mesh.View()
		if len(v.Ready(in.Namespace, in.Name)) > 0 {
			return nil
		}
		if look != nil {
			var ps []api.Placement
			for _, p := range v.Placements() {
				if p.Namespace == in.Namespace && p.Model == in.Name && p.Source == in.Source {
					ps = append(ps, p)
				}
			}
			look(ps)
		}
		st, blocked := k.statusOf(in.Key())
		if blocked != "" {
			return &api.Error{Code: api.CodeInsufficientMemory, Message: fmt.Sprintf("%s cannot be placed now: %s", in.Key(), blocked)}
		}
		select {
		case <-ctx.Done():
			why := st.Note
			for _, r := range st.Where {
				why = fmt.Sprintf("%s on %s", r.State, r.Host)
			}
			return &api.Error{Code: api.CodeEngineUnavailable, Message: fmt.Sprintf("%s is being placed on demand and does not serve yet (%s); retry shortly", in.Key(), why)}
		case <-views:
		case <-tick.C:
		}
	}
}

// statusOf is one intent's status as this agent last looked, and why no host can take it
// ("" when one may).
func (k *Keeper) statusOf(key string) (api.IntentStatus, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, st := range k.status {
		if st.Key() == key {
			return st, k.blocked[key]
		}
	}
	return api.IntentStatus{}, ""
}

// SetAlias makes name, in who's namespace (or ns for the admin), a mesh-wide name for src: the
// first request that names it places it (an intent of one replica from then on). The source is
// checked and sized as an intent's; an intent of that name already kept keeps its count.
func (k *Keeper) SetAlias(ctx context.Context, who api.Principal, ns, name, src string) (api.Intent, error) {
	if name == "" {
		return api.Intent{}, api.Errorf(api.CodeBadRequest, "an alias needs a name")
	}
	in, err := k.cfg.Agent.Intend(ctx, who, api.PlacementRequest{Source: src, Name: name, Namespace: ns})
	if err != nil {
		return api.Intent{}, err
	}
	if err := k.placeable(in); err != nil {
		return api.Intent{}, err
	}
	in.Alias, in.Replicas = true, 0
	if old, ok := k.cfg.Store.Get(in.Key()); ok && !old.Deleted {
		in.Replicas = old.Replicas
	}
	return k.put(in)
}
