// Package console is the one action layer behind the interactive console and the headless
// `llmkube-tui mesh …` commands: connect to the mesh, read its picture, rank, place, wait,
// delete, chat, watch events and ask the doctor. Both front ends call these functions, so they
// cannot drift apart.
//
// A console reaches the mesh in one of two ways: as a member (it joins the gossip mesh with the
// console role and sees what every agent sees within a gossip round) or through one agent's API
// (--agent URL, across subnets, without joining). Actions always go to the agents' HTTP API: a
// member calls each host's agent itself; through an agent, every call goes to that agent, which
// forwards a call for another host to it (api.HostHeader) and whose gateway serves every chat.
package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/internal/backoff"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh/discovery"
	"github.com/llmkube/mesh/mesh/rank"
)

// Options says how to reach the mesh.
type Options struct {
	// Join is the mesh's join string; with it the console joins as a member (unless AgentURL is
	// set) and, when Token is empty, uses the mesh's admin token.
	Join string
	// Token is the API token (admin or namespace).
	Token string
	// AgentURL watches and acts through one agent's API without joining the mesh.
	AgentURL string
	// CAFile is the mesh's CA certificate (llmkube-agent ca), for reaching agents over TLS
	// without the join string (a namespace token holder); the join string derives it itself.
	CAFile string
	// InsecureHTTP lets an http:// AgentURL cross the network in plain (an agent run with
	// --lan-http); without it only loopback is called in plain.
	InsecureHTTP bool
	// Seeds are gossip addresses to join (member mode); they add to the join string's seeds.
	Seeds []string
	// MDNS turns on mDNS discovery in member mode (off by default in tests and the demo).
	MDNS          bool
	MDNSInterface string
	// NodeName names this console in the mesh ("" = from the host name).
	NodeName string
	// Bind is the gossip address the console listens on, so agents can reach it: "" binds
	// loopback when every seed is on loopback (one machine: tests, the demo), else every
	// interface. The port is always chosen by the system.
	Bind string
	// Profile is the memberlist timing profile: "lan" (default), "wan" or "local".
	Profile string
	// Poll is how often agent mode re-reads the agent's view (default 1 s).
	Poll time.Duration
	// Timeout bounds each API call (default 10 s).
	Timeout time.Duration
	Log     *slog.Logger
}

// Mode is how a console reaches the mesh. The demo is not a mode of its own: llmkube-demo starts
// a mesh and joins it as a member, as a console joins any mesh.
type Mode string

const (
	// ModeMember joins the mesh by gossip (a join string): the console sees every member's
	// state itself and calls the agents' APIs.
	ModeMember Mode = "member"
	// ModeAgent watches and acts through one agent's API (--agent) without joining: that agent
	// is the console's whole picture, polled.
	ModeAgent Mode = "agent"
)

// Mode is how these options reach the mesh: through an agent when AgentURL is set, else as a
// member when a join string is given.
func (o Options) Mode() (Mode, error) {
	switch {
	case o.AgentURL != "":
		return ModeAgent, nil
	case o.Join != "":
		return ModeMember, nil
	}
	return "", errors.New("nothing to connect to: give a join string (--join-string, LLMKUBE_JOIN or --join-file) or --agent URL")
}

// ErrNoAgents means the view holds no agent that could serve the action.
var ErrNoAgents = errors.New("no reachable agent in the mesh")

// feed is where a console's picture of the mesh comes from.
type feed interface {
	view() api.MeshView
	doctor(ctx context.Context) Doctor
	close(ctx context.Context) error
}

// Conn is a live connection to the mesh.
type Conn struct {
	opts  Options
	token string
	src   feed
	log   *slog.Logger
	mode  Mode
	bell  *notifier

	transport *http.Transport   // shared by every client, so connections are reused
	agent     *apiclient.Client // in agent mode, the one agent every call goes to
	scheme    string            // agents' API addresses are called with: https when sealed

	mu      sync.Mutex
	clients map[string]*apiclient.Client // by API address (member mode) or host name (agent mode)
}

