package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// detectTimeout bounds one driver's Detect: a daemon that does not answer is reported as such,
// it does not hold up start-up.
const detectTimeout = 5 * time.Second

// detectAll asks every driver what it finds, in parallel, and records changes.
func (a *Agent) detectAll(ctx context.Context) {
	var wg sync.WaitGroup
	for r := range a.drivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.detect(ctx, r)
		}()
	}
	wg.Wait()
}

// detect refreshes one runtime and reports a change of presence or health once.
func (a *Agent) detect(ctx context.Context, r api.Runtime) api.Engine {
	d := a.drivers[r]
	dctx, cancel := context.WithTimeout(ctx, detectTimeout)
	e := d.Detect(dctx)
	cancel()
	if ctx.Err() != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.engines[r]
	}
	e.Runtime = r
	a.mu.Lock()
	old, seen := a.engines[r]
	a.engines[r] = e
	changed := old.Present != e.Present || old.Healthy != e.Healthy || old.Version != e.Version || old.Address != e.Address
	if changed {
		a.changedLocked()
	}
	a.mu.Unlock()
	if !changed && seen && old.Detail != "not detected yet" {
		return e
	}
	switch {
	case e.Present && e.Healthy:
		a.log.Info("runtime present", "runtime", r, "address", e.Address, "version", e.Version, "models", len(e.Models))
	case e.Present:
		a.log.Warn("runtime present but unhealthy", "runtime", r, "address", e.Address, "detail", e.Detail)
	default:
		a.log.Info("runtime absent", "runtime", r, "detail", e.Detail)
	}
	if seen && old.Detail != "not detected yet" {
		msg := fmt.Sprintf("%s: present=%v healthy=%v", r, e.Present, e.Healthy)
		if e.Detail != "" {
			msg += " (" + e.Detail + ")"
		}
		a.hub.Publish(api.Event{Type: api.EventEngine, Message: msg})
	}
	return e
}

// engineFor returns the driver for a runtime the host has, or EngineUnavailable with how to
// get it. An engine reported absent is looked for again first: it may just have been installed.
func (a *Agent) engineFor(ctx context.Context, r api.Runtime) (engines.Driver, error) {
	d, ok := a.drivers[r]
	if !ok {
		return nil, &api.Error{Code: api.CodeEngineUnavailable,
			Message: fmt.Sprintf("runtime %s is not enabled on host %s", r, a.Name()),
			Fix:     "start the agent with --runtimes including " + string(r)}
	}
	a.mu.Lock()
	e := a.engines[r]
	a.mu.Unlock()
	if !e.Present {
		e = a.detect(ctx, r)
	}
	if !e.Present {
		return nil, &api.Error{Code: api.CodeEngineUnavailable,
			Message: fmt.Sprintf("runtime %s is not installed or not running on host %s", r, a.Name()),
			Fix:     e.Detail}
	}
	return d, nil
}
