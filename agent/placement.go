package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/sizing"
)

// placement is the agent's record of one placement. p and the fields below it are guarded by
// Agent.mu; the lifecycle goroutine owns the engine calls.
type placement struct {
	p      api.Placement
	src    source.Source
	model  engines.Model
	driver engines.Driver

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the lifecycle goroutine has returned
	// started is set once a lifecycle goroutine was started for it.
	started bool

	inst      engines.Instance
	healthyAt time.Time // last passed health check; "ready" expires without a fresh one
	// atLoad is the engine's resident memory measured when it became ready (measuredAt), the
	// base of the correction of its hold (see held).
	atLoad     engines.Resident
	measuredAt time.Time
	readyAt    time.Time
	// victims are placements evicted for this one: the lifecycle unloads them before pulling.
	victims []*placement
	// swapOut is the model this one replaces on a one-model device (a Hailo-10H), taken off
	// only once this one is pulled; swapIn, on that model, points back at its replacer.
	// Both are guarded by Agent.mu.
	swapOut, swapIn *placement
	// deleted is closed when a deletion has finished (the placement left the map).
	deleted chan struct{}
	// scope is the namespace whose placements admitting this one may evict or swap out, and
	// name in its reasons: its own for a namespace token; "" (any) for the admin token and for
	// placements restored after a restart. Not saved: it matters only at admission.
	scope string

	// Sleep when idle (sleep.go): requests in flight, when the last one ended, kick (the idle
	// countdown changed), wake (a request woke it), the wake in progress, and why it is dozing
	// off (its engine being unloaded before it sleeps; "" when not).
	dozing   string
	inflight int
	lastDone time.Time
	kick     chan struct{}
	wake     chan struct{}
	waking   *wakeup
}

// hold is what a state holds of the budget.
type hold int

const (
	holdNothing hold = iota
	holdReserved
	holdCommitted
)

// holds maps a state to its share of the accounting: admitted placements still pulling hold a
// reservation; placements with an engine (loading, ready, restarting, stopping) hold committed
// memory; sizing (not yet admitted) and terminal placements hold nothing.
func holds(s api.PlacementState) hold {
	switch s {
	case api.StatePulling:
		return holdReserved
	case api.StateLoading, api.StateReady, api.StateRestarting, api.StateStopping:
		return holdCommitted
	}
	return holdNothing
}

// viewLocked is the placement as the API shows it. "ready" is only shown while a health check
// has passed recently: a supervision loop that stalls must not leave a placement looking ready.
func (a *Agent) viewLocked(pl *placement) api.Placement {
	v := pl.p
	if v.State == api.StateReady && time.Since(pl.healthyAt) > a.cfg.ReadyTTL {
		v.State = api.StateRestarting
		v.Reason = fmt.Sprintf("no health check has passed for %s", time.Since(pl.healthyAt).Round(time.Second))
	}
	return v
}

func newID() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return "p-" + hex.EncodeToString(b)
}

// checked is a validated request.
type checked struct {
	req     api.PlacementRequest
	src     source.Source
	runtime api.Runtime
	warn    bool // memory check "warn" for this request
	driver  engines.Driver
}

// validate applies every check that needs no sizing, in the order the codes document:
// a request that fails here costs nothing. Each step may fill in a default the next relies on.
func (a *Agent) validate(ctx context.Context, who api.Principal, req api.PlacementRequest) (checked, error) {
	if req.Part != nil {
		return a.validatePart(who, req)
	}
	if err := a.checkNamespace(who, &req); err != nil {
		return checked{}, err
	}
	src, rt, err := a.checkSource(who, req)
	if err != nil {
		return checked{}, err
	}
	if err := checkOptions(who, &req, src); err != nil {
		return checked{}, err
	}
	if err := a.checkProjector(who, &req, rt); err != nil {
		return checked{}, err
	}
	warn, err := a.memoryCheck(who, req)
	if err != nil {
		return checked{}, err
	}
	d, err := a.checkEngine(ctx, rt, req)
	if err != nil {
		return checked{}, err
	}
	return checked{req: req, src: src, runtime: rt, warn: warn, driver: d}, nil
}

