package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh/rank"
)

// A split placement (DESIGN.md §3 "Split") on its main host: the placement itself runs
// llama-server and holds what llama-server needs beyond the layers (api.SplitMember.MainNeed);
// each member's layers are a part, an ordinary placement of runtime rpc-server on that member,
// admitted there against its own budget, before anything starts. llama-server reaches each
// part through a loopback port of this agent, relayed over the sealed channel (split_tunnel.go).

// errSplitFailed ends a split that cannot run any more: a member is gone and the hosts left do
// not hold the model. The lifecycle fails the placement with it instead of retrying.
var errSplitFailed = errors.New("split failed")

// partTimeout bounds one call to a member's agent.
const partTimeout = 30 * time.Second

// partsReady bounds the wait for every part's rpc-server to run.
const partsReady = 2 * time.Minute

// splitOK refuses a split where the agent has no mesh to carry it, or no llama-server.
func (a *Agent) splitOK() error {
	if a.view == nil || a.hop == nil {
		return api.Errorf(api.CodeEngineUnavailable, "split placements need the mesh and its sealed channel; this agent runs alone")
	}
	if _, ok := a.drivers[api.RuntimeLlamaServer].(*llamaserver.Driver); !ok {
		return api.Errorf(api.CodeEngineUnavailable, "host %s runs no llama-server, so it cannot be a split's main host", a.Name())
	}
	return nil
}

// planSplit plans a checked split request sized as est, with this host as the main, over the
// mesh as this agent sees it now, leaving out the hosts in without; own is what the split's
// main placement already holds here (when it is re-planned), free for the new plan. It returns
// the plan and what the main placement itself holds; an error when it does not fit, with every
// member's arithmetic and every other host's reason.
func (a *Agent) planSplit(c checked, est api.SizeEstimate, own int64, without ...string) (*api.SplitPlan, api.SizeEstimate, error) {
	if err := a.splitOK(); err != nil {
		return nil, est, err
	}
	view := a.view()
	members := view.Members[:0:0]
	for _, m := range view.Members {
		if m.Name == a.Name() {
			// Our own state as it is now, not as it was last gossiped.
			h := a.Host()
			h.Memory.Committed = max(h.Memory.Committed-own, 0)
			m.Host, m.Liveness = &h, api.Alive
		}
		if !slices.Contains(without, m.Name) {
			members = append(members, m)
		}
	}
	req := rank.SplitRequest{Request: rank.Request{PlacementRequest: c.req, Estimate: est}, Main: a.Name(), RTT: rank.RTTs(members)}
	if c.req.Split != nil {
		req.Hosts, req.MaxRTT = c.req.Split.Hosts, c.req.Split.RTTBound()
	}
	if c.src.Path != "" {
		if _, err := os.Stat(c.src.Path); err == nil {
			req.HasFiles = map[string]bool{a.Name(): true}
		}
	}
	plan := rank.Split(members, req)
	if !plan.Fits {
		msg := plan.Reason
		for _, m := range plan.Members {
			msg += fmt.Sprintf("; %s could hold %d layers (%s free)", m.Host, m.Layers, api.FormatBytes(m.Free))
		}
		for _, l := range plan.Left {
			msg += "; " + l.Host + ": " + l.Reason
		}
		return nil, est, api.Errorf(api.CodeInsufficientMemory, "%s", msg)
	}
	main := plan.Members[0]
	// The main's own estimate holds the token embeddings (they stay in llama-server) and keeps
	// the output layer's size, which a member holds: a re-plan sizes the model again from them.
	embeddings, output := rank.Ends(est)
	mainEst := api.SizeEstimate{
		Bytes: main.MainNeed, Weights: embeddings, Compute: est.Compute, Overhead: est.Overhead, // no prompt cache: see rank's mainNeed
		Method: est.Method, Device: api.DeviceHost, TrainContext: est.TrainContext, FileBytes: est.FileBytes, Layers: est.Layers,
		InputWeights: embeddings, OutputWeights: output,
		Detail: fmt.Sprintf("main of a split across %d hosts: llama-server's token embeddings %s + compute %s + overhead %s, no prompt cache; the layers are the parts'",
			len(plan.Members), api.FormatBytes(embeddings), api.FormatBytes(est.Compute), api.FormatBytes(est.Overhead)),
	}
	return &plan, mainEst, nil
}