// Connect reaches the mesh as Options say. In agent mode it checks the agent answers before
// returning; in member mode it returns once memberlist is up (peers may still be joining).
func Connect(ctx context.Context, opts Options) (*Conn, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	c := &Conn{opts: opts, token: opts.Token, log: opts.Log, clients: map[string]*apiclient.Client{}, bell: newNotifier()}
	c.transport = http.DefaultTransport.(*http.Transport).Clone()
	c.transport.DialContext = discovery.DialContext(opts.MDNSInterface)
	var join api.Join
	var id *seal.Identity
	if opts.Join != "" {
		j, err := api.ParseJoin(opts.Join)
		if err != nil {
			return nil, err
		}
		join = j
		if c.token == "" {
			c.token = api.AdminToken(j.Secret)
		}
		if id, err = consoleIdentity(j, opts.NodeName); err != nil {
			return nil, err
		}
	}
	if err := c.sealTransport(id, opts.CAFile); err != nil {
		return nil, err
	}
	c.scheme = "http"
	if id != nil || opts.CAFile != "" {
		c.scheme = "https"
	}
	mode, err := opts.Mode()
	if err != nil {
		return nil, err
	}
	switch mode {
	case ModeAgent:
		u, err := agentURL(opts.AgentURL, c.scheme == "https", opts.InsecureHTTP)
		if err != nil {
			return nil, err
		}
		c.agent = c.newClient(u)
		src, err := newAgentSource(ctx, c.agent, opts.Poll, opts.Timeout, c.bell, opts.Log)
		if err != nil {
			return nil, err
		}
		c.setSource(src)
	case ModeMember:
		src, err := newMemberSource(ctx, join, opts, id, c.bell)
		if err != nil {
			return nil, err
		}
		c.setSource(src)
	}
	c.mode = mode
	return c, nil
}

// Mode is how the connection reaches the mesh.
func (c *Conn) Mode() Mode { return c.mode }

// Token is the API token actions use.
func (c *Conn) Token() string { return c.token }

// View is the latest picture of the mesh.
func (c *Conn) View() api.MeshView { return c.src.view() }

// Subscribe returns a channel that receives after each change of the view, coalesced (a slow
// reader misses nothing but intermediate states: it reads View() when woken), and a cancel func.
func (c *Conn) Subscribe() (<-chan struct{}, func()) { return c.bell.subscribe() }

// Close leaves the mesh gracefully (member mode) and stops polling.
func (c *Conn) Close(ctx context.Context) error { return c.src.close(ctx) }

// Client returns an API client for a host of the view.
func (c *Conn) Client(host string) (*apiclient.Client, error) {
	v := c.View()
	for _, m := range v.Members {
		if m.Name == host && m.Host != nil {
			return c.clientOf(v, m), nil
		}
	}
	return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("host %q is not in the mesh", host)}
}

// clientOf is the API client for member m of view v: its own agent's in member mode; in agent
// mode the agent's, for m itself or, for another host, marked for that host (api.HostHeader),
// so the agent forwards it — the console never dials a host but that agent.
func (c *Conn) clientOf(v api.MeshView, m api.Member) *apiclient.Client {
	if c.agent == nil {
		return c.cached(m.Host.APIAddr, func() *apiclient.Client { return c.newClient(m.Host.APIAddr) })
	}
	if m.Name == v.Self {
		return c.agent
	}
	return c.cached(m.Name, func() *apiclient.Client {
		cl := apiclient.New(c.agent.BaseURL, c.token)
		cl.HTTP = &http.Client{Transport: forHost{base: c.transport, host: m.Name}}
		return cl
	})
}

func (c *Conn) cached(key string, make func() *apiclient.Client) *apiclient.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.clients[key]
	if !ok {
		cl = make()
		c.clients[key] = cl
	}
	return cl
}

// forHost marks every call it carries as one for host (api.HostHeader).
type forHost struct {
	base http.RoundTripper
	host string
}

func (f forHost) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(api.HostHeader, f.host)
	return f.base.RoundTrip(r)
}

// newClient is an API client whose dials resolve .local names over mDNS: Go's own resolver, the
// only one in a static build, never asks mDNS.
func (c *Conn) newClient(addr string) *apiclient.Client {
	if !strings.Contains(addr, "://") {
		addr = c.scheme + "://" + addr
	}
	cl := apiclient.New(addr, c.token)
	cl.HTTP = &http.Client{Transport: c.transport}
	return cl
}

func (c *Conn) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.Timeout)
}

