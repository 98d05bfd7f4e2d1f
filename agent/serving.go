package agent

import (
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
		if !who.Allows(pl.p.Namespace) {
			continue
		}
		if v := a.viewLocked(pl); v.State == api.StateReady && pl.inst != nil {
			out = append(out, Local{Placement: v, Driver: pl.driver, Model: pl.model})
		}
	}
	return out
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