// admitParts asks every member with layers to admit its part; any refusal releases the parts
// admitted so far and fails the whole split with each member's answer.
func (a *Agent) admitParts(ctx context.Context, pl *placement, plan *api.SplitPlan) error {
	var refusals []string
	for i := range plan.Members {
		m := &plan.Members[i]
		if m.Layers == 0 {
			continue
		}
		req := api.PlacementRequest{
			Source: pl.p.Source, Runtime: api.RuntimeRPCServer, Namespace: pl.p.Namespace, Context: pl.p.Context,
			Priority: pl.p.Priority, Protected: pl.p.Protected, Name: pl.p.Model + ".part." + pl.p.ID, TTL: "-1",
			Part: &api.SplitPart{Parent: pl.p.ID, Main: a.Name(), Member: *m},
		}
		p, err := a.onMember(ctx, m.Host, http.MethodPost, "/v1/placements", req)
		if err != nil {
			refusals = append(refusals, fmt.Sprintf("%s refused its share (%d layers, %s): %v", m.Host, m.Layers, api.FormatBytes(m.Need), err))
			continue
		}
		m.Part, m.State = p.ID, p.State
	}
	if len(refusals) > 0 {
		a.releaseParts(plan)
		return api.Errorf(api.CodeInsufficientMemory, "the split was refused and every reservation released: %s", strings.Join(refusals, "; "))
	}
	return nil
}

// releaseParts deletes every part of plan, best effort: a member that does not answer drops its
// part itself once it sees the main gone (reapParts).
func (a *Agent) releaseParts(plan *api.SplitPlan) {
	for i := range plan.Members {
		m := &plan.Members[i]
		if m.Part == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), partTimeout)
		if _, err := a.onMember(ctx, m.Host, http.MethodDelete, "/v1/placements/"+url.PathEscape(m.Part), nil); err != nil && codeOf(err, "") != api.CodeNotFound {
			a.log.Warn("releasing a split's part", "host", m.Host, "part", m.Part, "err", err)
		}
		cancel()
		m.Part, m.State = "", ""
	}
}

// releaseSplit releases a deleted split's parts, and its tunnels.
func (a *Agent) releaseSplit(pl *placement) {
	a.mu.Lock()
	if pl.p.Split == nil {
		a.mu.Unlock()
		return
	}
	plan := *pl.p.Split
	plan.Members = append([]api.SplitMember(nil), plan.Members...)
	a.mu.Unlock()
	a.tunnels.close(pl.p.ID)
	a.releaseParts(&plan)
}