// Agents returns the alive agents of the view, sorted by name.
func Agents(v api.MeshView) []api.Member {
	var out []api.Member
	for _, m := range v.Members {
		if m.Role == api.RoleAgent && m.Host != nil && m.Liveness == api.Alive {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LoadedOn is the model on host's one-model device (a Hailo-10H) as the mesh last said, which
// a swap there replaces; "" when none.
func LoadedOn(v api.MeshView, host string) string {
	for _, mb := range v.Members {
		if mb.Name != host || mb.Host == nil {
			continue
		}
		for _, acc := range mb.Host.Accelerators {
			if acc.Loaded != "" {
				return acc.Loaded
			}
		}
	}
	return ""
}

// Placements returns every placement in the view, sorted by host then model.
func Placements(v api.MeshView) []api.Placement {
	var out []api.Placement
	for _, m := range v.Members {
		out = append(out, m.Placements...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Host != out[j].Host {
			return out[i].Host < out[j].Host
		}
		return out[i].Model < out[j].Model
	})
	return out
}

// FindPlacement finds a placement by id, or by unique id prefix, or by model name when only one
// placement serves it.
func FindPlacement(v api.MeshView, ref string) (api.Placement, error) {
	return findIn(Placements(v), ref)
}

func findIn(ps []api.Placement, ref string) (api.Placement, error) {
	var hits []api.Placement
	for _, p := range ps {
		if p.ID == ref {
			return p, nil
		}
		if strings.HasPrefix(p.ID, ref) || p.Model == ref {
			hits = append(hits, p)
		}
	}
	switch len(hits) {
	case 0:
		return api.Placement{}, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no placement %q in the mesh", ref)}
	case 1:
		return hits[0], nil
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID + " (" + h.Model + " on " + h.Host + ")"
	}
	return api.Placement{}, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("%q matches %d placements: %s", ref, len(hits), strings.Join(ids, ", "))}
}

// Ranking is a fit preview: the size and every host's verdict, best first.
type Ranking struct {
	Estimate api.SizeEstimate `json:"estimate"`
	SizedBy  string           `json:"sized_by"` // host whose agent sized the source
	// SizeError is why the size is unknown, in the sizer's words (a registry it could not
	// reach, a file it could not read): the cause reaches the user, not only the agent's log.
	SizeError string       `json:"size_error,omitempty"`
	SizeCode  api.Code     `json:"size_code,omitempty"` // its cause: NotFound for no such model
	Hosts     []api.Ranked `json:"hosts"`
}

// Best is the first host that fits or swaps, if any.
func (r Ranking) Best() (api.Ranked, bool) {
	for _, h := range r.Hosts {
		if h.Verdict != api.VerdictRefused {
			return h, true
		}
	}
	return api.Ranked{}, false
}

// Rank sizes the request on an agent (the source's size does not depend on who asks, except for
// files only one host has: a host that answers refuses nothing here) and ranks every host.
func (c *Conn) Rank(ctx context.Context, req api.PlacementRequest, spread bool) (Ranking, error) {
	v := c.View()
	agents := agentsFor(v, req)
	if len(agents) == 0 {
		return Ranking{}, ErrNoAgents
	}
	var firstErr error
	for _, a := range agents {
		cctx, cancel := c.callCtx(ctx)
		est, err := c.clientOf(v, a).Estimate(cctx, req)
		cancel()
		if err != nil {
			var apiErr *api.Error
			if errors.As(err, &apiErr) && apiErr.Code == api.CodeInvalidSource {
				return Ranking{}, err
			}
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		// A source that is wrong in itself is wrong everywhere: say so rather than rank hosts
		// against a size nobody could know.
		if est.Verdict == api.VerdictRefused && est.Code == api.CodeInvalidSource {
			return Ranking{}, &api.Error{Code: est.Code, Message: est.Reason}
		}
		r := Ranking{Estimate: est.Estimate, SizedBy: a.Name}
		if est.Estimate.Bytes <= 0 && est.Verdict == api.VerdictRefused {
			r.SizeError, r.SizeCode = est.Reason, est.Code
		}
		r.Hosts = rank.Rank(v.Members, r.Request(req, spread))
		return r, nil
	}
	return Ranking{}, firstErr
}

// agentsFor are the view's agents, those that can run req first: a source is sized by the
// agent asked, and a hailo:// source only where hailo-ollama's manifests live.
func agentsFor(v api.MeshView, req api.PlacementRequest) []api.Member {
	agents := Agents(v)
	sort.SliceStable(agents, func(i, j int) bool {
		return canRun(agents[i], req) && !canRun(agents[j], req)
	})
	return agents
}

// canRun is a cheap guess at whether an agent has the runtime a request needs.
func canRun(m api.Member, req api.PlacementRequest) bool {
	want := req.Runtime
	if want == "" {
		want = source.RuntimeOf(req.Source)
	}
	for _, e := range m.Host.Engines {
		if e.Runtime == want && e.Present {
			return true
		}
	}
	return false
}

// Place asks host to run the request. host "" picks the best host of a ranking.
func (c *Conn) Place(ctx context.Context, host string, req api.PlacementRequest) (api.Placement, error) {
	if host == "" {
		r, err := c.Rank(ctx, req, false)
		if err != nil {
			return api.Placement{}, err
		}
		best, ok := r.Best()
		if !ok {
			return api.Placement{}, r.Refusal()
		}
		host = best.Host
	}
	cl, err := c.Client(host)
	if err != nil {
		return api.Placement{}, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	return cl.Place(cctx, req)
}

// Wait follows a placement until it is ready or has failed (api.Placement.Outcome): the one
// wait of `place --wait` and the Place view, looking every lookEvery, each look bounded by
// apiclient.WaitLookTimeout (apiclient.Client.FollowPlacement). look hears each change and each failed
// look, and decides whether a failed look ends the wait: a script's does (nobody is there to
// give up on a host that stopped answering); the Place view's asks again and shows why. A
// placement gone from its host (deleted) ends the wait with its CodeNotFound error. A ready
// placement is returned once the mesh routes it (routed): a chat through any agent finds it.
func (c *Conn) Wait(ctx context.Context, p api.Placement, look func(api.Placement, error) error) (api.Placement, error) {
	cl, err := c.Client(p.Host)
	if err != nil {
		return p, err
	}
	p, err = cl.FollowPlacement(ctx, p.ID, lookEvery, look)
	if err == nil && p.State == api.StateReady {
		c.routed(ctx, p)
	}
	return p, err
}

// lookEvery is how often Wait looks at a placement.
const lookEvery = 200 * time.Millisecond

// routeWait bounds how long a ready placement waits for the other agents to route it: their
// views learn of it within a gossip round or two (0.14-0.45 s on loopback, issue 42); one
// slower than this has a problem of its own, which the doctor tells.
const routeWait = 10 * time.Second

// routed waits until every alive agent routes p — its own view (GET /v1/mesh, asked of it, or
// through the agent in agent mode) shows p ready — so a script that places with --wait and then
// chats through any agent's gateway is not told 404 model_not_found or 503 "loading" meanwhile.
// An agent that does not answer is not waited for, nor is the whole longer than routeWait.
func (c *Conn) routed(ctx context.Context, p api.Placement) {
	ctx, cancel := context.WithTimeout(ctx, routeWait)
	defer cancel()
	t := time.NewTicker(routeEvery)
	defer t.Stop()
	for {
		v := c.View()
		all := true
		for _, a := range Agents(v) {
			if a.Name == p.Host {
				continue // the owner routes what it serves
			}
			cctx, ccancel := c.callCtx(ctx)
			av, err := c.clientOf(v, a).Mesh(cctx)
			ccancel()
			if err == nil && !readyIn(av, p) {
				all = false
				break
			}
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			c.log.Info("placement ready, but not every agent routes it yet", "placement", p.ID, "err", ctx.Err())
			return
		case <-t.C:
		}
	}
}

// routeEvery is how often routed asks the agents again.
const routeEvery = 20 * time.Millisecond

// readyIn reports whether view v shows placement p ready on an alive member.
func readyIn(v api.MeshView, p api.Placement) bool {
	for _, m := range v.Members {
		if m.Name != p.Host || m.Liveness != api.Alive {
			continue
		}
		for _, q := range m.Placements {
			if q.ID == p.ID && q.State == api.StateReady {
				return true
			}
		}
	}
	return false
}

// Delete stops and removes a placement, found by id, id prefix or unique model name.
func (c *Conn) Delete(ctx context.Context, ref string) (api.Placement, error) {
	p, err := FindPlacement(c.View(), ref)
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Code == api.CodeNotFound {
		// Just placed, perhaps, and not in this picture yet (gossip, or the agent mode's
		// poll): ask the agents themselves.
		p, err = c.findLive(ctx, ref)
	}
	if err != nil {
		return p, err
	}
	cl, err := c.Client(p.Host)
	if err != nil {
		return p, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	return p, cl.Delete(cctx, p.ID)
}

// findLive looks a placement up in every alive agent's own list.
func (c *Conn) findLive(ctx context.Context, ref string) (api.Placement, error) {
	var all []api.Placement
	v := c.View()
	for _, a := range Agents(v) {
		cctx, cancel := c.callCtx(ctx)
		ps, err := c.clientOf(v, a).Placements(cctx)
		cancel()
		if err == nil {
			all = append(all, ps...)
		}
	}
	return findIn(all, ref)
}

// ChatTarget picks the agent to send a chat to: the owner of a ready placement of the model when
// there is one (no forwarding hop), else any alive agent (its gateway forwards).
func ChatTarget(v api.MeshView, model string) (api.Member, error) {
	agents := Agents(v)
	if len(agents) == 0 {
		return api.Member{}, ErrNoAgents
	}
	for _, a := range agents {
		for _, p := range a.Placements {
			if p.QualifiedName() == model && p.State == api.StateReady {
				return a, nil
			}
		}
	}
	return agents[0], nil
}

// Chat streams an answer from model through the gateway. Cancelling ctx cancels the generation.
// In agent mode the agent's own gateway takes it, and forwards it to the model's owner.
func (c *Conn) Chat(ctx context.Context, model string, msgs []apiclient.ChatMessage, opt apiclient.ChatOptions, emit func(apiclient.ChatDelta) error) (host string, err error) {
	target, err := ChatTarget(c.View(), model)
	if err != nil {
		return "", err
	}
	cl := c.agent
	if cl == nil {
		cl = c.clientOf(c.View(), target)
	}
	started := false
	err = cl.ChatStream(ctx, model, msgs, opt, func(d apiclient.ChatDelta) error {
		started = started || d.Content != ""
		return emit(d)
	})
	if err != nil {
		err = BrokenStream(c.View(), target.Name, err, started)
	}
	return target.Name, err
}

// Events merges the events of every alive agent (and, in member mode, the mesh's own) into one
// stream until ctx ends. Agents that appear later are followed too; a broken stream is retried.
// ready, when not nil, is called once every agent there at the start has subscribed (or failed
// its first try): from then on no event of theirs is missed.
func (c *Conn) Events(ctx context.Context, ready func(), emit func(api.Event)) {
	var mu sync.Mutex
	out := func(ev api.Event) {
		mu.Lock()
		defer mu.Unlock()
		emit(ev)
	}
	following := map[string]context.CancelFunc{}
	var wg, first sync.WaitGroup
	// Nothing is emitted, and ready is not called, after Events returns.
	defer wg.Wait()
	follow := func(initial bool) {
		v := c.View()
		for _, a := range Agents(v) {
			cl := c.clientOf(v, a)
			key := a.Name + " " + a.Host.APIAddr
			if _, ok := following[key]; ok {
				continue
			}
			fctx, cancel := context.WithCancel(ctx)
			following[key] = cancel
			settled := func() {}
			if initial {
				first.Add(1)
				settled = sync.OnceFunc(first.Done)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer settled()
				c.followEvents(fctx, cl, settled, out)
			}()
		}
	}
	changed, stop := c.Subscribe()
	defer stop()
	follow(true)
	if ready != nil {
		wg.Go(func() {
			first.Wait()
			if ctx.Err() == nil {
				ready()
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			follow(false)
		}
	}
}

// followEvents streams one agent's events until ctx ends, resuming after the last one seen when
// the stream breaks. settled is called when the first stream opens or the first try fails.
func (c *Conn) followEvents(ctx context.Context, cl *apiclient.Client, settled func(), emit func(api.Event)) {
	var last uint64
	retry := backoff.New(200*time.Millisecond, 5*time.Second)
	for ctx.Err() == nil {
		err := cl.Events(ctx, last, settled, func(ev api.Event) error {
			last = ev.Seq
			emit(ev)
			return nil
		})
		settled()
		if ctx.Err() != nil {
			return
		}
		c.log.Debug("event stream ended", "agent", cl.BaseURL, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry.Next()):
		}
	}
}
