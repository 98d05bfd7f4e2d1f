// Package keeper meets the mesh's intents (mesh/intent) without a leader. Every agent runs a
// keeper over the same intents and, within a gossip round, the same view; each decides the same
// thing from them and acts only on its own share:
//
//   - Counting. An intent's replicas are the placements of its namespace, model name and source.
//     One counts while its host is alive (or merely suspect, or only its API unreachable) and it
//     is neither failed nor evicted. A dead or departed host's replicas do not count.
//   - Too few. The hosts that could add one are ranked as the console ranks them (mesh/rank),
//     leaving out the hosts that hold it already, those the intent does not allow, and those
//     backing off after a failure to place it; the best `wants − has` of the hosts that fit
//     place it, each its own. A new intent waits a short grace first: the agent that accepted
//     it usually places it itself.
//   - Too many (two agents placed at once, or a host came back with its old replica). Replicas
//     are ordered serving first, then by their agent's start (longest running first: a host that
//     came back started last), then oldest placement first, then host name; the ones past
//     `wants` remove themselves, but only while `wants` serving replicas are kept, so the last
//     one never goes.
//   - Failures. A host that fails to place an intent keeps a failed record of it (agent
//     RecordFailure), which every agent sees; the host is left out for a backoff that doubles
//     with each failure in a row (its Restarts), so a full host never loops, and the reason is
//     in the events, the intent's note and the doctor.
//   - Constraints. An intent may name the only hosts it may run on, and labels its hosts must
//     carry (`llmkube-agent run --label k=v`); the ranking refuses the others, and a replica on
//     a host that no longer fits (the intent was edited) is superseded. "Not on battery" is not
//     offered: the host probe (hwprobe) reads no power source.
//   - Deletion. A tombstone removes the placements of the intent made before it.
//   - Swaps. A replica a swap took off its one-model device was the user's choice to replace
//     (the keeper never swaps): its intent wants one fewer while others of it count, and is
//     deleted when it was the last (api.go, replaced).
//   - Load. An intent with MaxReplicas over Replicas wants one replica more (up to MaxReplicas)
//     once a replica has been busy (more than api.BusyInFlight requests in flight on it, which
//     its agent gossips as the placement's BusySince) for ScaleAfter and every replica it has
//     serves; one at a time, each placed as above. It wants as many as are in use again (used
//     within the intent's TTL, or ScaleIdle without one; never fewer than Replicas), and the
//     idle surplus removes itself as any surplus does. BusySince is in every agent's view, so
//     all add alike; each agent knows its own replicas' last use best, and only removes its own.
package keeper

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/mesh"
	"github.com/llmkube/mesh/mesh/intent"
	"github.com/llmkube/mesh/mesh/rank"
)

// Mesh is what the keeper needs of the membership (mesh.Mesh).
type Mesh interface {
	View() mesh.View
	Subscribe() (<-chan mesh.View, func())
	Share(changes map[string][]byte)
}

// Config builds a Keeper.
type Config struct {
	Agent *agent.Agent
	Store *intent.Store
	Mesh  Mesh
	// Grace is how long a new or changed intent is left to the agent that accepted it (which
	// places its own replica at once) before others add replicas; 2 s when zero.
	Grace time.Duration
	// Backoff is the wait after a host's first failure to place an intent, doubled with each
	// failure in a row up to BackoffMax; 5 s and 5 min when zero.
	Backoff, BackoffMax time.Duration
	// Tick is how often the keeper looks again without a change; 1 s when zero.
	Tick time.Duration
	// ScaleAfter is how long a replica must stay busy before the intent adds one; 30 s when
	// zero. ScaleIdle is how long an added replica may go unused before it goes, for an
	// intent without a TTL; 5 min when zero.
	ScaleAfter, ScaleIdle time.Duration
	// Settle is how long after its start the keeper only looks: its member learns the mesh's
	// state first, and a host that just (re)joined must not place what others already run;
	// 3 s when zero.
	Settle time.Duration
	// OnDemand are the namespaces whose requests for a model no host runs place it (demand.go);
	// "*" is every namespace; empty is off.
	OnDemand []string
	// DemandWait bounds a request's wait for a model placed on demand; 2 min when zero.
	DemandWait time.Duration
	Log        *slog.Logger
}