// onMember calls a member's agent API as this agent, asserting the admin principal over the
// sealed channel: only an agent of the mesh can. The member may be this host. The answer, a
// placement, is returned; a refusal is its *api.Error.
func (a *Agent) onMember(ctx context.Context, host, method, path string, body any) (api.Placement, error) {
	if host == a.Name() {
		admin := api.Principal{Admin: true}
		switch {
		case method == http.MethodPost:
			return a.Place(ctx, admin, body.(api.PlacementRequest))
		case method == http.MethodDelete:
			p, _, err := a.Delete(admin, strings.TrimPrefix(path, "/v1/placements/"), deleteWait)
			return p, err
		default:
			return a.Get(admin, strings.TrimPrefix(path, "/v1/placements/"))
		}
	}
	mb, err := a.member(host)
	if err != nil {
		return api.Placement{}, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return api.Placement{}, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, partTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.hop.Scheme()+"://"+mb.Host.APIAddr+path, rd)
	if err != nil {
		return api.Placement{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(PrincipalHeader, AssertPrincipal(api.Principal{Admin: true}))
	resp, err := a.hop.Do(req, seal.PeerNamed(mb.Name, mb.SealKey))
	if err != nil {
		return api.Placement{}, api.Errorf(api.CodeUnreachable, "host %s did not answer: %v", host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if resp.StatusCode >= 300 {
		var eb api.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
			return api.Placement{}, eb.Error
		}
		return api.Placement{}, api.Errorf(api.CodeUnreachable, "host %s answered %s", host, resp.Status)
	}
	var p api.Placement
	if method == http.MethodDelete {
		return p, nil
	}
	return p, json.Unmarshal(b, &p)
}

// member is host in this agent's view of the mesh, neither dead nor left, with an API address.
func (a *Agent) member(host string) (api.Member, error) {
	for _, m := range a.view().Members {
		if m.Name != host {
			continue
		}
		// A suspect member is still asked: it may only be slow to answer probes.
		if m.Liveness == api.Dead || m.Liveness == api.Left || m.Host == nil || m.Host.APIAddr == "" {
			return m, api.Errorf(api.CodeUnreachable, "host %s is %s", host, m.Liveness)
		}
		return m, nil
	}
	return api.Member{}, api.Errorf(api.CodeUnreachable, "host %s is not in the mesh", host)
}

// splitDriver runs a split's main: llama-server (the embedded driver: chats, embeddings and
// every optional interface are its own), started once every part's rpc-server runs, with --rpc
// the loopback ends of the tunnels to them.
type splitDriver struct {
	*llamaserver.Driver
	a *Agent
}

// Load waits for the parts, opens the tunnels and starts llama-server. A part that is gone is
// re-planned onto the hosts left first (replan); a split that no longer fits fails with
// errSplitFailed.
func (d splitDriver) Load(ctx context.Context, m engines.Model) (engines.Instance, error) {
	a := d.a
	a.mu.RLock()
	pl := a.placements[m.ID]
	a.mu.RUnlock()
	if pl == nil {
		return nil, &engines.Error{Code: api.CodeNotFound, Err: fmt.Errorf("no split placement %s", m.ID)}
	}
	if err := a.partsRunning(ctx, pl); err != nil {
		return nil, err
	}
	a.mu.RLock()
	plan := *pl.p.Split
	plan.Members = append([]api.SplitMember(nil), plan.Members...)
	a.mu.RUnlock()
	a.tunnels.close(m.ID)
	var ends []string
	var shares []float64
	for _, mb := range plan.Devices() {
		end, err := a.tunnels.open(a, m.ID, mb)
		if err != nil {
			a.tunnels.close(m.ID)
			return nil, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("channel to %s's part: %w", mb.Host, err)}
		}
		ends, shares = append(ends, end), append(shares, mb.Share)
	}
	m.RPC, m.TensorSplit = ends, shares
	m.Sent = func() int64 { return a.tunnels.sent(m.ID) }
	stop := a.followSending(pl, m.ID, &plan)
	inst, err := d.Driver.Load(ctx, m)
	stop()
	if err != nil {
		a.tunnels.close(m.ID)
		return nil, err
	}
	a.tunnels.running(m.ID)
	return inst, nil
}

// followSending reports, while a split's llama-server starts, what it has sent its members over
// the channels against the weights of their layers: the long part of a large split's start
// (a 70B's 37 GiB take five minutes over 1 Gbit/s). A member whose rpc-server has the tensors
// in its cache (-c) is sent their hashes instead, and the start ends sooner than the figure
// says. stop ends the reports. id is pl's.
func (a *Agent) followSending(pl *placement, id string, plan *api.SplitPlan) (stop func()) {
	var total int64
	for _, mb := range plan.Members {
		if mb.Host != a.Name() {
			total += mb.Weights
		}
	}
	if total == 0 {
		return func() {} // every layer on this host: nothing crosses
	}
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		var last, told int64
		toldAt, percent := time.Now(), -1
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			sent := a.tunnels.sent(id)
			if sent == last {
				continue
			}
			last = sent
			now := time.Now()
			a.mu.Lock()
			if pl.ctx.Err() == nil && (pl.p.State == api.StateLoading || pl.p.State == api.StateRestarting) {
				pl.p.PulledBytes, pl.p.TotalBytes = min(sent, total), total
				pl.p.Progress = min(0.99, float64(sent)/float64(total))
				pl.p.UpdatedAt = now.UTC()
				a.changedLocked()
				// An event at each whole percent, with the rate since the last: the Events
				// view and mesh watch tell how long the rest will take.
				if p := int(100 * pl.p.Progress); p != percent {
					rate := float64(sent-told) / now.Sub(toldAt).Seconds()
					a.publishLocked(api.EventPlacement, pl, fmt.Sprintf("sending the members their weights: %d%% (%s of %s, %.0f MB/s)",
						p, api.FormatBytes(pl.p.PulledBytes), api.FormatBytes(total), rate/1e6), "")
					percent, told, toldAt = p, sent, now
				}
			}
			a.mu.Unlock()
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// Chat is llama-server's. An answer that breaks off because a member went away names the split
// and the member: the one whose channel broke, or one the mesh shows dead or gone.
func (d splitDriver) Chat(ctx context.Context, m engines.Model, req engines.ChatRequest, emit func(engines.ChatChunk) error) error {
	err := d.Driver.Chat(ctx, m, req, emit)
	if err == nil || ctx.Err() != nil {
		return err
	}
	return d.a.splitLoss(m, err)
}

// splitLoss is err of split m, naming the member lost when one is; err as it is otherwise.
func (a *Agent) splitLoss(m engines.Model, err error) error {
	host := a.tunnels.lostTo(m.ID)
	if host == "" {
		host, _ = a.splitMemberLost(m.ID)
	}
	if host == "" {
		return err
	}
	code := api.CodeEngineError
	var ee *engines.Error
	if errors.As(err, &ee) {
		code, err = ee.Code, ee.Err
	}
	return &engines.Error{Code: code, Err: fmt.Errorf("split %s lost member %s: %w", m.Name, host, err)}
}

// Unload stops llama-server and closes the tunnels; the parts stay (a restart reuses them).
func (d splitDriver) Unload(ctx context.Context, m engines.Model) error {
	err := d.Driver.Unload(ctx, m)
	d.a.tunnels.close(m.ID)
	return err
}

// Health is llama-server's, and no member dead or gone from the mesh view: a member lost is
// noticed at the next check even before llama-server finds out. A member only suspect is not
// lost: suspicion comes and goes with a busy host or a lost probe, and moving a split costs a
// restart; a member that is really cut off breaks the RPC link, which aborts llama-server.
func (d splitDriver) Health(ctx context.Context, m engines.Model) error {
	if err := d.Driver.Health(ctx, m); err != nil {
		return err
	}
	_, err := d.a.splitMemberLost(m.ID)
	return err
}

// splitMemberLost is the first member of split id that is dead, left or gone, and why.
func (a *Agent) splitMemberLost(id string) (string, error) {
	a.mu.RLock()
	pl := a.placements[id]
	var plan *api.SplitPlan
	if pl != nil {
		plan = pl.p.Split
	}
	a.mu.RUnlock()
	if plan == nil {
		return "", nil
	}
	for _, mb := range plan.Members {
		if mb.Layers == 0 || mb.Host == a.Name() {
			continue
		}
		if _, err := a.member(mb.Host); err != nil {
			return mb.Host, &engines.Error{Code: api.CodeUnreachable, Err: fmt.Errorf("split member lost: %w", err)}
		}
	}
	return "", nil
}

// partsRunning waits until every part's rpc-server runs. A part that is gone (its host left,
// died, or dropped it) is re-planned first.
func (a *Agent) partsRunning(ctx context.Context, pl *placement) error {
	deadline := time.Now().Add(partsReady)
	for {
		a.mu.RLock()
		plan := *pl.p.Split
		plan.Members = append([]api.SplitMember(nil), plan.Members...)
		a.mu.RUnlock()
		var gone []string
		waiting := ""
		for i := range plan.Members {
			mb := &plan.Members[i]
			if mb.Layers == 0 {
				continue
			}
			p, err := a.onMember(ctx, mb.Host, http.MethodGet, "/v1/placements/"+url.PathEscape(mb.Part), nil)
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case err != nil || p.State.Terminal():
				gone = append(gone, mb.Host)
			case p.State != api.StateReady:
				waiting = mb.Host + "'s part is " + string(p.State)
			}
			mb.State = p.State
		}
		if len(gone) > 0 {
			if err := a.replan(ctx, pl, gone); err != nil {
				return err
			}
			continue
		}
		if waiting == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("the split's parts did not start within %s: %s", partsReady, waiting)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// replan moves a split off the members in gone: a new plan on the hosts left (and any other
// that fits now), its parts admitted, the old ones released. When nothing fits, every part is
// released and errSplitFailed says why.
func (a *Agent) replan(ctx context.Context, pl *placement, gone []string) error {
	a.mu.RLock()
	old := *pl.p.Split
	old.Members = append([]api.SplitMember(nil), old.Members...)
	c := checked{req: api.PlacementRequest{Source: pl.p.Source, Namespace: pl.p.Namespace, Context: pl.p.Context, Name: pl.p.Model,
		Runtime: api.RuntimeLlamaServer, Split: &api.SplitAsk{MaxRTTMillis: old.MaxRTTMillis}}, src: pl.src}
	full := pl.p.Memory
	own := heldOf(pl.p)
	a.mu.RUnlock()
	full.KV = 0 // the main's own Weights are the token embeddings; the members hold the rest
	for _, m := range old.Members {
		full.Weights += m.Weights
		full.KV += m.KV
	}
	// The weights and KV of every member, which the plan divided, and the main's own parts.
	full.Bytes = full.Weights + full.KV + full.Compute + full.Cache + full.Overhead
	a.releaseParts(&old)
	a.log.Warn("split member lost; re-planning", "placement", pl.p.ID, "lost", gone)
	plan, _, err := a.planSplit(c, full, own, gone...)
	if err == nil {
		err = a.admitParts(ctx, pl, plan)
	}
	if err != nil {
		return fmt.Errorf("%w: %s lost and the hosts left do not hold it: %v", errSplitFailed, strings.Join(gone, ", "), err)
	}
	a.update(pl, func(p *api.Placement) { p.Split = plan })
	a.publish(pl, fmt.Sprintf("split re-planned without %s: %s", strings.Join(gone, ", "), plan.Reason))
	a.saveOrLog()
	return nil
}

// splitDriverFor is the driver of a split's main.
func (a *Agent) splitDriverFor() engines.Driver {
	ld, _ := a.drivers[api.RuntimeLlamaServer].(*llamaserver.Driver)
	return splitDriver{Driver: ld, a: a}
}

// tunnelSet is the main's open tunnels, by placement.
type tunnelSet struct {
	mu sync.Mutex
	by map[string][]*tunnel
	// lost is the member whose channel broke, by placement, until its split runs again: an
	// answer that broke off then names it.
	lost map[string]string
}

// broke records that the channel of split id to host broke.
func (ts *tunnelSet) broke(id, host string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.lost == nil {
		ts.lost = map[string]string{}
	}
	ts.lost[id] = host
}

// lostTo is the member whose channel of split id broke since it last started, or "".
func (ts *tunnelSet) lostTo(id string) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.lost[id]
}

// running forgets a broken channel of split id: it runs again.
func (ts *tunnelSet) running(id string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.lost, id)
}

// sent is what the channels of split id have sent its members since they opened.
func (ts *tunnelSet) sent(id string) int64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var n int64
	for _, t := range ts.by[id] {
		n += t.sent.Load()
	}
	return n
}

func (ts *tunnelSet) close(id string) {
	ts.mu.Lock()
	all := ts.by[id]
	delete(ts.by, id)
	ts.mu.Unlock()
	for _, t := range all {
		t.close()
	}
}

func (ts *tunnelSet) closeAll() {
	ts.mu.Lock()
	ids := make([]string, 0, len(ts.by))
	for id := range ts.by {
		ids = append(ids, id)
	}
	ts.mu.Unlock()
	for _, id := range ids {
		ts.close(id)
	}
}

func (ts *tunnelSet) add(id string, t *tunnel) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.by == nil {
		ts.by = map[string][]*tunnel{}
	}
	ts.by[id] = append(ts.by[id], t)
}

