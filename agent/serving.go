package agent

import (
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// Local is a placement this agent serves, as the gateway needs it.
type Local struct {
	Placement api.Placement
	Driver    engines.Driver
	Model     engines.Model
}

// ServingAll lists the ready placements who may use, oldest first.
func (a *Agent) ServingAll(who api.Principal) []Local {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []Local
	for _, pl := range a.sortedLocked() {
		if !who.Allows(pl.p.Namespace) || pl.p.Part != nil {
			continue
		}
		if v := a.viewLocked(pl); v.State == api.StateReady && pl.inst != nil {
			out = append(out, Local{Placement: v, Driver: pl.driver, Model: pl.model})
		}
	}
	return out
}

// Serving is ServingAll narrowed to the placements of model, without a copy of the others:
// the gateway asks it on every chat, and a Local is 700 bytes.
func (a *Agent) Serving(who api.Principal, model string) []Local {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []Local
	for _, pl := range a.placements {
		if pl.p.Model != model || !who.Allows(pl.p.Namespace) || pl.p.Part != nil {
			continue
		}
		if v := a.viewLocked(pl); v.State == api.StateReady && pl.inst != nil {
			out = append(out, Local{Placement: v, Driver: pl.driver, Model: pl.model})
		}
	}
	slices.SortFunc(out, func(x, y Local) int { return oldestFirst(&x.Placement, &y.Placement) })
	return out
}

// Names reports whether who may see a placement, in any state, named one of models: a look at
// the names alone, where List copies every placement.
func (a *Agent) Names(who api.Principal, models ...string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, pl := range a.placements {
		if who.Allows(pl.p.Namespace) && slices.Contains(models, pl.p.Model) {
			return true
		}
	}
	return false
}

// oldestFirst is the order placements are listed in: by creation, then id.
func oldestFirst(x, y *api.Placement) int {
	if c := x.CreatedAt.Compare(y.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(x.ID, y.ID)
}

// speedWeight is the weight of the newest measurement in the rolling averages.
const speedWeight = 0.3

// RecordSpeed folds one request's time to first token and generation speed into the
// placement's rolling figures (zero values are skipped) and announces the change.
func (a *Agent) RecordSpeed(id string, ttft time.Duration, tokensPerSec float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pl, ok := a.placements[id]
	if !ok {
		return
	}
	roll := func(old, x float64) float64 {
		if old == 0 {
			return x
		}
		return (1-speedWeight)*old + speedWeight*x
	}
	if ttft > 0 {
		pl.p.TTFTMillis = roll(pl.p.TTFTMillis, float64(ttft)/float64(time.Millisecond))
	}
	if tokensPerSec > 0 {
		pl.p.TokensPerS = roll(pl.p.TokensPerS, tokensPerSec)
	}
	pl.p.LastUsed = time.Now().UTC()
	a.changedLocked()
}

// Dormant lists who's placements of model that sleep or are waking, oldest first: a request
// for one wakes it (Acquire) and waits, where one for a model merely loading is told to retry.
func (a *Agent) Dormant(who api.Principal, model string) []Local {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []Local
	for _, pl := range a.placements {
		if pl.p.Model != model || !who.Allows(pl.p.Namespace) || (!Dormant(pl.p) && pl.dozing == "") {
			continue
		}
		out = append(out, Local{Placement: pl.p, Driver: pl.driver, Model: pl.model})
	}
	slices.SortFunc(out, func(x, y Local) int { return oldestFirst(&x.Placement, &y.Placement) })
	return out
}

// Dormant reports whether a placement sleeps or is waking for a request: a request for it goes
// to its owner, which wakes it, rather than being told the model is not ready.
func Dormant(p api.Placement) bool {
	return p.State == api.StateSleeping || (p.State == api.StateLoading && p.Reason == reasonWaking)
}

// ServingID is the local placement id as the gateway needs it, when it is ready: a woken
// placement is served as it loaded (its engine, its file's path).
func (a *Agent) ServingID(id string) (Local, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	pl, ok := a.placements[id]
	if !ok || pl.inst == nil {
		return Local{}, false
	}
	v := a.viewLocked(pl)
	if v.State != api.StateReady {
		return Local{}, false
	}
	return Local{Placement: v, Driver: pl.driver, Model: pl.model}, true
}
