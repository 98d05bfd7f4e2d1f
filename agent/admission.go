package agent

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// verdict is an admission's outcome.
type verdict struct {
	estimate api.SizeEstimate
	reason   string // "fits: needs 1.9 GiB, 5.2 GiB free of 10.7 GiB"
	note     string // kept on the placement (why it was admitted despite a check)
	warned   bool   // admitted only because the memory check is "warn"
	victims  []*placement
	swap     *placement // the model a one-model device runs now, replaced by this one
}

// passThrough are the sizing error codes that say the request itself is wrong, not that the
// size is unknown; "warn" cannot override them.
var passThrough = []api.Code{api.CodeInvalidSource, api.CodeNotFound, api.CodeRuntimeMismatch,
	api.CodeAcceleratorMissing, api.CodeBadRequest, api.CodeEngineUnavailable, api.CodeContextLimit}

// admitLocked decides whether pl fits, given its estimate (or the sizing error). The caller
// holds a.mu for the whole decision *and* the state change that follows it, so two requests
// racing for the last gigabyte are decided one after the other and cannot both win.
// mayEvict allows choosing victims when Config.Evict is on.
func (a *Agent) admitLocked(pl *placement, est api.SizeEstimate, serr error, warn, mayEvict bool) (verdict, *api.Error) {
	if pl.ctx != nil && pl.ctx.Err() != nil {
		return verdict{}, api.Errorf(api.CodeNotFound, "placement %s was deleted while it was being sized", pl.p.ID)
	}
	var v verdict
	if serr != nil {
		e := asAPIError(serr, api.CodeMemoryCheckFailed)
		if slices.Contains(passThrough, e.Code) {
			return verdict{}, e
		}
		if !warn {
			return verdict{}, &api.Error{Code: api.CodeMemoryCheckFailed,
				Message: "the model's size cannot be known before pulling it, so it is refused: " + e.Message,
				Fix:     "fix the cause, or load it anyway with memory_check \"warn\" (admin) or --memory-check-mode warn"}
		}
		est = api.SizeEstimate{Method: api.SizeUnknown, Detail: e.Message}
		v.warned = true
		v.note = "admitted without a size (memory check warn): " + e.Message
	} else if est.Bytes <= 0 {
		if !warn {
			return verdict{}, &api.Error{Code: api.CodeMemoryCheckFailed,
				Message: fmt.Sprintf("the sizer could not tell the model's size (method %q)", est.Method),
				Fix:     "load it anyway with memory_check \"warn\" (admin) or --memory-check-mode warn"}
		}
		v.warned = true
		v.note = "admitted without a size (memory check warn)"
	}
	if est.Device == "" {
		est.Device = api.DeviceHost
		if pl.p.Runtime == api.RuntimeHailoOllama {
			est.Device = api.DeviceHailo
		}
	}
	v.estimate = est
	if est.Device == api.DeviceHailo {
		return a.admitHailoLocked(pl, v)
	}
	return a.admitHostLocked(pl, v, warn, mayEvict)
}

// admitHailoLocked accounts a model for a Hailo-10H: its own memory, one model at a time.
// Placing a second model is a swap unless the current one may not be replaced.
func (a *Agent) admitHailoLocked(pl *placement, v verdict) (verdict, *api.Error) {
	need := v.estimate.Bytes
	if a.hailoMem == 0 {
		return verdict{}, api.Errorf(api.CodeAcceleratorMissing, "this model runs on a Hailo-10H and host %s has none", a.identity.NodeName)
	}
	if need > a.hailoMem {
		return verdict{}, api.Errorf(api.CodeInsufficientMemory, "the model needs %s and the Hailo-10H has %s of its own", api.FormatBytes(need), api.FormatBytes(a.hailoMem))
	}
	var cur *placement
	for _, o := range a.placements {
		// A model already being replaced is not the one to replace: its replacer, pulling, is.
		if o != pl && o.p.Memory.Device == api.DeviceHailo && holds(o.p.State) != holdNothing && o.p.State != api.StateStopping && !beingReplaced(o) {
			cur = o
		}
	}
	if cur == nil {
		v.reason = fmt.Sprintf("fits: the Hailo-10H is free (needs %s of %s)", api.FormatBytes(need), api.FormatBytes(a.hailoMem))
		return v, nil
	}
	if pl.scope != "" && cur.p.Namespace != pl.scope {
		// Another namespace's model: not this token's to replace, nor to learn the name of.
		return verdict{}, &api.Error{Code: api.CodeInsufficientMemory,
			Message: "the Hailo-10H runs one model at a time and another namespace's model is loaded on it",
			Fix:     "place it on another host with a Hailo-10H, or ask the mesh's operator"}
	}
	if cur.p.Protected || cur.p.Priority.Level() > pl.p.Priority.Level() {
		why := "protected"
		if !cur.p.Protected {
			why = "of higher priority (" + string(cur.p.Priority) + ")"
		}
		return verdict{}, &api.Error{Code: api.CodeInsufficientMemory,
			Message: fmt.Sprintf("the Hailo-10H runs one model at a time and its model %s (%s) is %s", cur.p.Model, cur.p.ID, why),
			Fix:     "delete " + cur.p.ID + " (" + cur.p.Model + ") first"}
	}
	v.swap = cur
	v.reason = fmt.Sprintf("swap: replaces %s (%s) on the Hailo-10H", cur.p.Model, cur.p.ID)
	if d, ok := a.drivers[api.RuntimeHailoOllama].(interface{ SwapCost() string }); ok {
		// What the daemon's release makes a swap cost beyond the load (engines/hailo).
		if cost := d.SwapCost(); cost != "" {
			v.reason += "; " + cost
		}
	}
	return v, nil
}

