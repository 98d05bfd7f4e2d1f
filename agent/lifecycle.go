package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/internal/backoff"
)

// progressEvery spaces pull progress events: a live bar, not an event per chunk.
const progressEvery = 250 * time.Millisecond

// startLocked starts a placement's lifecycle goroutine. It ends when the placement is
// deleted or evicted (its context) or the agent stops (Run's context).
func (a *Agent) startLocked(pl *placement) {
	if pl.ctx.Err() != nil {
		return // deleted before it could start
	}
	pl.started = true
	pl.done = make(chan struct{})
	stop := context.AfterFunc(a.runCtx, pl.cancel)
	restored := pl.p.Reason == reasonRestoring
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer close(pl.done)
		defer stop()
		a.lifecycle(pl, restored)
	}()
}

const reasonRestoring = "restoring after restart"

// lifecycle takes a placement from admitted to ready and keeps it there: unload what it
// replaces, pull, load, health-check, supervise, restart with backoff.
func (a *Agent) lifecycle(pl *placement, restored bool) {
	ctx := pl.ctx
	defer func() {
		a.mu.Lock()
		unswapLocked(pl) // a swap not made by now never will be
		a.mu.Unlock()
	}()
	for _, v := range pl.victims {
		a.unloadEvicted(ctx, v)
	}
	// One restored asleep is pulled (its file found) only when a request wakes it.
	if !a.awaitWake(ctx, pl) {
		return
	}
	if !a.pull(ctx, pl) {
		return
	}
	a.mu.Lock()
	old := a.swapLocked(pl)
	var replaced, by api.Placement
	if old != nil {
		replaced, by = a.viewLocked(old), a.viewLocked(pl)
	}
	a.mu.Unlock()
	if old != nil {
		if a.onReplaced != nil {
			// Before the save, which may take a while: until the hook has run, keepers see
			// the replaced model wanted with no replica.
			a.onReplaced(replaced, by)
		}
		a.saveOrLog()
		a.unloadEvicted(ctx, old)
	}
	a.serve(ctx, pl, restored)
}

// unloadEvicted waits for an evicted placement's lifecycle to stop, then unloads its model.
func (a *Agent) unloadEvicted(ctx context.Context, v *placement) {
	a.mu.Lock()
	var done chan struct{}
	if v.started {
		done = v.done
	}
	a.mu.Unlock()
	if done != nil {
		<-done
	}
	uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := v.driver.Unload(uctx, v.model)
	cancel()
	if err != nil && !errors.Is(err, engines.ErrNotFound) && ctx.Err() == nil {
		a.log.Warn("unloading an evicted placement", "placement", v.p.ID, "err", err)
	}
}

// update changes a placement unless its lifecycle was cancelled meanwhile (deleted, evicted,
// agent stopping): a cancelled lifecycle must not overwrite the state its canceller set.
func (a *Agent) update(pl *placement, f func(p *api.Placement)) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if pl.ctx.Err() != nil {
		return false
	}
	f(&pl.p)
	pl.p.UpdatedAt = time.Now().UTC()
	a.changedLocked()
	return true
}