// checkNamespace fills in the namespace (the token's, else the default) and refuses one the
// token may not place into or this host does not serve.
func (a *Agent) checkNamespace(who api.Principal, req *api.PlacementRequest) error {
	if req.Namespace == "" {
		req.Namespace = who.Namespace
		if req.Namespace == "" {
			req.Namespace = api.DefaultNamespace
		}
	}
	if err := api.ValidNamespace(req.Namespace); err != nil {
		return api.Errorf(api.CodeBadRequest, "%v", err)
	}
	if !who.Allows(req.Namespace) {
		return api.Errorf(api.CodeForbidden, "this token is for namespace %q and cannot place into %q", who.Namespace, req.Namespace)
	}
	if len(a.cfg.Namespaces) > 0 && !slices.Contains(a.cfg.Namespaces, req.Namespace) {
		e := api.Errorf(api.CodeNamespaceNotAllow, "namespace %q is not allowed on host %s", req.Namespace, a.Name())
		e.Fix = "this host accepts namespaces " + strings.Join(a.cfg.Namespaces, ", ") + " (--namespaces)"
		return e
	}
	return nil
}

// checkSource parses the source and checks that this host may and can run it: a local file
// in its folders (unless the admin asks), TLS unless plain HTTP is allowed, a runtime that runs
// the source, a Hailo-10H for hailo://. It returns the source and the runtime to use.
func (a *Agent) checkSource(who api.Principal, req api.PlacementRequest) (source.Source, api.Runtime, error) {
	src, rt, err := a.checkPortable(who, req)
	if err != nil {
		return src, "", err
	}
	if src.Kind == source.KindHailo && a.hailoMem == 0 {
		return src, "", &api.Error{Code: api.CodeAcceleratorMissing,
			Message: fmt.Sprintf("%s needs a Hailo-10H, and host %s has no Hailo device node (/dev/hailo0)", src.String(), a.Name()),
			Fix:     "place it on a Raspberry Pi 5 with the AI HAT+ 2, or use a GGUF or ollama:// source here"}
	}
	return src, rt, nil
}

// checkPortable is checkSource without what depends on this host's hardware: what an intent,
// which any host may meet, must pass here.
func (a *Agent) checkPortable(who api.Principal, req api.PlacementRequest) (source.Source, api.Runtime, error) {
	src, err := source.Parse(req.Source)
	if err != nil {
		return src, "", asAPIError(err, api.CodeInvalidSource)
	}
	if src.Kind == source.KindFile && !who.Admin {
		if err := a.checkFileSource(src.Path); err != nil {
			return src, "", err
		}
	}
	if src.Insecure && !a.cfg.AllowHTTP {
		if err := src.RequireTLS(); err != nil {
			return src, "", asAPIError(err, api.CodeInvalidSource)
		}
	}
	if err := src.CheckRuntime(req.Runtime); err != nil {
		return src, "", asAPIError(err, api.CodeRuntimeMismatch)
	}
	rt := req.Runtime
	if rt == "" {
		rt = src.Runtime()
	}
	return src, rt, nil
}

