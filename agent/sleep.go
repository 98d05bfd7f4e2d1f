package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// Sleep when idle: a ready placement with no request in flight and none finished within its
// TTL unloads its engine and frees its budget (state sleeping, holding nothing); its record and
// files stay. The next request wakes it: Acquire admits it again against the budget and the
// lifecycle goroutine, waiting in awaitWake, loads it.

// reasonWaking is the reason of a placement loading again for a request; the mesh routes
// requests for it to its owner, as for a sleeping one.
const reasonWaking = "waking for a request"

// wakeup is one wake of a sleeping placement: ready is closed when it is over, err says why it
// failed (nil: the placement is ready).
type wakeup struct {
	ready chan struct{}
	err   error
}

// ttlLocked is how long pl may stay idle before it sleeps; never is set when it never sleeps.
func (a *Agent) ttlLocked(pl *placement) (ttl time.Duration, never bool) {
	if pl.p.TTL == "" {
		return a.cfg.IdleTTL, a.cfg.IdleTTL <= 0
	}
	d, err := api.ParseTTL(pl.p.TTL)
	if err != nil || d < 0 {
		return 0, true // a saved TTL that no longer parses keeps the model loaded: the safe side
	}
	return d, false
}

// idleLeftLocked is how long pl has left before it sleeps; ok is false when it is not counting
// down (never sleeps, or a request is in flight: its end counts again).
func (a *Agent) idleLeftLocked(pl *placement) (left time.Duration, ok bool) {
	ttl, never := a.ttlLocked(pl)
	if never || pl.inflight > 0 {
		return 0, false
	}
	since := pl.readyAt
	if pl.lastDone.After(since) {
		since = pl.lastDone
	}
	return ttl - time.Since(since), true
}

// kick tells a supervising lifecycle that the idle countdown changed (a request ended, the TTL
// was set).
func kick(pl *placement) {
	select {
	case pl.kick <- struct{}{}:
	default:
	}
}

// idleWatch is supervise's idle countdown: its channel fires when the placement may have gone
// idle for its TTL.
type idleWatch struct{ t *time.Timer }

func newIdleWatch() idleWatch {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return idleWatch{t}
}

// dozeOff starts putting pl to sleep when it has been idle for its TTL, or re-arms the
// countdown. It reports whether pl is dozing off: no longer served, its engine for the caller
// to unload before fallAsleep frees its budget (so no placement is admitted into memory the
// engine still holds). A request meanwhile asks for a wake, made once it sleeps.
func (a *Agent) dozeOff(pl *placement, w idleWatch) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	left, ok := a.idleLeftLocked(pl)
	if !ok || pl.ctx.Err() != nil {
		w.t.Stop()
		return false
	}
	if left > 0 {
		w.t.Reset(left)
		return false
	}
	ttl, _ := a.ttlLocked(pl)
	why := fmt.Sprintf("idle for %s", ttl)
	if ttl == 0 {
		why = "unloaded as asked (keep_alive 0)"
	}
	pl.dozing, pl.inst = why, nil
	return true
}

// fallAsleep ends a doze once the engine let go: pl sleeps, its budget freed, and a request
// that came meanwhile wakes it at once.
func (a *Agent) fallAsleep(pl *placement) {
	a.mu.Lock()
	defer a.mu.Unlock()
	why := pl.dozing
	pl.dozing = ""
	if pl.ctx.Err() != nil {
		return // deleted meanwhile: stopping, not sleeping
	}
	a.sleepLocked(pl, why)
	if pl.waking != nil {
		if err := a.wakeLocked(pl); err != nil {
			a.endWakeLocked(pl, err)
		}
	}
}

// sleepLocked moves pl to sleeping.
func (a *Agent) sleepLocked(pl *placement, reason string) {
	pl.p.State, pl.p.Reason, pl.p.Engine = api.StateSleeping, api.Clip(reason, maxReason), ""
	pl.p.Progress = 0
	pl.inst = nil
	forgetMeasuredLocked(pl)
	pl.p.UpdatedAt = time.Now().UTC()
	a.changedLocked()
	a.publishLocked(api.EventPlacement, pl, "sleeping: "+pl.p.Reason, "")
	a.log.Info("placement sleeping", "placement", pl.p.ID, "model", pl.p.Model, "reason", pl.p.Reason)
}

// endWakeLocked ends a wake in progress, if any: err nil means ready.
func (a *Agent) endWakeLocked(pl *placement, err error) {
	if w := pl.waking; w != nil {
		w.err = err
		close(w.ready)
		pl.waking = nil
	}
}

// awaitWake waits, while pl sleeps, for a request to wake it; false when its lifecycle ends.
func (a *Agent) awaitWake(ctx context.Context, pl *placement) bool {
	a.mu.Lock()
	asleep := pl.p.State == api.StateSleeping
	if !asleep {
		// A wake made while the lifecycle was busy (unloading) left its signal: it is spent.
		select {
		case <-pl.wake:
		default:
		}
	}
	a.mu.Unlock()
	if !asleep {
		return true
	}
	select {
	case <-ctx.Done():
		return false
	case <-pl.wake:
		return true
	}
}