// JoinMesh gives the agent the mesh view and its side of the sealed channel, which split
// placements need; called before Run. Without it the agent refuses splits.
func (a *Agent) JoinMesh(view func() api.MeshView, id *seal.Identity) {
	a.view, a.hop = view, hop.NewClient(0, id, nil)
}

// startSplitLocked admits the parts of a split just admitted here (pl holds its reservation):
// a.mu is let go for the calls to the members, and taken again. A refusal by any member drops
// pl and every part admitted, and is the split's refusal.
func (a *Agent) startSplitLocked(ctx context.Context, pl *placement, plan *api.SplitPlan) error {
	pl.p.TTL = "-1" // a split does not sleep: its parts hold their shares on every member
	pl.driver = a.splitDriverFor()
	a.mu.Unlock()
	err := a.admitParts(ctx, pl, plan) // fills in the parts' ids: plan is not shown before
	a.mu.Lock()
	if err != nil {
		delete(a.placements, pl.p.ID)
		a.changedLocked()
		return err
	}
	pl.p.Split = plan
	a.changedLocked()
	a.publishLocked(api.EventPlacement, pl, "split: "+plan.Reason, "")
	return nil
}

// splitFindings are the doctor's findings about the splits this host is the main of: a member
// the mesh no longer shows alive, or one whose RPC protocol is not the split's.
func (a *Agent) splitFindings(ps []api.Placement) []api.Finding {
	if a.view == nil {
		return nil
	}
	var out []api.Finding
	var view api.MeshView
	for _, p := range ps {
		if p.Split == nil || p.State.Terminal() {
			continue
		}
		if view.Members == nil {
			view = a.view()
		}
		for _, m := range p.Split.Members {
			if m.Layers == 0 || m.Host == a.Name() {
				continue
			}
			problem := ""
			mb, ok := findMember(view, m.Host)
			switch {
			case !ok || mb.Liveness != api.Alive:
				problem = fmt.Sprintf("split %q (namespace %s) on %s is missing its member %s (%d of %d layers): the host is %s", p.Model, p.Namespace, a.Name(), m.Host, m.Layers, p.Split.Layers, cmp.Or(string(mb.Liveness), "gone from the mesh"))
			case mb.Host != nil && mb.Host.RPCProtocol() != p.Split.Protocol:
				problem = fmt.Sprintf("split %q (namespace %s) on %s: member %s runs RPC protocol %q, the split %q", p.Model, p.Namespace, a.Name(), m.Host, mb.Host.RPCProtocol(), p.Split.Protocol)
			}
			if problem != "" {
				out = append(out, api.Finding{Severity: api.SeverityError, Problem: problem, Namespace: p.Namespace,
					Fix: fmt.Sprintf("bring %s back (with the same llama.cpp build), or delete placement %s and place the model again: the main re-plans onto the hosts left when it restarts", m.Host, p.ID)})
			}
		}
	}
	return out
}

func findMember(v api.MeshView, name string) (api.Member, bool) {
	for _, m := range v.Members {
		if m.Name == name {
			return m, true
		}
	}
	return api.Member{}, false
}