// checkOptions fills in and checks what the request asks of the placement: priority, context,
// digest, name, protection.
func checkOptions(who api.Principal, req *api.PlacementRequest, src source.Source) error {
	if req.Priority == "" {
		req.Priority = api.PriorityNormal
	}
	if req.Priority.Level() < 0 {
		return api.Errorf(api.CodeBadRequest, "unknown priority %q; use batch, low, normal, high or critical", req.Priority)
	}
	switch {
	case req.Context < 0 || req.Context > 1<<20:
		return api.Errorf(api.CodeBadRequest, "context %d: want 0 (the default, %d) up to %d tokens", req.Context, api.DefaultContext, 1<<20)
	case req.Context == 0:
		req.Context = api.DefaultContext
	}
	if src.Kind == source.KindHailo && req.Context > api.DefaultContext {
		return api.Errorf(api.CodeContextLimit, "every Hailo zoo model is compiled for a %d-token context; %d was asked", api.DefaultContext, req.Context)
	}
	if req.SHA256 != "" {
		if !src.IsGGUF() || src.Kind == source.KindFile {
			return api.Errorf(api.CodeBadRequest, "sha256 checks a downloaded GGUF file; %s is not downloaded", src.String())
		}
		if !validSHA256(req.SHA256) {
			return api.Errorf(api.CodeBadRequest, "sha256 %q: want 64 hexadecimal digits", req.SHA256)
		}
		req.SHA256 = strings.ToLower(req.SHA256)
	}
	if req.Name == "" {
		req.Name = src.ModelName()
	}
	if err := validName(req.Name); err != nil {
		return api.Errorf(api.CodeBadRequest, "name %q: %v", req.Name, err)
	}
	if err := checkTTL(req); err != nil {
		return err
	}
	if s := req.Split; s != nil && (s.MaxRTTMillis < 0 || s.MaxRTTMillis > api.MaxSplitRTTMillis || math.IsNaN(s.MaxRTTMillis)) {
		return api.Errorf(api.CodeBadRequest, "split max_rtt_ms %v: want 0 (the default, %d ms) up to %d", s.MaxRTTMillis, api.DefaultSplitRTTMillis, api.MaxSplitRTTMillis)
	}
	if req.Protected && !who.Admin {
		// Protection keeps a model from eviction and swaps mesh-wide policy: the operator's call.
		return api.Errorf(api.CodeForbidden, "protected placements need the admin token")
	}
	return nil
}

// memoryCheck is whether the placement loads with a warning when the memory check fails
// (the host's --memory-check, or "warn" asked by the admin).
func (a *Agent) memoryCheck(who api.Principal, req api.PlacementRequest) (warn bool, err error) {
	switch req.MemoryCheck {
	case "":
		return a.cfg.MemoryCheckMode == MemoryCheckWarn, nil
	case api.MemoryCheckWarn:
		// Loading anyway can take the host down for everyone: an operator's decision.
		if !who.Admin {
			return false, api.Errorf(api.CodeForbidden, "memory_check \"warn\" needs the admin token")
		}
		return true, nil
	}
	return false, api.Errorf(api.CodeBadRequest, "memory_check %q: want \"warn\" or nothing", req.MemoryCheck)
}

// checkEngine finds the runtime's driver and lets it check the name and the engine arguments.
func (a *Agent) checkEngine(ctx context.Context, rt api.Runtime, req api.PlacementRequest) (engines.Driver, error) {
	d, err := a.engineFor(ctx, rt)
	if err != nil {
		return nil, err
	}
	if nc, ok := d.(engines.NameChecker); ok {
		if err := nc.CheckName(req.Name); err != nil {
			return nil, api.Errorf(api.CodeBadRequest, "name: %v", err)
		}
	}
	if len(req.Args) > 0 {
		// Engine arguments are an attack surface: only a driver's allowlist lets them through.
		ac, ok := d.(engines.ArgChecker)
		if !ok {
			return nil, api.Errorf(api.CodeBadRequest, "%s takes no engine arguments from a placement", rt)
		}
		if err := ac.CheckArgs(req.Args); err != nil {
			return nil, api.Errorf(api.CodeBadRequest, "args: %v", err)
		}
	}
	return d, nil
}

// checkFileSource refuses a file outside the GGUF folders and the store. Links are resolved
// first, so a link inside a folder cannot point out of it.
func (a *Agent) checkFileSource(path string) error {
	dirs := append([]string{a.cfg.ModelsDir}, a.cfg.GGUFDirs...)
	real := resolved(path)
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if rel, err := filepath.Rel(resolved(d), real); err == nil && filepath.IsLocal(rel) {
			return nil
		}
	}
	e := api.Errorf(api.CodeInvalidSource, "%s is outside the folders this host serves GGUF files from", path)
	e.Fix = "use a file in " + strings.Join(slices.DeleteFunc(dirs, func(d string) bool { return d == "" }), " or ") +
		" (--gguf-dir), or place it with the admin token"
	return e
}

// resolved is path with its links resolved, or cleaned when it does not exist (yet).
func resolved(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return filepath.Clean(path)
}

func validName(s string) error {
	if len(s) > 128 {
		return errors.New("longer than 128 bytes")
	}
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0 {
		return errors.New("has spaces or control characters")
	}
	return nil
}