// admitHostLocked accounts a model against the host budget: what is committed and reserved
// already counts, so only the free remainder is available.
func (a *Agent) admitHostLocked(pl *placement, v verdict, warn, mayEvict bool) (verdict, *api.Error) {
	need := v.estimate.Bytes
	mem := a.memoryLocked()
	free := mem.Free()
	if a.budget == 0 && !warn {
		return verdict{}, &api.Error{Code: api.CodeMemoryCheckFailed,
			Message: "this host's memory total is unknown, so no budget can be set",
			Fix:     "start the agent with --memory-budget (e.g. --memory-budget 12GiB)"}
	}
	if need <= free {
		v.reason = fmt.Sprintf("fits: needs %s, %s free of %s", api.FormatBytes(need), api.FormatBytes(free), api.FormatBytes(mem.Budget))
		return v, nil
	}
	short := need - free
	if mayEvict && a.cfg.Evict {
		if victims, freed := pick(a.candidatesLocked(pl, true), short); freed >= short {
			v.victims = victims
			v.reason = fmt.Sprintf("fits after evicting %s: needs %s, %s free of %s", names(victims), api.FormatBytes(need), api.FormatBytes(free+freed), api.FormatBytes(mem.Budget))
			return v, nil
		}
	}
	if warn {
		v.warned = true
		v.reason = fmt.Sprintf("over budget by %s (memory check warn): needs %s, %s free of %s", api.FormatBytes(short), api.FormatBytes(need), api.FormatBytes(free), api.FormatBytes(mem.Budget))
		v.note = v.reason
		return v, nil
	}
	e := &api.Error{Code: api.CodeInsufficientMemory,
		Message: fmt.Sprintf("needs %s, %s free of a %s budget on host %s (committed %s, reserved %s)",
			api.FormatBytes(need), api.FormatBytes(free), api.FormatBytes(mem.Budget), a.identity.NodeName, api.FormatBytes(mem.Committed), api.FormatBytes(mem.Reserved))}
	if need > mem.Budget {
		e.Fix = fmt.Sprintf("the model is larger than this host's whole budget (%s); place it on a larger host", api.FormatBytes(mem.Budget))
		return verdict{}, e
	}
	victims, freed := pick(a.candidatesLocked(pl, false), short)
	switch {
	case freed < short && pl.scope != "":
		e.Fix = "placements this token cannot remove (protected, or of other namespaces) hold the rest of the budget; place it on another host"
	case freed < short:
		e.Fix = "protected placements hold the rest of the budget; place it on another host"
	case a.cfg.Evict:
		e.Fix = fmt.Sprintf("free %s: delete %s (eviction found no idle placement of lower priority to unload)", api.FormatBytes(short), describe(victims))
	default:
		e.Fix = fmt.Sprintf("free %s: delete %s, or run the agent with --evict", api.FormatBytes(short), describe(victims))
	}
	return verdict{}, e
}

// candidatesLocked lists placements that could make room for pl, in the order they should go:
// lowest priority first, then least recently used, then largest. Strict is the eviction rule —
// ready, idle, of lower priority than pl, not protected, and served by a process whose memory
// the budget counts; the loose list (any placement holding host memory but a protected one)
// is what a refusal tells the operator to delete. Either list holds only placements in pl's
// scope: a namespace token evicts, and is told of, its own namespace's placements only.
func (a *Agent) candidatesLocked(pl *placement, strict bool) []*placement {
	var out []*placement
	for _, o := range a.placements {
		if o == pl || o.p.Memory.Device == api.DeviceHailo || o.p.Protected || holds(o.p.State) == holdNothing || o.p.State == api.StateStopping {
			continue
		}
		if pl.scope != "" && o.p.Namespace != pl.scope {
			continue
		}
		if strict {
			if a.viewLocked(o).State != api.StateReady || o.p.Priority.Level() >= pl.p.Priority.Level() {
				continue
			}
			if time.Since(lastUsed(o)) < a.cfg.IdleAfter {
				continue
			}
			// A daemon outside the agent's cgroup (Ollama, hailo-ollama run as their own
			// services) holds memory the cgroup-derived budget does not cover: unloading its
			// model frees nothing the budget counts. Without a cgroup limit the budget is
			// host-wide and it does.
			if o.p.Runtime != api.RuntimeLlamaServer && a.host.Memory.CgroupLimit > 0 {
				continue
			}
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(x, y *placement) int {
		if c := cmp.Compare(x.p.Priority.Level(), y.p.Priority.Level()); c != 0 {
			return c
		}
		if c := lastUsed(x).Compare(lastUsed(y)); c != 0 {
			return c
		}
		return cmp.Compare(heldOf(y.p), heldOf(x.p))
	})
	return out
}

// lastUsed is when a placement last served a request, or became ready if it never did.
func lastUsed(pl *placement) time.Time {
	if !pl.p.LastUsed.IsZero() {
		return pl.p.LastUsed
	}
	if !pl.readyAt.IsZero() {
		return pl.readyAt
	}
	return pl.p.CreatedAt
}

// pick takes candidates in order until they free at least short bytes.
func pick(cands []*placement, short int64) ([]*placement, int64) {
	var out []*placement
	var freed int64
	for _, c := range cands {
		if freed >= short {
			break
		}
		out = append(out, c)
		freed += heldOf(c.p)
	}
	return out, freed
}

func names(ps []*placement) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.p.Model)
	}
	return strings.Join(s, ", ")
}