// Keeper is one agent's share of keeping the intents met.
type Keeper struct {
	cfg     Config
	self    string
	wake    chan struct{}
	started time.Time

	mu        sync.Mutex
	status    []api.IntentStatus
	deadSince map[string]time.Time // hosts seen dead or gone, since when
	notes     map[string]string    // per intent: the note last announced as an event
	placing   map[string]bool      // per intent: this agent is placing it now
	deleting  map[string]bool      // placements a caller is deleting through Delete
	// byHand counts the placements callers are making through Place now: each records its
	// intent only once it is admitted, so until then this agent removes no surplus of its own.
	byHand    int
	refused   map[string]refusal // on-demand names refused lately (demand.go)
	blocked   map[string]string  // per intent: why no host can take it (plan.blocked)
	resolving map[string]chan struct{}
}

// New makes a keeper; Run runs it.
func New(cfg Config) *Keeper {
	if cfg.Grace <= 0 {
		cfg.Grace = 2 * time.Second
	}
	if cfg.DemandWait <= 0 {
		cfg.DemandWait = 2 * time.Minute
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 5 * time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Minute
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.ScaleAfter <= 0 {
		cfg.ScaleAfter = 30 * time.Second
	}
	if cfg.ScaleIdle <= 0 {
		cfg.ScaleIdle = 5 * time.Minute
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 3 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	k := &Keeper{cfg: cfg, self: cfg.Agent.Name(), wake: make(chan struct{}, 1), started: time.Now(),
		deadSince: map[string]time.Time{}, notes: map[string]string{}, placing: map[string]bool{}, deleting: map[string]bool{},
		refused: map[string]refusal{}, resolving: map[string]chan struct{}{}}
	cfg.Agent.OnReplaced(k.replaced)
	return k
}

// Run keeps the intents met until ctx ends: at every change of the view, the intents or this
// agent's placements, and every Tick.
func (k *Keeper) Run(ctx context.Context) error {
	views, stopViews := k.cfg.Mesh.Subscribe()
	defer stopViews()
	local, stopLocal := k.cfg.Agent.Watch()
	defer stopLocal()
	tick := time.NewTicker(k.cfg.Tick)
	defer tick.Stop()
	for {
		k.reconcile(ctx, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-views:
		case <-local:
		case <-k.cfg.Store.Changed():
		case <-k.wake:
		case <-tick.C:
		}
	}
}

func (k *Keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// members is the view's members with this agent's own placements as they are now, not as last
// published: what it just placed or removed counts at once.
func (k *Keeper) members(now time.Time) []api.Member {
	v := k.cfg.Mesh.View()
	out := slices.Clone(v.Members)
	own := k.cfg.Agent.Placements()
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range out {
		m := &out[i]
		if m.Name == k.self {
			m.Placements, m.Liveness = own, api.Alive
		}
		if m.Liveness == api.Dead || m.Liveness == api.Left {
			if _, ok := k.deadSince[m.Name]; !ok {
				k.deadSince[m.Name] = now
			}
		} else {
			delete(k.deadSince, m.Name)
		}
	}
	return out
}

// plan is what one agent decides about one intent.
type plan struct {
	status api.IntentStatus
	place  bool            // this agent adds a replica
	remove []api.Placement // this agent's placements to remove
	clear  []api.Placement // this agent's failed records of it, cleared before placing again
	// blocked says why no host can take it and none may soon: it has no replica, and every
	// host that could refuses it for a reason that does not pass by itself.
	blocked string
}

func (k *Keeper) reconcile(ctx context.Context, now time.Time) {
	members := k.members(now)
	var status []api.IntentStatus
	blocked := map[string]string{}
	speaker := k.speaks(members)
	for _, in := range k.cfg.Store.All() {
		p := k.judge(in, members, now)
		if p.blocked != "" {
			blocked[in.Key()] = p.blocked
		}
		if !in.Deleted {
			status = append(status, p.status)
			if speaker {
				k.announce(in, p.status)
			}
		}
		for _, r := range p.remove {
			if k.isDeleting(r.ID) {
				continue
			}
			k.cfg.Log.Info("removing a replica", "intent", in.Key(), "placement", r.ID, "why", r.Reason)
			k.event(in, "removing "+r.ID+" of "+in.Key()+": "+r.Reason, "")
			if _, _, err := k.cfg.Agent.Delete(api.Principal{Admin: true}, r.ID, 0); err != nil {
				k.cfg.Log.Warn("removing a replica", "placement", r.ID, "err", err)
			}
		}
		if p.place {
			k.startPlacing(ctx, in, p.clear)
		}
	}
	k.mu.Lock()
	k.status, k.blocked = status, blocked
	k.mu.Unlock()
}

// replica is a placement of an intent in the view.
type replica struct {
	p        api.Placement
	liveness api.Liveness
	state    api.PlacementState // what it was before its host went away, for an unavailable one
	counts   bool
	// hostStarted is when its agent started: a host that came back is the last to start.
	hostStarted time.Time
}

func serving(s api.PlacementState) bool { return s == api.StateReady || s == api.StateSleeping }

// judge decides one intent from the members; it changes nothing.
func (k *Keeper) judge(in api.Intent, members []api.Member, now time.Time) plan {
	var pl plan
	var reps []replica
	var failed []replica
	var gone []string
	for _, m := range members {
		if m.Role != api.RoleAgent {
			continue
		}
		for _, p := range m.Placements {
			if p.Namespace != in.Namespace || p.Model != in.Name {
				continue
			}
			if in.Deleted || p.Source != in.Source || !allowed(in.Hosts, m.Name) || !labelled(in, m) {
				// Deleted, or superseded by an edit: what was placed before the edit goes.
				if m.Name == k.self && p.CreatedAt.Before(in.UpdatedAt) && p.State != api.StateStopping && !p.State.Terminal() {
					p.Reason = "superseded by the intent's version " + fmt.Sprint(in.Version) + " from " + in.Origin
					pl.remove = append(pl.remove, p)
				}
				continue
			}
			r := replica{p: p, liveness: m.Liveness, state: p.State}
			if m.Host != nil {
				r.hostStarted = m.Host.StartedAt
			}
			if was, ok := mesh.WasState(p); ok {
				r.state = was
			}
			switch {
			case r.state.Terminal():
				failed = append(failed, r)
				continue
			case m.Liveness == api.Dead || m.Liveness == api.Left:
				gone = append(gone, m.Name)
			default:
				r.counts = r.state != api.StateStopping
			}
			reps = append(reps, r)
		}
	}
	if in.Deleted {
		return pl
	}
	counted := 0
	for _, r := range reps {
		if r.counts {
			counted++
		}
	}
	want, scaling := k.wanted(in, reps, now)
	st := api.IntentStatus{Intent: in, Has: counted}
	for _, r := range reps {
		st.Where = append(st.Where, api.Replica{Host: r.p.Host, Placement: r.p.ID, State: r.state, Liveness: r.liveness, Counts: r.counts})
	}
	var notes []string
	if scaling != "" {
		notes = append(notes, scaling)
	}
	k.mu.Lock()
	for _, h := range gone {
		notes = append(notes, fmt.Sprintf("%s %s %s ago", h, livenessOf(members, h), roundAgo(now.Sub(k.deadSince[h]))))
	}
	k.mu.Unlock()

	// Hosts backing off after failing to place it: every agent sees their records.
	backingOff := map[string]bool{}
	for _, r := range failed {
		until := r.p.UpdatedAt.Add(k.backoff(r.p.Restarts))
		if now.Before(until) {
			backingOff[r.p.Host] = true
			notes = append(notes, fmt.Sprintf("%s failed (%s), retrying there in %s", r.p.Host, clip(r.p.Reason), roundAgo(until.Sub(now))))
		}
		if r.p.Host == k.self {
			pl.clear = append(pl.clear, r.p)
		}
	}

	switch {
	case want == 0:
		// An alias nobody asked for yet: nothing to place, nothing to remove.
	case counted != want && now.Sub(k.started) < k.cfg.Settle:
		notes = append(notes, "this agent started "+roundAgo(now.Sub(k.started))+" ago: settling before it acts")
	case counted < want:
		if k.placingNow(in.Key()) {
			notes = append(notes, "placing on "+k.self)
			break
		}
		if age := now.Sub(in.UpdatedAt); age >= 0 && age < k.cfg.Grace {
			notes = append(notes, "new: its own placement is on its way")
			break
		}
		holding := map[string]bool{}
		for _, r := range reps {
			holding[r.p.Host] = true
		}
		chosen, refusal, transient := k.choose(in, members, holding, backingOff, want-counted)
		switch {
		case len(chosen) > 0:
			notes = append(notes, "re-placing on "+strings.Join(chosen, ", "))
			pl.place = slices.Contains(chosen, k.self)
		default:
			notes = append(notes, noHost+": "+refusal)
			if !transient && counted == 0 {
				pl.blocked = noHost + ": " + refusal
			}
		}
	case counted > want && k.placingByHand():
		// A person is placing a model here (the view may still show a replica they deleted
		// elsewhere just before): how many they want is recorded once it is admitted.
		notes = append(notes, "a surplus while a placement by hand is admitted here: left until it is recorded")
	case counted > want && now.Sub(in.UpdatedAt) >= 0 && now.Sub(in.UpdatedAt) < k.cfg.Grace:
		// Just changed: the view may still show what the change replaced (a replica deleted by
		// hand on another host, then the model placed here), so nothing goes before it settles.
		notes = append(notes, "a surplus just after a change: left until the view settles")
	case counted > want:
		pl.remove = append(pl.remove, k.surplus(in, want, reps)...)
		if len(pl.remove) == 0 {
			notes = append(notes, "a surplus, settled once the replicas kept serve")
		}
	}
	st.Note = strings.Join(notes, "; ")
	pl.status = st
	return pl
}

// choose ranks the hosts for in and returns the best n that fit and may take it, or, when none
// does, why the best-ranked one does not, and whether that may pass by itself (a host that
// could take it is unreachable for now, or backing off).
func (k *Keeper) choose(in api.Intent, members []api.Member, holding, backingOff map[string]bool, n int) (chosen []string, refusal string, transient bool) {
	req := rank.Request{PlacementRequest: in.PlacementRequest, Estimate: api.SizeEstimate{Bytes: in.Need, Device: in.Device}}
	refusal = "no agent in the view"
	for _, r := range rank.Rank(members, req) {
		switch {
		case holding[r.Host]:
			continue
		case !allowed(in.Hosts, r.Host):
			continue
		case backingOff[r.Host]:
			refusal, transient = r.Host+" is backing off after a failure", true
			continue
		case r.Verdict != api.VerdictFits:
			// A host unreachable or on battery for now may take it later.
			transient = transient || r.Code == api.CodeUnreachable || r.Code == api.CodeOnBattery
			if len(chosen) == 0 && !strings.Contains(refusal, ": ") {
				refusal = r.Host + " " + r.Reason
			}
			continue
		}
		chosen = append(chosen, r.Host)
		if len(chosen) == n {
			break
		}
	}
	return chosen, refusal, transient
}

// surplus is this agent's replicas past the intent's count, as every agent orders them: serving
// first, then on the agent running longest (a host that came back with its old replica started
// last), then the oldest placement (of two placed at once, the later goes), then by host name.
// None while fewer than it wants would be left serving.
func (k *Keeper) surplus(in api.Intent, want int, reps []replica) []api.Placement {
	var counted []replica
	for _, r := range reps {
		if r.counts {
			counted = append(counted, r)
		}
	}
	slices.SortFunc(counted, func(a, b replica) int {
		if sa, sb := serving(a.state), serving(b.state); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		if c := a.hostStarted.Compare(b.hostStarted); c != 0 {
			return c
		}
		if c := a.p.CreatedAt.Compare(b.p.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.p.Host, b.p.Host)
	})
	for _, r := range counted[:want] {
		if !serving(r.state) {
			return nil
		}
	}
	var out []api.Placement
	for _, r := range counted[want:] {
		if r.p.Host == k.self {
			r.p.Reason = fmt.Sprintf("a surplus replica: %s wants %d, and %d others serve", in.Key(), want, want)
			out = append(out, r.p)
		}
	}
	return out
}

// wanted is how many replicas in wants now, with a note when load changed it (see Load in
// the package comment).
func (k *Keeper) wanted(in api.Intent, reps []replica, now time.Time) (int, string) {
	if in.Deleted || in.MaxReplicas <= in.Replicas {
		return in.Replicas, ""
	}
	idle := k.cfg.ScaleIdle
	if d, err := api.ParseTTL(in.TTL); err == nil && in.TTL != "" && d > 0 {
		idle = d
	}
	var counted, inUse int
	busy, allServe := false, true
	for _, r := range reps {
		if !r.counts {
			continue
		}
		counted++
		allServe = allServe && serving(r.state)
		if !r.p.BusySince.IsZero() {
			inUse++
			busy = busy || now.Sub(r.p.BusySince) >= k.cfg.ScaleAfter
			continue
		}
		if used := latest(r.p.LastUsed, r.p.CreatedAt); now.Sub(used) < idle {
			inUse++
		}
	}
	switch {
	case busy && allServe && counted < in.MaxReplicas:
		return max(in.Replicas, counted+1), fmt.Sprintf("busy: adding a replica (at most %d)", in.MaxReplicas)
	case busy:
		return max(counted, in.Replicas), fmt.Sprintf("busy: %d replicas (at most %d)", max(counted, in.Replicas), in.MaxReplicas)
	case inUse > in.Replicas:
		return min(inUse, in.MaxReplicas), fmt.Sprintf("%d in use (at most %d; idle ones go after %s)", min(inUse, in.MaxReplicas), in.MaxReplicas, idle)
	}
	return in.Replicas, ""
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// noHost starts the note of an intent that no host can take now.
const noHost = "no host can take it"

// backoff is how long a host waits after its n-th failure in a row (n from 0).
func (k *Keeper) backoff(n int) time.Duration {
	d := k.cfg.Backoff << min(max(n, 0), 16)
	return min(d, k.cfg.BackoffMax)
}

func (k *Keeper) placingByHand() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byHand > 0
}

func (k *Keeper) isDeleting(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deleting[id]
}

func (k *Keeper) placingNow(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.placing[key]
}

// startPlacing places a replica of in here, in the background (sizing may take a while); a
// refusal is kept as a failed record, counting the failures in a row.
func (k *Keeper) startPlacing(ctx context.Context, in api.Intent, clear []api.Placement) {
	k.mu.Lock()
	if k.placing[in.Key()] {
		k.mu.Unlock()
		return
	}
	k.placing[in.Key()] = true
	k.mu.Unlock()
	failures := 0
	for _, r := range clear {
		failures = max(failures, r.Restarts+1)
		if _, _, err := k.cfg.Agent.Delete(api.Principal{Admin: true}, r.ID, 0); err != nil {
			k.cfg.Log.Debug("clearing a failed record", "placement", r.ID, "err", err)
		}
	}
	go func() {
		defer func() {
			k.mu.Lock()
			delete(k.placing, in.Key())
			k.mu.Unlock()
			k.poke()
		}()
		k.event(in, "placing "+in.Key()+" here to meet its intent", "")
		p, err := k.cfg.Agent.Place(ctx, placer(in), in.PlacementRequest)
		if err != nil {
			e := &api.Error{Code: api.CodeInternal, Message: err.Error()}
			if ae, ok := err.(*api.Error); ok {
				e = ae
			}
			k.cfg.Agent.RecordFailure(in.PlacementRequest, e, failures)
			k.event(in, fmt.Sprintf("could not place %s here: %s; backing off %s", in.Key(), e.Message, k.backoff(failures)), e.Code)
			return
		}
		k.cfg.Log.Info("placed a replica", "intent", in.Key(), "placement", p.ID)
	}()
}

// placer is whom a replica is placed as: the intent's namespace, or the admin when the intent
// asks what only the admin may (protection, loading anyway, a local file outside the agents'
// model folders), which the agent that accepted it checked.
func placer(in api.Intent) api.Principal {
	src, err := source.Parse(in.Source)
	if in.Protected || in.MemoryCheck != "" || (err == nil && src.Kind == source.KindFile) {
		return api.Principal{Admin: true}
	}
	return api.Principal{Namespace: in.Namespace}
}

// speaks says whether this agent announces how intents are met: the first alive agent by name,
// so a console that merges every agent's events shows each change once. What an agent does
// itself (placing, removing) each says for itself.
func (k *Keeper) speaks(members []api.Member) bool {
	for _, m := range members { // the view's members are sorted by name
		if m.Role == api.RoleAgent && m.Liveness == api.Alive {
			return m.Name == k.self
		}
	}
	return true
}

// announce publishes an event when an intent's note changes (not on every look).
func (k *Keeper) announce(in api.Intent, st api.IntentStatus) {
	msg := fmt.Sprintf("%s wants %d, has %d", in.Key(), in.Replicas, st.Has)
	if st.Note != "" {
		msg += " (" + st.Note + ")"
	}
	k.mu.Lock()
	same := k.notes[in.Key()] == msg
	k.notes[in.Key()] = msg
	k.mu.Unlock()
	if !same {
		k.event(in, msg, "")
	}
}

// event publishes an intent event, scoped to its namespace like a placement's.
func (k *Keeper) event(in api.Intent, msg string, code api.Code) {
	p := &api.Placement{Namespace: in.Namespace, Model: in.Name, Source: in.Source, Runtime: in.Runtime}
	k.cfg.Agent.Events().Publish(api.Event{Type: api.EventIntent, Message: msg, Code: code, Placement: p})
}

// Status is every intent who may see, as the store holds it now (an edit just made, here or by
// gossip, is read back at once), with how it is met as this agent last looked.
func (k *Keeper) Status(who api.Principal) []api.IntentStatus {
	k.mu.Lock()
	last := make(map[string]api.IntentStatus, len(k.status))
	for _, st := range k.status {
		last[st.Key()] = st
	}
	k.mu.Unlock()
	out := []api.IntentStatus{}
	for _, in := range k.cfg.Store.All() {
		if in.Deleted || !who.Allows(in.Namespace) {
			continue
		}
		st := last[in.Key()]
		st.Intent = in
		out = append(out, st)
	}
	return out
}

// Findings are the intents not met when this agent last judged them, for the doctor (one just
// recorded is not a finding before it is judged).
func (k *Keeper) Findings() []api.Finding {
	k.mu.Lock()
	judged := slices.Clone(k.status)
	k.mu.Unlock()
	var out []api.Finding
	for _, st := range judged {
		if st.Has >= st.Replicas {
			continue
		}
		fix := "the mesh re-places it where a host fits; free memory or add a host if none does"
		if strings.Contains(st.Note, noHost+": ") && strings.Contains(st.Note, " swap: replaces ") {
			// Its only host is a one-model device running another model (ranked a swap): a swap
			// is a person's choice, which the keeper never makes, so waiting frees nothing.
			fix = "a Hailo-10H runs one model at a time and the mesh never swaps by itself: place it again there " +
				"(console Models: r) to swap it back, or delete its last replica (x) to stop keeping it"
		}
		replicas := "replicas"
		if st.Replicas == 1 {
			replicas = "replica"
		}
		out = append(out, api.Finding{Severity: api.SeverityWarning, Namespace: st.Namespace,
			Problem: fmt.Sprintf("intent %s wants %d %s, has %d", st.Key(), st.Replicas, replicas, st.Has),
			Fix:     fix,
			Detail:  st.Note})
	}
	return out
}

// labelled: m carries the labels in requires, or its state is not known yet (nothing is
// removed on no word).
func labelled(in api.Intent, m api.Member) bool {
	return m.Host == nil || api.MissingLabel(m.Host.Labels, in.Labels) == ""
}

func allowed(hosts []string, host string) bool {
	return len(hosts) == 0 || slices.Contains(hosts, host)
}

func livenessOf(members []api.Member, host string) api.Liveness {
	for _, m := range members {
		if m.Name == host {
			return m.Liveness
		}
	}
	return api.Dead
}

func roundAgo(d time.Duration) string {
	return max(d, 0).Round(time.Second).String()
}

func clip(s string) string { return api.Clip(s, 120) }