// asAPIError keeps an *api.Error as it is and wraps anything else under code.
func asAPIError(err error, code api.Code) *api.Error {
	var e *api.Error
	if errors.As(err, &e) {
		return e
	}
	return &api.Error{Code: code, Message: err.Error()}
}

// Place admits a request: it validates it, sizes the model before pulling anything, and
// reserves its memory. The placement comes back in its first admitted state (pulling); the
// rest of its life runs in the background. A refusal is an *api.Error with a stable code.
func (a *Agent) Place(ctx context.Context, who api.Principal, req api.PlacementRequest) (api.Placement, error) {
	c, err := a.validate(ctx, who, req)
	if err != nil {
		return api.Placement{}, a.refuse(req, who, err)
	}
	now := time.Now().UTC()
	pl := &placement{
		p: api.Placement{
			ID: newID(), Model: c.req.Name, Source: c.src.String(), Runtime: c.runtime,
			Namespace: c.req.Namespace, Context: c.req.Context, Priority: c.req.Priority,
			Protected: c.req.Protected, MemoryCheck: c.req.MemoryCheck, SHA256: c.req.SHA256, Args: c.req.Args,
			TTL: c.req.TTL, Part: c.req.Part, MMProj: c.req.MMProj,
			State:     api.StateSizing,
			CreatedAt: now, UpdatedAt: now,
		},
		src:     c.src,
		driver:  c.driver,
		deleted: make(chan struct{}),
		scope:   scopeOf(who, c.req.Namespace),
		kick:    make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
	}
	pl.ctx, pl.cancel = context.WithCancel(context.Background())
	pl.p.Host = a.Name()
	pl.model = a.modelFor(pl)

	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return api.Placement{}, api.Errorf(api.CodeTooBusy, "the agent is shutting down")
	}
	for _, o := range a.placements {
		if o.p.Namespace == pl.p.Namespace && o.p.Model == pl.p.Model && !o.p.State.Terminal() {
			a.mu.Unlock()
			e := api.Errorf(api.CodeConflict, "namespace %s already has a placement named %s on this host (%s, %s)", o.p.Namespace, o.p.Model, o.p.ID, o.p.State)
			e.Fix = "delete " + o.p.ID + " first (mesh delete " + o.p.ID + "), or place it under another name (--name)"
			return api.Placement{}, a.refuse(req, who, e)
		}
	}
	a.placements[pl.p.ID] = pl
	a.changedLocked()
	a.publishLocked(api.EventPlacement, pl, "sizing "+pl.p.Source, "")
	a.mu.Unlock()

	est, serr := a.size(ctx, c)
	var plan *api.SplitPlan
	if c.req.Split != nil && serr == nil {
		if plan, est, err = a.planSplit(c, est, 0); err != nil {
			a.mu.Lock()
			delete(a.placements, pl.p.ID)
			a.changedLocked()
			a.mu.Unlock()
			return api.Placement{}, a.refuse(req, who, err)
		}
	}

	a.mu.Lock()
	verdict, aerr := a.admitLocked(pl, est, serr, c.warn, true)
	if aerr != nil {
		delete(a.placements, pl.p.ID)
		a.changedLocked()
		a.mu.Unlock()
		return api.Placement{}, a.refuse(req, who, aerr)
	}
	if plan != nil {
		// The main placement's own need is llama-server's alone; its layers are a part of their
		// own, admitted next. Say so, with the figure the plan showed for this host.
		mb := plan.Members[0]
		verdict.reason += fmt.Sprintf("; that is llama-server's: with its %d/%d layers %s reserves %s of the split",
			mb.Layers, plan.Layers, a.identity.NodeName, api.FormatBytes(mb.Reserves()))
	}
	pl.p.Memory = verdict.estimate
	pl.model = a.modelFor(pl) // with the sized file's length and the prompt cache the estimate counted
	pl.p.State = api.StatePulling
	pl.p.Reason = verdict.note
	pl.p.UpdatedAt = time.Now().UTC()
	pl.victims = verdict.victims
	a.forgetEndedLocked(pl)
	a.evictLocked(pl, verdict)
	a.changedLocked()
	a.publishLocked(api.EventPlacement, pl, verdict.reason, "")
	if plan != nil {
		if err := a.startSplitLocked(ctx, pl, plan); err != nil {
			a.mu.Unlock()
			return api.Placement{}, a.refuse(req, who, err)
		}
	}
	if a.runCtx != nil {
		a.startLocked(pl)
	} else {
		a.pending = append(a.pending, pl)
	}
	v := a.viewLocked(pl)
	a.mu.Unlock()
	if verdict.warned {
		a.log.Warn("admitted despite the memory check (warn)", "placement", v.ID, "model", v.Model, "reason", verdict.reason)
	}
	a.log.Info("placement admitted", "placement", v.ID, "model", v.Model, "runtime", v.Runtime, "namespace", v.Namespace,
		"need", api.FormatBytes(v.Memory.Bytes), "device", v.Memory.Device, "method", v.Memory.Method)
	a.saveOrLog()
	return v, nil
}