func describe(ps []*placement) string {
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%s (%s, %s, %s)", p.p.Model, p.p.ID, p.p.Priority, api.FormatBytes(heldOf(p.p))))
	}
	return strings.Join(s, ", ")
}

// evictLocked carries out an admission's evictions: the victims stop counting at once (the new
// placement holds their share), and its lifecycle unloads them before it pulls.
func (a *Agent) evictLocked(pl *placement, v verdict) {
	for _, o := range v.victims {
		o.p.Code = api.CodeInsufficientMemory
		a.evictOneLocked(o, "evicted to make room for "+newcomer(o, pl), "memory")
	}
	if o := v.swap; o != nil {
		// A swap waits for the pull: the model on the device keeps answering until the new one
		// is on disk, and a pull that fails leaves it there (see swapLocked).
		pl.swapOut, o.swapIn = o, pl
		a.publishLocked(api.EventPlacement, o, "to be replaced on the Hailo-10H by "+newcomer(o, pl)+" once it is pulled", "")
	}
	for _, o := range v.victims {
		a.pruneLocked(o.p.Namespace)
	}
	if v.swap != nil {
		a.pruneLocked(v.swap.p.Namespace)
	}
}

// newcomer names pl to o's namespace, which reads o's reason: by name only when it is the
// same namespace (only the admin token evicts across namespaces).
func newcomer(o, pl *placement) string {
	if o.p.Namespace == pl.p.Namespace {
		return fmt.Sprintf("%s (%s, priority %s)", pl.p.Model, pl.p.ID, pl.p.Priority)
	}
	return fmt.Sprintf("another namespace's placement (priority %s)", pl.p.Priority)
}

// evictOneLocked ends o's life: its lifecycle stops, and it holds nothing from now on.
func (a *Agent) evictOneLocked(o *placement, reason, metric string) {
	o.cancel()
	o.p.State = api.StateEvicted
	o.p.Reason = reason
	o.p.Progress = 0
	o.p.Engine = ""
	o.p.UpdatedAt = time.Now().UTC()
	a.metrics.Evicted(metric)
	a.changedLocked()
	a.publishLocked(api.EventPlacement, o, reason, "")
	a.log.Info("placement evicted", "placement", o.p.ID, "model", o.p.Model, "reason", reason)
}

// swapLocked, once pl is pulled, takes the placement it replaces on a one-model device off it:
// evicted, to be unloaded before pl loads. One deleted or gone meanwhile is left alone. It
// returns the placement to unload, if any.
func (a *Agent) swapLocked(pl *placement) *placement {
	o := pl.swapOut
	pl.swapOut = nil
	if o == nil || o.swapIn != pl {
		return nil
	}
	o.swapIn = nil
	if a.placements[o.p.ID] != o || o.p.State.Terminal() || o.p.State == api.StateStopping {
		return nil
	}
	if o.p.Namespace == pl.p.Namespace {
		o.p.ReplacedBy = pl.p.ID
	}
	a.evictOneLocked(o, "replaced by "+newcomer(o, pl)+" on the Hailo-10H, which runs one model at a time", "swap")
	return o
}

// OnReplaced sets f, told (outside the agent's lock) of each placement a swap took off its
// one-model device and of the placement that replaced it: a mesh that keeps intents
// (agent/keeper) stops keeping what the user chose to replace. Called before Run.
func (a *Agent) OnReplaced(f func(old, by api.Placement)) { a.onReplaced = f }

// beingReplaced reports whether o's replacer on its one-model device is still on its way (not
// failed, deleted or stopping).
func beingReplaced(o *placement) bool {
	r := o.swapIn
	return r != nil && !r.p.State.Terminal() && r.p.State != api.StateStopping
}

// unswapLocked forgets a swap pl will not make (its pull failed, it was deleted): the model on
// the device stays, and is the one a later placement would replace.
func unswapLocked(pl *placement) {
	if o := pl.swapOut; o != nil && o.swapIn == pl {
		o.swapIn = nil
	}
	pl.swapOut = nil
}
