package keeper

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/rank"
)

// Register mounts the intents' routes on the agent's API (agent.Server.Handle, behind token authentication):
//
//	GET    /v1/intents                  the intents the token may see, with how each is met
//	POST   /v1/intents                  keep a model running (api.PlacementRequest with replicas)
//	DELETE /v1/intents/{namespace}/{name}  stop keeping it: every replica is removed
//	PUT    /v1/aliases/{name}           a mesh-wide name for a source, placed on first request
//	POST   /api/pull                    Ollama's pull: place the model, answer once it serves
func (k *Keeper) Register(handle func(pattern string, h http.Handler)) {
	// A pull places a model: like POST /v1/placements it needs a token, even where the
	// agent serves its anonymous namespace's inference without one.
	handle("POST /api/pull", http.HandlerFunc(k.pull))
	handle("GET /v1/intents", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent.WriteJSON(w, http.StatusOK, k.Status(principal(r)))
	}))
	handle("POST /v1/intents", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.PlacementRequest
		if err := agent.DecodeJSON(w, r, &req); err != nil {
			agent.WriteError(w, err)
			return
		}
		in, err := k.Accept(r.Context(), principal(r), req)
		if err != nil {
			agent.WriteError(w, err)
			return
		}
		agent.WriteJSON(w, http.StatusCreated, in)
	}))
	handle("PUT /v1/aliases/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.AliasRequest
		if err := agent.DecodeJSON(w, r, &req); err != nil {
			agent.WriteError(w, err)
			return
		}
		in, err := k.SetAlias(r.Context(), principal(r), req.Namespace, r.PathValue("name"), req.Source)
		if err != nil {
			agent.WriteError(w, err)
			return
		}
		agent.WriteJSON(w, http.StatusOK, in)
	}))
	handle("DELETE /v1/intents/{namespace}/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := k.Remove(principal(r), r.PathValue("namespace"), r.PathValue("name"))
		if err != nil {
			agent.WriteError(w, err)
			return
		}
		agent.WriteJSON(w, http.StatusOK, in)
	}))
}

func principal(r *http.Request) api.Principal {
	p, _ := agent.PrincipalFrom(r.Context())
	return p
}

// checkRequest refuses replica counts and host lists no agent could keep.
func checkRequest(req api.PlacementRequest) error {
	if req.Replicas < 0 || req.Replicas > api.MaxReplicas {
		return api.Errorf(api.CodeBadRequest, "replicas %d: want 1 to %d", req.Replicas, api.MaxReplicas)
	}
	if req.MaxReplicas < 0 || req.MaxReplicas > api.MaxReplicas || (req.MaxReplicas > 0 && req.MaxReplicas < max(req.Replicas, 1)) {
		return api.Errorf(api.CodeBadRequest, "max_replicas %d: want at least replicas (%d) and at most %d", req.MaxReplicas, max(req.Replicas, 1), api.MaxReplicas)
	}
	if req.Split != nil && (req.Replicas > 1 || req.MaxReplicas > 0 || len(req.Hosts) > 0) {
		return api.Errorf(api.CodeBadRequest, "a split is one placement across the hosts its split names: replicas and only-hosts do not apply")
	}
	if len(req.Hosts) > 64 {
		return api.Errorf(api.CodeBadRequest, "%d hosts named: at most 64", len(req.Hosts))
	}
	for _, h := range req.Hosts {
		if h == "" {
			return api.Errorf(api.CodeBadRequest, "an empty host name in hosts")
		}
	}
	if err := api.CheckLabels(req.Labels); err != nil {
		return api.Errorf(api.CodeBadRequest, "%v", err)
	}
	return nil
}

// Accept records an intent without placing it here: the keepers place it where it ranks best.
// What it accepts, every agent can place by the same rules: the request passes every check that
// does not depend on a host, and some host of the view could run it (now, or once memory frees).
func (k *Keeper) Accept(ctx context.Context, who api.Principal, req api.PlacementRequest) (api.Intent, error) {
	if err := checkRequest(req); err != nil {
		return api.Intent{}, err
	}
	in, err := k.cfg.Agent.Intend(ctx, who, req)
	if err != nil {
		return api.Intent{}, err
	}
	if err := k.placeable(in); err != nil {
		return api.Intent{}, err
	}
	in.Replicas = k.replicas(in, req.Replicas, 0)
	return k.put(in)
}

