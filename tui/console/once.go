package console

import (
	"context"
	"errors"
	"slices"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
)

// Same reports whether placement p is what req asks for: the same source in the same
// namespace, and the same name, runtime, context, priority, protection, digest and engine
// arguments where the request says them, and the same projector; a failed or evicted
// placement is not.
func Same(p api.Placement, req api.PlacementRequest) bool {
	ns := req.Namespace
	if ns == "" {
		ns = api.DefaultNamespace
	}
	ctxSize := req.Context
	if ctxSize == 0 {
		ctxSize = api.DefaultContext
	}
	prio := req.Priority
	if prio == "" {
		prio = api.PriorityNormal
	}
	switch {
	case p.State.Terminal(), p.Namespace != ns, p.Source != req.Source:
		return false
	case req.Name != "" && p.Model != req.Name, req.Runtime != "" && p.Runtime != req.Runtime:
		return false
	case p.Context != ctxSize, p.Priority != prio, p.Protected != req.Protected:
		return false
	case req.SHA256 != "" && p.SHA256 != req.SHA256, !slices.Equal(p.Args, req.Args):
		return false
	case p.MMProj != canonicalSource(req.MMProj):
		return false
	}
	return true
}

// canonicalSource is s as the agent records it ("/m/p.gguf" is "file:///m/p.gguf"), or s when
// it does not parse (the agent will refuse it).
func canonicalSource(s string) string {
	if src, err := source.Parse(s); err == nil {
		return src.String()
	}
	return s
}

// existing is a placement of ps that req describes, on host ("" any).
func existing(ps []api.Placement, req api.PlacementRequest, host string) (api.Placement, bool) {
	for _, p := range ps {
		if (host == "" || p.Host == host) && Same(p, req) {
			return p, true
		}
	}
	return api.Placement{}, false
}

// Existing is a placement of the mesh (as this token sees it) that req describes, on host
// ("" any host), as its owner has it now. The view lags the owner by a gossip round: a
// placement deleted a moment ago may still be in it, and the owner has the last word.
func (c *Conn) Existing(ctx context.Context, req api.PlacementRequest, host string) (api.Placement, bool) {
	if p, ok := c.seen(req, host); ok {
		return c.confirm(ctx, p)
	}
	return api.Placement{}, false
}

// seen is the view's placement that req describes, on host ("" any host).
func (c *Conn) seen(req api.PlacementRequest, host string) (api.Placement, bool) {
	v, err := c.ScopedView()
	if err != nil {
		return api.Placement{}, false
	}
	return existing(Placements(v), req, host)
}

// PlaceOnce places req on host ("" the best host of the ranking) unless the mesh already runs
// exactly that placement, there or (with no host named) anywhere: then that one is the
// answer and existed is true, so placing twice is placing once (a script may run
// `place --auto --wait` again). An agent that refuses with Conflict is asked for its
// placements, in case the view was a gossip round behind.
func (c *Conn) PlaceOnce(ctx context.Context, host string, req api.PlacementRequest) (p api.Placement, existed bool, err error) {
	if p, ok := c.Existing(ctx, req, host); ok {
		return p, true, nil
	}
	p, err = c.Place(ctx, host, req)
	var ae *api.Error
	if err == nil || host == "" || !errors.As(err, &ae) || ae.Code != api.CodeConflict {
		return p, false, err
	}
	cl, cerr := c.Client(host)
	if cerr != nil {
		return p, false, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	ps, lerr := cl.Placements(cctx)
	if lerr != nil {
		return p, false, err
	}
	if found, ok := existing(ps, req, host); ok {
		return found, true, nil
	}
	return p, false, err
}

// confirm asks p's owner whether p still exists as the view has it. Only a definite answer that
// it is gone (NotFound, or ended) says no; an owner that cannot be asked leaves the view's word.
func (c *Conn) confirm(ctx context.Context, p api.Placement) (api.Placement, bool) {
	cl, err := c.Client(p.Host)
	if err != nil {
		return p, true
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	cur, err := cl.Placement(cctx, p.ID)
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeNotFound:
		return p, false
	case err != nil:
		return p, true
	case cur.State.Terminal():
		return cur, false
	}
	return cur, true
}