// pull makes the model available locally, reporting progress.
func (a *Agent) pull(ctx context.Context, pl *placement) bool {
	var last int64
	var lastPub time.Time
	var lastMsg string
	err := pl.driver.Pull(ctx, pl.model, func(pr engines.Progress) {
		if pr.Completed < last {
			last = 0 // the download started over
		}
		a.metrics.Pulled(pl.p.Runtime, pr.Completed-last)
		last = pr.Completed
		a.mu.Lock()
		defer a.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		pl.p.PulledBytes, pl.p.TotalBytes = pr.Completed, pr.Total
		if pr.Total > 0 {
			pl.p.Progress = min(1, float64(pr.Completed)/float64(pr.Total))
		}
		if now := time.Now(); now.Sub(lastPub) >= progressEvery || (pr.Total > 0 && pr.Completed >= pr.Total) {
			msg := pr.Status
			if pr.Total > 0 {
				msg = fmt.Sprintf("pulling %.0f%% (%s of %s)", 100*pl.p.Progress, api.FormatBytes(pr.Completed), api.FormatBytes(pr.Total))
			}
			if pr.From != "" {
				msg += " from " + pr.From
			}
			// Engines repeat the last figure through their closing phases (verifying,
			// writing the manifest): one event says it.
			if msg == lastMsg {
				return
			}
			lastPub, lastMsg = now, msg
			pl.p.UpdatedAt = now.UTC()
			a.changedLocked()
			a.publishLocked(api.EventPlacement, pl, msg, "")
		}
	})
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		a.mu.Lock()
		a.failLocked(pl, codeOf(err, api.CodePullFailed), "pull failed: "+err.Error())
		a.mu.Unlock()
		a.log.Warn("pull failed", "placement", pl.p.ID, "model", pl.p.Model, "err", err)
		a.saveOrLog()
		return false
	}
	// A driver that downloads into the store says where the file went; the placement keeps it.
	if lp, ok := pl.driver.(interface {
		LocalPath(engines.Model) (string, error)
	}); ok && pl.model.Path == "" {
		if path, err := lp.LocalPath(pl.model); err == nil {
			a.mu.Lock()
			pl.model.Path = path
			a.mu.Unlock()
		}
	}
	if reason := a.resized(ctx, pl); reason != "" {
		a.mu.Lock()
		a.failLocked(pl, api.CodeMemoryCheckFailed, reason)
		a.mu.Unlock()
		a.log.Warn("downloaded file is not the one sized", "placement", pl.p.ID, "model", pl.p.Model, "reason", reason)
		a.saveOrLog()
		return false
	}
	return true
}

// resized sizes a downloaded GGUF again from the finished file, before it counts: the header
// that was sized came by range requests, the file by another request, and a server can answer
// the two differently. It returns why the file cannot run under what was admitted, or "".
// Only a header estimate is compared: one by the fallback formula is pinned by the file's
// length, which the download enforces.
func (a *Agent) resized(ctx context.Context, pl *placement) string {
	a.mu.Lock()
	path, admitted := pl.model.Path, pl.p.Memory
	a.mu.Unlock()
	if (pl.src.Kind != source.KindHTTPS && pl.src.Kind != source.KindHF) || path == "" || admitted.Method != api.SizeHeader {
		return ""
	}
	local, err := source.Parse(path)
	if err != nil {
		return "the downloaded file cannot be sized again: " + err.Error()
	}
	run, err := runOf(pl.driver, pl.p.Args)
	if err != nil {
		return "the downloaded file cannot be sized again: " + err.Error()
	}
	sctx, cancel := context.WithTimeout(ctx, a.cfg.SizingTimeout)
	est, err := a.cfg.Sizer.EstimateRun(sctx, local, pl.p.Context, run)
	cancel()
	switch {
	case err != nil:
		return "the downloaded file cannot be sized again: " + err.Error()
	case est.Bytes > admitted.Bytes:
		return fmt.Sprintf("the downloaded file is not the file that was sized: it needs %s, %s was admitted (the server answered the header reads and the download differently)",
			api.FormatBytes(est.Bytes), api.FormatBytes(admitted.Bytes))
	}
	return ""
}

// codeOf is the stable code an engine error carries, or def.
func codeOf(err error, def api.Code) api.Code {
	var ee *engines.Error
	if errors.As(err, &ee) && ee.Code != "" {
		return ee.Code
	}
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code != "" {
		return ae.Code
	}
	return def
}