// refuse records a refusal (metric, event, log) and returns it.
func (a *Agent) refuse(req api.PlacementRequest, who api.Principal, err error) error {
	e := asAPIError(err, api.CodeInternal)
	a.metrics.Refused(e.Code)
	ns := req.Namespace
	if ns == "" {
		ns = who.Namespace
	}
	if ns == "" {
		ns = api.DefaultNamespace
	}
	p := &api.Placement{Source: req.Source, Runtime: req.Runtime, Namespace: ns, Model: req.Name, State: api.StateFailed, Code: e.Code, Reason: e.Message}
	a.hub.Publish(api.Event{Type: api.EventRefused, Message: e.Message, Code: e.Code, Placement: p})
	a.log.Info("placement refused", "source", req.Source, "namespace", ns, "code", e.Code, "reason", e.Message)
	return e
}

// Estimate sizes a request and says whether this host would admit it now, reserving nothing.
func (a *Agent) Estimate(ctx context.Context, who api.Principal, req api.PlacementRequest) (api.Estimation, error) {
	c, err := a.validate(ctx, who, req)
	if err != nil {
		e := asAPIError(err, api.CodeInternal)
		if e.Code == api.CodeBadRequest || e.Code == api.CodeUnauthorized || e.Code == api.CodeForbidden {
			return api.Estimation{}, e
		}
		return api.Estimation{Verdict: api.VerdictRefused, Code: e.Code, Reason: e.Message, Free: a.Host().Memory.Free()}, nil
	}
	est, serr := a.size(ctx, c)
	pl := &placement{p: api.Placement{Namespace: c.req.Namespace, Model: c.req.Name, Priority: c.req.Priority, Runtime: c.runtime},
		scope: scopeOf(who, c.req.Namespace)}
	a.mu.Lock()
	defer a.mu.Unlock()
	free := a.memoryLocked().Free()
	// A dry run: victims are named in the verdict, nothing is evicted.
	verdict, aerr := a.admitLocked(pl, est, serr, c.warn, true)
	if aerr != nil {
		out := api.Estimation{Estimate: est, Verdict: api.VerdictRefused, Code: aerr.Code, Reason: aerr.Message, Free: free}
		if aerr.Fix != "" {
			out.Reason += " (" + aerr.Fix + ")"
		}
		return out, nil
	}
	out := api.Estimation{Estimate: verdict.estimate, Verdict: api.VerdictFits, Reason: verdict.reason, Free: free}
	if verdict.swap != nil {
		out.Verdict = api.VerdictSwap
	}
	return out, nil
}

// size estimates a checked request, bounded by the sizing timeout, for the run its engine
// arguments make (engines.RunSizer: llama-server's slots each hold the whole context, cache
// types and batch sizes change the cache and the buffers).
func (a *Agent) size(ctx context.Context, c checked) (api.SizeEstimate, error) {
	if c.req.Part != nil {
		return c.req.Part.Estimate(), nil
	}
	run, err := runOf(c.driver, c.req.Args)
	if err != nil {
		return api.SizeEstimate{Method: api.SizeUnknown}, asAPIError(err, api.CodeMemoryCheckFailed)
	}
	run.SHA256 = strings.ToLower(c.req.SHA256) // peers holding the file can answer for it
	sctx, cancel := context.WithTimeout(ctx, a.cfg.SizingTimeout)
	defer cancel()
	est, err := a.cfg.Sizer.EstimateRun(sctx, c.src, c.req.Context, run)
	if err != nil {
		return est, err
	}
	if est.TrainContext > 0 && c.req.Context > est.TrainContext {
		// The engine would cap every request at the training context (llama-server says
		// "capping") while holding the memory of the whole one asked.
		e := api.Errorf(api.CodeContextLimit, "the model was trained for a %d-token context and %d was asked: the engine would cap every request at %d", est.TrainContext, c.req.Context, est.TrainContext)
		e.Fix = fmt.Sprintf("ask for a context of %d tokens or less", est.TrainContext)
		return est, e
	}
	if run.Slots > 1 {
		est.Detail = fmt.Sprintf("%d slots of %d tokens each: %s", run.Slots, c.req.Context, est.Detail)
	}
	if c.req.MMProj != "" {
		return a.withProjector(sctx, est, c.req.MMProj)
	}
	return est, nil
}

