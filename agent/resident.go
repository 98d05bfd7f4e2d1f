package agent

import (
	"math"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// measureSlack is what an engine may still grow by beyond its state at load and its bounded
// prompt cache (allocator growth, per-request buffers): 64 MiB, plus an eighth of what it held
// at load. Measured on llama-server: 7 MiB over 16 long prompts with the prompt cache off.
const measureSlack = 64 << 20

// heldOf is what a placement counts against the budget: its measured hold, or its estimate.
func heldOf(p api.Placement) int64 {
	if p.Held > 0 {
		return p.Held
	}
	return p.Memory.Bytes
}

// held corrects an estimate with measurements of the engine's process. The estimate is a
// ceiling computed before a byte is pulled (weights + KV + compute + prompt cache + 512 MiB
// overhead) and is often far above what the engine holds (a tiny model: 663 MiB estimated,
// 29 MiB real). Once loaded, the engine has allocated its KV cache and compute buffers, so:
//
//	base = max(RSS at load, own memory at load + weights)
//	held = max(RSS now, min(estimate, base + prompt cache + slack))
//
// The weights count in full in base because under use every page of the mapped file is
// resident, even when the page cache had dropped some at rest; the prompt cache and the slack
// are what can still grow; and what the process is seen to hold now always counts, however far
// past the estimate. A model admitted without a size (memory check warn) has no ceiling but its
// measurements.
func held(est api.SizeEstimate, atLoad, now engines.Resident) int64 {
	ceiling := est.Bytes
	if ceiling <= 0 {
		ceiling = math.MaxInt64
	}
	base := max(atLoad.RSS, atLoad.Anon+est.Weights)
	grown := base + est.Cache + measureSlack + base/8
	return max(now.RSS, min(ceiling, grown))
}

// measure reads the resident memory of pl's engine, when its driver owns the process
// (engines.Measurer), and corrects what pl holds of the budget. atLoad marks the first reading
// after a (re)start, the base of the correction. A change of the hold is published; the
// reading alone is not (it moves at every health check).
func (a *Agent) measure(pl *placement, inst engines.Instance, atLoad bool) {
	m, ok := inst.(engines.Measurer)
	if !ok {
		return
	}
	r, err := m.Resident()
	if err != nil {
		a.log.Debug("resident memory not measured", "placement", pl.p.ID, "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if pl.ctx.Err() != nil {
		return
	}
	if atLoad || pl.measuredAt.IsZero() {
		pl.atLoad, pl.measuredAt = r, time.Now()
	}
	pl.p.Resident = r.RSS
	h := held(pl.p.Memory, pl.atLoad, r)
	if h != pl.p.Held {
		if pl.p.Held == 0 {
			a.log.Info("engine memory measured", "placement", pl.p.ID, "model", pl.p.Model, "estimate", api.FormatBytes(pl.p.Memory.Bytes),
				"resident", api.FormatBytes(r.RSS), "holds", api.FormatBytes(h))
		}
		pl.p.Held = h
		a.changedLocked()
	}
}

// forgetMeasuredLocked drops the measurements when the engine goes (restart, failure): until
// the next one is measured, the estimate holds.
func forgetMeasuredLocked(pl *placement) {
	pl.p.Resident, pl.p.Held = 0, 0
	pl.atLoad, pl.measuredAt = engines.Resident{}, time.Time{}
}