// serve loads the model and supervises it, restarting the engine with backoff when it crashes
// or fails its health check. A first load that fails fails the placement (the reason is
// usually the model itself); once a placement has run — or when it is being restored after
// a restart, when a daemon may simply not be up yet — failures are retried.
func (a *Agent) serve(ctx context.Context, pl *placement, retry bool) {
	restart := backoff.New(a.cfg.RestartBackoff, a.cfg.RestartBackoffMax)
	restarting := false
	for {
		if !a.awaitWake(ctx, pl) {
			return
		}
		if !restarting {
			if !a.update(pl, func(p *api.Placement) {
				p.State, p.Progress = api.StateLoading, 0
				p.PulledBytes, p.TotalBytes = 0, 0
			}) {
				return
			}
			a.publish(pl, "loading on "+string(pl.p.Runtime))
			a.saveOrLog()
		}
		loadStart := time.Now()
		inst, err := pl.driver.Load(ctx, pl.model)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = a.check(ctx, pl)
			if ctx.Err() != nil {
				return
			}
		}
		var failure string
		if err != nil && a.asleepAgain(pl, err) {
			if inst != nil {
				a.unload(pl)
			}
			a.saveOrLog()
			restarting = false
			continue
		}
		if errors.Is(err, errSplitFailed) {
			a.mu.Lock()
			a.failLocked(pl, api.CodeInsufficientMemory, err.Error())
			a.mu.Unlock()
			a.saveOrLog()
			return
		}
		if err != nil {
			if !retry && !restarting {
				a.mu.Lock()
				a.failLocked(pl, codeOf(err, api.CodeEngineError), "load failed: "+err.Error())
				a.mu.Unlock()
				a.log.Warn("load failed", "placement", pl.p.ID, "model", pl.p.Model, "err", err)
				a.saveOrLog()
				if inst != nil {
					a.unload(pl)
				}
				return
			}
			failure = "load failed: " + err.Error()
		} else {
			details := a.describe(ctx, pl)
			readyAt := time.Now()
			ok := a.update(pl, func(p *api.Placement) {
				p.State, p.Reason, p.Code = api.StateReady, "", ""
				p.Progress, p.PulledBytes, p.TotalBytes = 0, 0, 0 // a split's start reports its sending
				p.Engine, p.LogPath = inst.Endpoint(), inst.LogPath()
				p.Details = details
				if s, ok := inst.(interface{ Switched() bool }); ok && s.Switched() {
					a.hailoLoad = readyAt.Sub(loadStart) // a.mu is held: gossiped with the ready state
				}
				// In the same critical section as the state: a client that saw "ready" and
				// asks at once must find the instance serving, not a 503 "not ready (ready)".
				pl.inst, pl.readyAt = inst, readyAt
				a.endWakeLocked(pl, nil)
			})
			if !ok {
				return
			}
			a.measure(pl, inst, true)
			ready := "ready at " + inst.Endpoint()
			if r, ok := inst.(interface{ ServedAs() string }); ok && r.ServedAs() != "" {
				// A known rename across engine releases (engines/hailo): say which name ran.
				ready += " as " + r.ServedAs() + ", the engine's name for " + pl.p.Model
			}
			a.publish(pl, ready)
			a.log.Info("placement ready", "placement", pl.p.ID, "model", pl.p.Model, "engine", inst.Endpoint())
			a.saveOrLog()
			retry = true
			var asleep bool
			failure, asleep = a.supervise(ctx, pl, inst)
			if ctx.Err() != nil {
				return
			}
			if asleep {
				a.unload(pl)
				a.fallAsleep(pl)
				a.saveOrLog()
				restart.Reset()
				restarting = false
				continue
			}
			if time.Since(readyAt) > a.cfg.RestartBackoffMax {
				restart.Reset() // it ran well for a while: start the backoff over
			}
		}
		// Withdraw first, then restart: the gateway stops routing before the engine goes.
		restarting = true
		if !a.update(pl, func(p *api.Placement) {
			p.State, p.Reason, p.Engine = api.StateRestarting, failure, ""
			p.Restarts++
			forgetMeasuredLocked(pl)
		}) {
			return
		}
		a.mu.Lock()
		pl.inst = nil
		a.mu.Unlock()
		a.metrics.EngineRestarted(pl.p.Runtime)
		wait := restart.Next()
		a.log.Warn("engine failed; restarting", "placement", pl.p.ID, "model", pl.p.Model, "reason", failure, "backoff", wait)
		// The engine event carries the placement, so only its namespace (and the admin) sees it.
		a.mu.Lock()
		a.publishLocked(api.EventEngine, pl, fmt.Sprintf("%s for %s: %s; restarting in %s", pl.p.Runtime, pl.p.Model, failure, wait), api.CodeEngineError)
		a.publishLocked(api.EventPlacement, pl, "restarting: "+failure, "")
		a.mu.Unlock()
		a.saveOrLog()
		a.unload(pl)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// supervise watches a ready instance until it fails (returning why), ctx ends (""), or it
// has been idle for its TTL (asleep: the placement sleeps, and the caller unloads it).
func (a *Agent) supervise(ctx context.Context, pl *placement, inst engines.Instance) (failure string, asleep bool) {
	tick := time.NewTicker(a.cfg.HealthInterval)
	defer tick.Stop()
	idle := newIdleWatch()
	defer idle.t.Stop()
	if a.dozeOff(pl, idle) {
		return "", true
	}
	for {
		select {
		case <-ctx.Done():
			return "", false
		case <-inst.Done():
			if err := inst.Err(); err != nil {
				return "engine exited: " + err.Error(), false
			}
			return "engine exited", false
		case <-pl.kick:
			if a.dozeOff(pl, idle) {
				return "", true
			}
		case <-idle.t.C:
			if a.dozeOff(pl, idle) {
				return "", true
			}
		case <-tick.C:
			if err := a.check(ctx, pl); err != nil {
				if ctx.Err() != nil {
					return "", false
				}
				return "health check failed: " + err.Error(), false
			}
			a.measure(pl, inst, false)
		}
	}
}

// asleepAgain puts a placement whose wake failed to load back to sleep, telling its waiting
// requests why; false when pl was not waking (the failure is handled as any load failure).
func (a *Agent) asleepAgain(pl *placement, err error) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if pl.waking == nil || pl.ctx.Err() != nil {
		return false
	}
	why := err.Error()
	var ee *engines.Error
	if errors.As(err, &ee) && ee.Err != nil {
		why = ee.Err.Error() // the code goes on e, not twice in its message
	}
	e := &api.Error{Code: codeOf(err, api.CodeEngineError), Message: fmt.Sprintf("%s: %s", errWakeFailed, why)}
	a.log.Warn("waking failed", "placement", pl.p.ID, "model", pl.p.Model, "err", err)
	a.sleepLocked(pl, "waking failed: "+err.Error())
	a.endWakeLocked(pl, e)
	return true
}