// runOf is what a placement's engine arguments change in its memory, for a driver that says
// (engines.RunSizer); the defaults for one that does not.
func runOf(d engines.Driver, args []string) (sizing.Run, error) {
	if rs, ok := d.(engines.RunSizer); ok {
		return rs.SizeRun(args)
	}
	return sizing.Run{}, nil
}

// scopeOf is the scope of a placement who makes in namespace ns: a namespace token's reach
// ends at its namespace; the admin's does not.
func scopeOf(who api.Principal, ns string) string {
	if who.Admin {
		return ""
	}
	return ns
}

// validSHA256 reports whether s is a hex SHA-256 digest.
func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// modelFor is the driver's view of a placement.
func (a *Agent) modelFor(pl *placement) engines.Model {
	m := engines.Model{
		ID:      pl.p.ID,
		Name:    pl.p.Model,
		Source:  pl.p.Source,
		Ref:     pl.src.Ref(),
		Context: pl.p.Context,
		SHA256:  pl.p.SHA256,
		Bytes:   pl.p.Memory.FileBytes,
		Args:    pl.p.Args,
		MMProj:  pl.p.MMProj,
		// The estimate counted the prompt cache: the engine gets no more than that.
		CacheBytes: pl.p.Memory.Cache,
	}
	if pl.src.Kind == source.KindFile {
		m.Path = pl.src.Path
	}
	return m
}

// List returns the placements who may see, oldest first.
func (a *Agent) List(who api.Principal) []api.Placement {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := []api.Placement{}
	for _, pl := range a.sortedLocked() {
		if who.Allows(pl.p.Namespace) {
			out = append(out, a.viewLocked(pl))
		}
	}
	return out
}

// Placements returns every placement (the mesh publishes them all; readers filter).
func (a *Agent) Placements() []api.Placement { return a.List(api.Principal{Admin: true}) }

// Get returns one placement. Another namespace's placement is NotFound, exactly like a
// missing one, so a token cannot learn what other namespaces run.
func (a *Agent) Get(who api.Principal, id string) (api.Placement, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	pl, ok := a.placements[id]
	if !ok || !who.Allows(pl.p.Namespace) {
		return api.Placement{}, api.Errorf(api.CodeNotFound, "no placement %q on host %s", id, a.identity.NodeName)
	}
	return a.viewLocked(pl), nil
}

// Delete stops a placement, unloads its model and forgets it. It waits up to wait for the
// engine to let go; done is false when the deletion is still finishing in the background.
func (a *Agent) Delete(who api.Principal, id string, wait time.Duration) (p api.Placement, done bool, err error) {
	a.mu.Lock()
	pl, ok := a.placements[id]
	if !ok || !who.Allows(pl.p.Namespace) {
		a.mu.Unlock()
		return api.Placement{}, false, api.Errorf(api.CodeNotFound, "no placement %q on host %s", id, a.identity.NodeName)
	}
	first := pl.p.State != api.StateStopping
	// Only an engine that may hold the model needs unloading: not a placement still being
	// sized, nor one that already failed or was evicted (its engine let go then).
	unload := holds(pl.p.State) != holdNothing
	if first {
		pl.cancel()
		if !pl.p.State.Terminal() {
			pl.p.State = api.StateStopping
			pl.p.UpdatedAt = time.Now().UTC()
			a.changedLocked()
			a.publishLocked(api.EventPlacement, pl, "stopping", "")
		}
	}
	deleted := pl.deleted
	var lifecycleDone chan struct{}
	if pl.started {
		lifecycleDone = pl.done
	}
	a.mu.Unlock()
	if first {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.finishDelete(pl, lifecycleDone, unload)
		}()
	}
	select {
	case <-deleted:
		return pl.p, true, nil
	case <-time.After(wait):
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.viewLocked(pl), false, nil
	}
}