// placeable refuses an intent that no host of the view could ever run: every host refuses it
// for a reason other than memory, liveness or running on battery, which may change.
func (k *Keeper) placeable(in api.Intent) error {
	members := k.members(time.Now())
	ranked := rank.Rank(members, rank.Request{PlacementRequest: in.PlacementRequest, Estimate: api.SizeEstimate{Bytes: in.Need, Device: in.Device}})
	var first *api.Ranked
	for i, r := range ranked {
		if !allowed(in.Hosts, r.Host) {
			continue
		}
		switch {
		case r.Verdict != api.VerdictRefused, r.Code == api.CodeInsufficientMemory, r.Code == api.CodeUnreachable, r.Code == api.CodeOnBattery:
			return nil
		case first == nil:
			first = &ranked[i]
		}
	}
	if first == nil {
		return api.Errorf(api.CodeNotFound, "no agent in the mesh may run %s (hosts %v)", in.Key(), in.Hosts)
	}
	return &api.Error{Code: first.Code, Message: "no host could ever run " + in.Key() + ": " + first.Host + " " + first.Reason}
}

// replicas is the count an intent is recorded with: the one asked, else the kept intent's (at
// least the replicas it has, counting one more placed by hand: placing a model on a second host
// keeps both), else 1.
func (k *Keeper) replicas(in api.Intent, asked, placedHere int) int {
	if asked > 0 {
		return asked
	}
	old, ok := k.cfg.Store.Get(in.Key())
	if !ok || old.Deleted || old.Source != in.Source {
		return 1
	}
	// Counted in the view as it is now, not as last judged: a keeper that has not judged the
	// intent yet (it just started, or the intent just came) would count none, record one, and
	// then remove one of the two as a surplus.
	now := time.Now()
	others := 0
	for _, r := range k.judge(old, k.members(now), now).status.Where {
		if r.Counts && r.Host != k.self {
			others++
		}
	}
	return min(api.MaxReplicas, max(old.Replicas, others+placedHere))
}

// has is how many replicas of the intent count, as this agent last looked.
func (k *Keeper) has(key string) int {
	for _, st := range k.Status(api.Principal{Admin: true}) {
		if st.Key() == key {
			return st.Has
		}
	}
	return 0
}

// put records a local edit and gossips it.
func (k *Keeper) put(in api.Intent) (api.Intent, error) {
	in, wire, err := k.cfg.Store.Put(in)
	if err != nil {
		return api.Intent{}, err
	}
	k.cfg.Mesh.Share(map[string][]byte{in.Key(): wire})
	k.poke()
	return in, nil
}

// Remove deletes an intent (a tombstone): every agent removes its replicas.
func (k *Keeper) Remove(who api.Principal, ns, name string) (api.Intent, error) {
	in, ok := k.cfg.Store.Get(api.IntentKey(ns, name))
	if !ok || in.Deleted || !who.Allows(ns) {
		return api.Intent{}, api.Errorf(api.CodeNotFound, "no intent %s", api.IntentKey(ns, name))
	}
	in.Deleted = true
	return k.put(in)
}