// check runs one health check with a deadline and records when it last passed.
func (a *Agent) check(ctx context.Context, pl *placement) error {
	hctx, cancel := context.WithTimeout(ctx, a.cfg.HealthTimeout)
	defer cancel()
	start := time.Now()
	err := pl.driver.Health(hctx, pl.model)
	a.metrics.HealthChecked(pl.p.Runtime, time.Since(start), err)
	if err == nil {
		a.mu.Lock()
		pl.healthyAt = time.Now()
		a.mu.Unlock()
	}
	return err
}

// describe asks the driver what the loaded model is (family, size, quantisation), for the
// gateway's Ollama listings; nil when the driver cannot say. It never fails the placement.
func (a *Agent) describe(ctx context.Context, pl *placement) *api.ModelDetails {
	d, ok := pl.driver.(engines.Describer)
	if !ok {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, a.cfg.HealthTimeout)
	defer cancel()
	md, err := d.Describe(dctx, pl.model)
	if err != nil {
		a.log.Debug("model details unknown", "placement", pl.p.ID, "model", pl.p.Model, "err", err)
		return nil
	}
	return &md
}

// unload stops the engine serving pl, best effort (the engine may be gone already).
func (a *Agent) unload(pl *placement) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pl.driver.Unload(ctx, pl.model); err != nil && !errors.Is(err, engines.ErrNotFound) {
		a.log.Debug("unload", "placement", pl.p.ID, "err", err)
	}
}

// publish sends a placement event with its current view.
func (a *Agent) publish(pl *placement, msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.publishLocked(api.EventPlacement, pl, msg, "")
}