// Acquire counts a request on a local placement until release is called: a placement with a
// request in flight never sleeps, and its TTL counts from the last release. A sleeping
// placement is woken: admitted again against the budget (an *api.Error, InsufficientMemory
// when something else took its memory) and loaded; wait, not nil then, waits until it is
// ready, failed to load, or ctx ends.
func (a *Agent) Acquire(id string) (release func(), wait func(context.Context) error, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pl, ok := a.placements[id]
	if !ok {
		return nil, nil, api.Errorf(api.CodeNotFound, "no placement %q on host %s", id, a.identity.NodeName)
	}
	switch {
	case pl.p.State == api.StateSleeping:
		if err := a.wakeLocked(pl); err != nil {
			return nil, nil, err
		}
	case pl.dozing != "" && pl.waking == nil:
		pl.waking = &wakeup{ready: make(chan struct{})} // woken by fallAsleep
	}
	pl.inflight++
	// Busy or not is gossiped, for an intent to scale on; not each request.
	if pl.inflight > api.BusyInFlight && pl.p.BusySince.IsZero() {
		pl.p.BusySince = time.Now().UTC()
		a.changedLocked()
	}
	release = func() {
		a.mu.Lock()
		pl.inflight--
		if pl.inflight <= api.BusyInFlight && !pl.p.BusySince.IsZero() {
			pl.p.BusySince = time.Time{}
			a.changedLocked()
		}
		pl.lastDone = time.Now()
		pl.p.LastUsed = pl.lastDone.UTC()
		a.mu.Unlock()
		kick(pl)
	}
	if w := pl.waking; w != nil {
		wait = func(ctx context.Context) error {
			select {
			case <-w.ready:
				return w.err
			case <-pl.ctx.Done():
				return api.Errorf(api.CodeNotFound, "placement %s of %s was deleted while it loaded", pl.p.ID, pl.p.Model)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return release, wait, nil
}

// wakeLocked admits a sleeping placement again and hands it to its lifecycle to load.
func (a *Agent) wakeLocked(pl *placement) error {
	if pl.ctx.Err() != nil {
		return api.Errorf(api.CodeNotFound, "placement %s of %s is being deleted", pl.p.ID, pl.p.Model)
	}
	warn := pl.p.MemoryCheck == api.MemoryCheckWarn || a.cfg.MemoryCheckMode == MemoryCheckWarn
	verdict, aerr := a.admitLocked(pl, pl.p.Memory, nil, warn, false)
	if aerr == nil && verdict.swap != nil {
		aerr = api.Errorf(api.CodeInsufficientMemory, "the Hailo-10H runs %s (%s) now", verdict.swap.p.Model, verdict.swap.p.ID)
	}
	if aerr != nil {
		e := *aerr
		e.Message = fmt.Sprintf("%s is sleeping and cannot wake on host %s: %s", pl.p.Model, a.identity.NodeName, aerr.Message)
		a.metrics.Refused(e.Code)
		a.publishLocked(api.EventPlacement, pl, "wake refused: "+e.Message, e.Code)
		return &e
	}
	pl.p.State, pl.p.Reason = api.StateLoading, reasonWaking
	pl.p.UpdatedAt = time.Now().UTC()
	if pl.waking == nil {
		pl.waking = &wakeup{ready: make(chan struct{})}
	}
	a.changedLocked()
	a.publishLocked(api.EventPlacement, pl, "waking: "+verdict.reason, "")
	select {
	case pl.wake <- struct{}{}:
	default:
	}
	return nil
}

// SetTTL sets a local placement's idle TTL from now on (Ollama's keep_alive): negative never
// sleeps, 0 sleeps as soon as no request is in flight.
func (a *Agent) SetTTL(id string, ttl time.Duration) error {
	a.mu.Lock()
	pl, ok := a.placements[id]
	if !ok {
		a.mu.Unlock()
		return api.Errorf(api.CodeNotFound, "no placement %q on host %s", id, a.identity.NodeName)
	}
	s := ttl.String()
	if ttl < 0 {
		s = "-1s"
	}
	changed := pl.p.TTL != s
	pl.p.TTL = s
	if changed {
		pl.p.UpdatedAt = time.Now().UTC()
		a.changedLocked()
	}
	a.mu.Unlock()
	kick(pl)
	if changed {
		a.saveOrLog()
	}
	return nil
}

// checkTTL checks and normalizes a placement request's ttl: 0 would unload a model as soon as
// it loaded, so it is refused (keep_alive 0 in a request unloads one now).
func checkTTL(req *api.PlacementRequest) error {
	if req.TTL == "" {
		return nil
	}
	d, err := api.ParseTTL(req.TTL)
	if err != nil {
		return api.Errorf(api.CodeBadRequest, "%v", err)
	}
	if d == 0 {
		return api.Errorf(api.CodeBadRequest, "ttl 0 would unload the model as soon as it loaded; give a duration, a negative one to never sleep, or none for the agent's --idle-ttl")
	}
	if d < 0 {
		d = -time.Second
	}
	req.TTL = d.String()
	return nil
}

// errWakeFailed wraps a failed wake's load error, so the waiting request says what happened.
var errWakeFailed = errors.New("the model failed to load again")