// finishDelete waits for the lifecycle to stop, unloads the engine and drops the placement.
func (a *Agent) finishDelete(pl *placement, lifecycleDone <-chan struct{}, unload bool) {
	if lifecycleDone != nil {
		<-lifecycleDone
	}
	a.releaseSplit(pl)
	if unload {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := pl.driver.Unload(ctx, pl.model); err != nil && !errors.Is(err, engines.ErrNotFound) {
			a.log.Warn("unloading a deleted placement", "placement", pl.p.ID, "err", err)
		}
		cancel()
	}
	// A pull that did not finish leaves a partial file: the disk space goes with the placement
	// (another download of the same file still writing it keeps it).
	if dp, ok := pl.driver.(interface{ DiscardPartial(engines.Model) error }); ok {
		if err := dp.DiscardPartial(pl.model); err != nil && !errors.Is(err, download.ErrBusy) {
			a.log.Warn("deleting a deleted placement's partial download", "placement", pl.p.ID, "err", err)
		}
	}
	a.mu.Lock()
	delete(a.placements, pl.p.ID)
	pl.p.UpdatedAt = time.Now().UTC()
	a.changedLocked()
	v := pl.p
	a.hub.Publish(api.Event{Type: api.EventDeleted, Message: "deleted " + v.Model, Placement: &v})
	close(pl.deleted)
	a.mu.Unlock()
	a.log.Info("placement deleted", "placement", v.ID, "model", v.Model)
	a.saveOrLog()
}

// restore takes back the placements of the last run. Those that held memory are admitted
// again against today's budget (the estimate they were admitted with stands: the model is
// already sized, maybe pulled) and restarted by Run; those that no longer fit fail with the
// reason. Failed and evicted placements are kept as records.
func (a *Agent) restore(saved []api.Placement) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range saved {
		pl := &placement{p: p, deleted: make(chan struct{}), kick: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
		pl.ctx, pl.cancel = context.WithCancel(context.Background())
		pl.p.Host = a.identity.NodeName
		a.placements[p.ID] = pl
		src, err := source.Parse(p.Source)
		if err != nil {
			a.failLocked(pl, api.CodeInvalidSource, "not restored: "+err.Error())
			continue
		}
		pl.src = src
		pl.model = a.modelFor(pl)
		if p.State.Terminal() {
			continue
		}
		d, ok := a.drivers[p.Runtime]
		if !ok {
			a.failLocked(pl, api.CodeEngineUnavailable, fmt.Sprintf("not restored: runtime %s is not enabled on this agent (--runtimes)", p.Runtime))
			continue
		}
		pl.driver = d
		if p.Split != nil {
			pl.driver = a.splitDriverFor()
		}
		if p.State == api.StateSleeping {
			// It held nothing when saved: it waits for a request, admitted again then.
			pl.p.Engine = ""
			forgetMeasuredLocked(pl)
			a.pending = append(a.pending, pl)
			continue
		}
		// Re-admit with the recorded estimate.
		pl.p.State = api.StateSizing
		verdict, aerr := a.admitLocked(pl, p.Memory, nil, p.MemoryCheck == api.MemoryCheckWarn || a.cfg.MemoryCheckMode == MemoryCheckWarn, false)
		if aerr != nil {
			a.failLocked(pl, aerr.Code, "not restored: "+aerr.Message)
			continue
		}
		pl.p.Memory = verdict.estimate
		if o := verdict.swap; o != nil {
			// Saved while it was pulling to replace o on the device: it still will, once pulled.
			pl.swapOut, o.swapIn = o, pl
		}
		pl.p.State = api.StatePulling
		pl.p.Reason = reasonRestoring
		pl.p.Progress, pl.p.PulledBytes, pl.p.TotalBytes = 0, 0, 0
		pl.p.Engine = ""
		forgetMeasuredLocked(pl)
		a.pending = append(a.pending, pl)
	}
	// A state file from before records were bounded may hold more than a namespace keeps.
	for _, ns := range namespacesOf(saved) {
		a.pruneLocked(ns)
	}
}

