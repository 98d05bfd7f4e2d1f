package agent

import (
	"context"
	"net/http"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/sizing"
)

// Intend checks a request as an intent (agent/keeper): every check a placement passes that does
// not depend on this host (the namespace is the token's to use, the source parses and runs on
// the runtime, the options are sound), and sizes the model once, so every agent ranks hosts for
// it with the same figure. Whether some host can run it is the keeper's question, asked of the
// mesh view.
func (a *Agent) Intend(ctx context.Context, who api.Principal, req api.PlacementRequest) (api.Intent, error) {
	if req.Namespace == "" {
		req.Namespace = who.Namespace
		if req.Namespace == "" {
			req.Namespace = api.DefaultNamespace
		}
	}
	if err := api.ValidNamespace(req.Namespace); err != nil {
		return api.Intent{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	if !who.Allows(req.Namespace) {
		return api.Intent{}, api.Errorf(api.CodeForbidden, "this token is for namespace %q and cannot place into %q", who.Namespace, req.Namespace)
	}
	src, rt, err := a.checkPortable(who, req)
	if err != nil {
		return api.Intent{}, err
	}
	if err := checkOptions(who, &req, src); err != nil {
		return api.Intent{}, err
	}
	if err := a.checkProjector(who, &req, rt); err != nil {
		return api.Intent{}, err
	}
	if _, err := a.memoryCheck(who, req); err != nil {
		return api.Intent{}, err
	}
	req.Source, req.Runtime = src.String(), rt
	// The engine's arguments change the size where this host runs the runtime; elsewhere the
	// defaults stand (the host that places it sizes it again at admission).
	run := sizing.Run{}
	if d, ok := a.drivers[rt]; ok {
		if run, err = runOf(d, req.Args); err != nil {
			return api.Intent{}, asAPIError(err, api.CodeBadRequest)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, a.cfg.SizingTimeout)
	defer cancel()
	est, err := a.cfg.Sizer.EstimateRun(sctx, src, req.Context, run)
	if err == nil && req.MMProj != "" {
		est, err = a.withProjector(sctx, est, req.MMProj)
	}
	if err != nil && req.MemoryCheck != api.MemoryCheckWarn {
		return api.Intent{}, asAPIError(err, api.CodeMemoryCheckFailed)
	}
	return api.Intent{PlacementRequest: req, Need: est.Bytes, Device: est.Device}, nil
}

// RecordFailure keeps a refusal of req as a failed placement record, with failures (how many
// times in a row it failed here) as its Restarts: the keeper's attempts to meet an intent are
// then visible to every agent, which back off from this host by the count (agent/keeper).
func (a *Agent) RecordFailure(req api.PlacementRequest, e *api.Error, failures int) api.Placement {
	now := time.Now().UTC()
	pl := &placement{
		p: api.Placement{ID: newID(), Host: a.Name(), Model: req.Name, Source: req.Source, Runtime: req.Runtime,
			Namespace: req.Namespace, Context: req.Context, Priority: req.Priority, TTL: req.TTL,
			Restarts: failures, CreatedAt: now},
		deleted: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
	}
	pl.ctx, pl.cancel = context.WithCancel(context.Background())
	a.mu.Lock()
	a.placements[pl.p.ID] = pl
	a.failLocked(pl, e.Code, e.Message)
	v := a.viewLocked(pl)
	a.mu.Unlock()
	a.saveOrLog()
	return v
}

// WriteJSON and DecodeJSON answer and read JSON as the API's own routes do, for the routes other
// packages mount on it (agent/keeper's /v1/intents).
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// DecodeJSON: see WriteJSON.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any) error { return decode(w, r, v) }