// Place is POST /v1/placements in a mesh that keeps intents: the placement is made here, as
// the caller chose, and the intent recorded with it (its replicas, or one more than the others
// have when the request names none).
func (k *Keeper) Place(ctx context.Context, who api.Principal, req api.PlacementRequest) (api.Placement, error) {
	if err := checkRequest(req); err != nil {
		return api.Placement{}, err
	}
	if lacks := api.MissingLabel(k.cfg.Agent.Host().Labels, req.Labels); lacks != "" {
		return api.Placement{}, api.Errorf(api.CodeBadRequest, "%s has no label %s: place it where one does (mesh rank says which)", k.self, lacks)
	}
	if req.NotOnBattery && k.cfg.Agent.Host().OnBattery {
		return api.Placement{}, api.Errorf(api.CodeOnBattery, "%s runs on battery: place it on a host that does not (mesh rank says which)", k.self)
	}
	if req.Split != nil || req.Part != nil {
		// A split is kept by its main, which re-plans it when a member goes (agent/split.go);
		// an intent would re-place it on one host, which cannot hold it. A part is its main's.
		return k.cfg.Agent.Place(ctx, who, req)
	}
	k.mu.Lock()
	k.byHand++
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.byHand--
		k.mu.Unlock()
		k.poke()
	}()
	p, err := k.cfg.Agent.Place(ctx, who, req)
	if err != nil {
		return p, err
	}
	in := api.Intent{PlacementRequest: api.PlacementRequest{
		Source: p.Source, Runtime: p.Runtime, Namespace: p.Namespace, Context: p.Context, Priority: p.Priority,
		Name: p.Model, Protected: p.Protected, MemoryCheck: p.MemoryCheck, SHA256: p.SHA256, Args: p.Args,
		MMProj: p.MMProj, TTL: req.TTL, Hosts: req.Hosts, Labels: req.Labels, MaxReplicas: req.MaxReplicas,
		NotOnBattery: req.NotOnBattery,
	}, Need: p.Memory.Bytes, Device: p.Memory.Device}
	in.Replicas = k.replicas(in, req.Replicas, 1)
	if _, err := k.put(in); err != nil {
		k.cfg.Log.Warn("recording the intent of a placement", "placement", p.ID, "err", err)
	}
	return p, nil
}

// Delete is DELETE /v1/placements/{id} in a mesh that keeps intents. Deleting a replica while
// others count makes the intent want one less; deleting the last one it has, or the failed
// record of an intent that has none, deletes the intent (the user gives up on it). Deleting a
// failed record while replicas serve leaves the intent alone.
func (k *Keeper) Delete(who api.Principal, id string, wait time.Duration) (api.Placement, bool, error) {
	if p, err := k.cfg.Agent.Get(who, id); err == nil {
		// The keeper removes what a tombstone deletes: not this one, which the caller deletes.
		k.mu.Lock()
		k.deleting[id] = true
		k.mu.Unlock()
		defer func() {
			k.mu.Lock()
			delete(k.deleting, id)
			k.mu.Unlock()
		}()
		in, ok := k.cfg.Store.Get(api.IntentKey(p.Namespace, p.Model))
		has := k.has(in.Key())
		if ok && !in.Deleted && in.Source == p.Source && (!p.State.Terminal() || has == 0) {
			if in.Replicas > 1 && has > 1 {
				in.Replicas--
			} else {
				in.Deleted = true
			}
			if _, err := k.put(in); err != nil {
				return api.Placement{}, false, err
			}
		}
	}
	return k.cfg.Agent.Delete(who, id, wait)
}

// replaced stops keeping what a swap took off its device (agent OnReplaced): whoever placed the
// newcomer chose to replace it, so the mesh must not go on wanting it. While other replicas of
// its intent count, the intent wants one fewer (never fewer than 1); when the replaced one was
// its last, the intent is deleted, as deleting that replica by hand would. Its evicted record
// stays, to place it again.
func (k *Keeper) replaced(old, by api.Placement) {
	in, ok := k.cfg.Store.Get(api.IntentKey(old.Namespace, old.Model))
	if !ok || in.Deleted || in.Source != old.Source {
		return
	}
	now := time.Now()
	others := 0
	for _, r := range k.judge(in, k.members(now), now).status.Where {
		if r.Counts && r.Placement != old.ID {
			others++
		}
	}
	what := "deleted"
	switch {
	case others == 0:
		in.Deleted = true
	case in.Replicas > 1:
		in.Replicas--
		what = fmt.Sprintf("now wants %d", in.Replicas)
	default:
		return // its one wanted replica counts elsewhere
	}
	if _, err := k.put(in); err != nil {
		k.cfg.Log.Warn("updating the intent of a replaced placement", "placement", old.ID, "err", err)
		return
	}
	newcomer := "another namespace's placement"
	if by.Namespace == old.Namespace {
		newcomer = by.Model
	}
	k.event(in, fmt.Sprintf("intent %s %s: its replica %s was replaced on %s by %s", in.Key(), what, old.ID, old.Host, newcomer), "")
}