func namespacesOf(ps []api.Placement) []string {
	var out []string
	for _, p := range ps {
		if !slices.Contains(out, p.Namespace) {
			out = append(out, p.Namespace)
		}
	}
	return out
}

// cleanPartials removes half-finished downloads that no restored placement may resume: a
// partial written before the oldest placement being restored was made belongs to nothing.
func (a *Agent) cleanPartials() {
	a.mu.Lock()
	var oldest time.Time
	for _, pl := range a.pending {
		if oldest.IsZero() || pl.p.CreatedAt.Before(oldest) {
			oldest = pl.p.CreatedAt
		}
	}
	a.mu.Unlock()
	_, err := a.store.CleanPartials(a.log, func(_ string, mod time.Time) bool {
		return !oldest.IsZero() && !mod.Before(oldest)
	})
	if err != nil {
		a.log.Warn("model store: cleaning half-finished downloads", "err", err)
	}
}

// failLocked moves a placement to failed with a code and a reason.
func (a *Agent) failLocked(pl *placement, code api.Code, reason string) {
	pl.p.State = api.StateFailed
	pl.p.Code = code
	pl.p.Reason = api.Clip(reason, maxReason)
	pl.p.Progress = 0
	pl.p.Engine = ""
	forgetMeasuredLocked(pl)
	unswapLocked(pl)
	a.endWakeLocked(pl, &api.Error{Code: code, Message: pl.p.Reason})
	pl.p.UpdatedAt = time.Now().UTC()
	a.changedLocked()
	a.publishLocked(api.EventPlacement, pl, "failed: "+pl.p.Reason, code)
	a.pruneLocked(pl.p.Namespace)
}

// Bounds on what failed placements leave behind: each failure is kept as a record (it says
// why), and records are saved, so without a bound a token could grow the state file until the
// agent no longer starts.
const (
	maxRecordsPerNamespace = 32
	maxReason              = 2048
)

// forgetEndedLocked drops the evicted and failed records of pl's model in its namespace on
// this host, which pl places again: one row per model, where a Hailo swap there and back would
// otherwise leave a record at every turn. A partial download stays (pl resumes it).
func (a *Agent) forgetEndedLocked(pl *placement) {
	for id, o := range a.placements {
		if o != pl && o.p.Namespace == pl.p.Namespace && o.p.Model == pl.p.Model && o.p.State.Terminal() {
			delete(a.placements, id)
			v := o.p
			a.hub.Publish(api.Event{Type: api.EventDeleted, Message: "forgotten: placed again as " + pl.p.ID, Placement: &v})
		}
	}
}

// pruneLocked forgets the oldest failed and evicted records of namespace ns beyond
// maxRecordsPerNamespace, with their partial downloads.
func (a *Agent) pruneLocked(ns string) {
	var records []*placement
	for _, o := range a.placements {
		if o.p.Namespace == ns && o.p.State.Terminal() {
			records = append(records, o)
		}
	}
	if len(records) <= maxRecordsPerNamespace {
		return
	}
	slices.SortFunc(records, func(x, y *placement) int { return x.p.UpdatedAt.Compare(y.p.UpdatedAt) })
	for _, o := range records[:len(records)-maxRecordsPerNamespace] {
		delete(a.placements, o.p.ID)
		v := o.p
		a.hub.Publish(api.Event{Type: api.EventDeleted, Message: "forgotten: namespace " + ns + " keeps its " + strconv.Itoa(maxRecordsPerNamespace) + " latest failed placements", Placement: &v})
		if dp, ok := o.driver.(interface{ DiscardPartial(engines.Model) error }); ok {
			m := o.model
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				if err := dp.DiscardPartial(m); err != nil && !errors.Is(err, download.ErrBusy) {
					a.log.Warn("deleting a forgotten placement's partial download", "placement", v.ID, "err", err)
				}
			}()
		}
	}
	a.changedLocked()
}
