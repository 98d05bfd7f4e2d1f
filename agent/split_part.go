package agent

import (
	"context"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
)

// A member's side of a split: its part is an ordinary placement (admitted, reserved, restored
// and deleted like any other) whose engine is an rpc-server, asked for by the main's agent.

// validatePart checks a part request: only an agent of the mesh (asserting the admin) asks for
// one, into a namespace this host serves, on a host with an rpc-server of the main's protocol.
func (a *Agent) validatePart(who api.Principal, req api.PlacementRequest) (checked, error) {
	if !who.Admin {
		return checked{}, api.Errorf(api.CodeForbidden, "a split's part is placed by the main host's agent only")
	}
	if err := a.checkNamespace(who, &req); err != nil {
		return checked{}, err
	}
	d, ok := a.drivers[api.RuntimeRPCServer]
	if !ok {
		return checked{}, api.Errorf(api.CodeEngineUnavailable, "host %s runs no rpc-server (ggml-rpc-server)", a.Name())
	}
	a.mu.RLock()
	e := a.engines[api.RuntimeRPCServer]
	a.mu.RUnlock()
	if !e.Present {
		return checked{}, api.Errorf(api.CodeEngineUnavailable, "host %s has no rpc-server: %s", a.Name(), e.Detail)
	}
	m := req.Part.Member
	if m.Need <= 0 || m.Layers <= 0 || req.Part.Parent == "" || req.Part.Main == "" {
		return checked{}, api.Errorf(api.CodeBadRequest, "a part needs its parent, its main host, its layers and what it holds")
	}
	if req.Priority == "" {
		req.Priority = api.PriorityNormal
	}
	if req.Priority.Level() < 0 {
		return checked{}, api.Errorf(api.CodeBadRequest, "unknown priority %q", req.Priority)
	}
	if err := validName(req.Name); err != nil {
		return checked{}, api.Errorf(api.CodeBadRequest, "name %q: %v", req.Name, err)
	}
	src, _ := source.Parse(req.Source) // shown only: the main reads the file
	req.TTL = "-1"                     // a part serves no requests of its own to keep it awake
	return checked{req: req, src: src, runtime: api.RuntimeRPCServer, driver: d}, nil
}

// partGrace is how long a part may go without its main placement in the view before it is
// dropped: the main gossips its placement after it asked for the part.
const partGrace = 30 * time.Second

// reapParts drops the parts whose split is gone: the main host dead or left, or alive with no
// split placement that still uses the part (this host's own, when it is the main; a split
// re-planned without this host while it was down). Nothing is left running for a split nobody
// runs.
func (a *Agent) reapParts() {
	if a.view == nil {
		return
	}
	self := a.Name()
	a.mu.RLock()
	var parts []api.Placement
	own := map[string]api.Placement{} // the splits this host is the main of
	for _, pl := range a.placements {
		if pl.p.Split != nil {
			own[pl.p.ID] = pl.p
		}
		if pl.p.Part != nil && pl.p.State != api.StateStopping {
			parts = append(parts, pl.p)
		}
	}
	a.mu.RUnlock()
	if len(parts) == 0 {
		return
	}
	view := a.view()
	for _, p := range parts {
		var why string
		if p.Part.Main == self {
			if q, ok := own[p.Part.Parent]; (!ok || !uses(q, p.ID)) && time.Since(p.CreatedAt) > partGrace {
				why = "its split " + p.Part.Parent + " on this host no longer uses it"
			}
		} else {
			why = orphaned(view, p)
		}
		if why == "" {
			continue
		}
		a.log.Warn("dropping a split's part", "placement", p.ID, "main", p.Part.Main, "why", why)
		a.hub.Publish(api.Event{Type: api.EventPlacement, Message: "split part dropped: " + why, Placement: &p})
		a.Delete(api.Principal{Admin: true}, p.ID, 0)
	}
}

// orphaned says why part p, whose main is another host, has no split any more, or "".
func orphaned(view api.MeshView, p api.Placement) string {
	for _, m := range view.Members {
		if m.Name != p.Part.Main {
			continue
		}
		switch {
		case m.Liveness == api.Dead || m.Liveness == api.Left:
			return "its main host " + m.Name + " is " + string(m.Liveness)
		case m.Liveness != api.Alive || m.Host == nil || time.Since(p.CreatedAt) < partGrace:
			return ""
		}
		for _, q := range m.Placements {
			if q.ID == p.Part.Parent && uses(q, p.ID) {
				return ""
			}
		}
		return "its split " + p.Part.Parent + " on " + m.Name + " no longer uses it"
	}
	if time.Since(p.CreatedAt) < partGrace {
		return ""
	}
	return "its main host " + p.Part.Main + " is not in the mesh"
}

// uses says whether split placement q runs on part id: a split still admitting its parts (no
// plan shown yet) is given the benefit of the doubt.
func uses(q api.Placement, id string) bool {
	if q.State.Terminal() {
		return false
	}
	if q.Split == nil {
		return true
	}
	for _, m := range q.Split.Members {
		if m.Part == id {
			return true
		}
	}
	return false
}

// housekeepParts runs reapParts every interval until ctx ends.
func (a *Agent) housekeepParts(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.reapParts()
		}
	}
}
