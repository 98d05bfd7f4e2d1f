// Package gateway is the agent's mesh-wide OpenAI- and Ollama-compatible front door. Any
// client pointed at any agent reaches a model wherever it runs: a request for a model this host
// serves goes to the local engine through its driver; one for a model another agent serves is
// forwarded there, streaming, with the caller's own token (the owner checks it again).
//
// Nothing buffers: every chunk is written and flushed as the engine produces it, and a client
// that goes away cancels the engine's work at once. Each request is measured (time to first
// token, tokens per second) into the placement's rolling figures, which travel in the node's
// state document, and into Prometheus metrics.
package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/prom"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/version"
)

// HopHeader marks a request one agent forwarded to another. The owner serves such a request
// only from its own engines: a forwarded request is never forwarded again, so a stale view on
// two agents cannot bounce a request between them. A client that sets it only loses forwarding.
const HopHeader = "X-Llmkube-Hop"

// internalPrefix starts every header the gateway uses between agents; they are stripped from
// what a client sends and from what an owner answers.
const internalPrefix = "X-Llmkube-"

// Defaults of Config.
const (
	DefaultQueueDepth   = 8
	DefaultMaxBody      = 8 << 20
	DefaultStallTimeout = 30 * time.Second
	// DefaultOwnerGrace is how long a forwarded request waits on an owner the mesh suspects:
	// longer than a busy host takes to refute a false suspicion, well short of a dead host's
	// declaration on a large mesh.
	DefaultOwnerGrace = 2 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for an owner's answer to begin. An owner
	// sends its headers with the first token of a stream, or with the whole answer otherwise,
	// after any queue on its engine: this is a backstop for an owner alive in gossip whose API
	// hangs. A host that drops off the network is caught by the liveness watch, in seconds.
	DefaultResponseHeaderTimeout = 5 * time.Minute
)

// View is what the gateway reads of the mesh. *mesh.Mesh satisfies it, answering each call
// from the mesh's state at that moment, without building a whole view (a relaying agent asks
// per request, and building one copied every member's state); mesh.View, a snapshot, does too.
type View interface {
	// Ready lists the placements serving model that can take a request now (state ready, on an
	// alive agent whose API answers); namespace "" matches every namespace.
	Ready(namespace, model string) []api.Placement
	// Member finds a member by node name (for its API address).
	Member(name string) (api.Member, bool)
	// Placements lists every placement of every member, unavailable ones included.
	Placements() []api.Placement
}

// Config builds a Gateway.
type Config struct {
	// Agent serves the local placements and keeps their rolling speed figures.
	Agent *agent.Agent
	// View returns what the gateway reads of the mesh (the mesh itself); nil, or a nil View,
	// serves this host's placements only.
	View func() View
	// Self is this agent's node name in the mesh; Agent.Name() when empty.
	Self string
	Log  *slog.Logger
	// Registerer receives the gateway's metrics; nil = the agent's own registry.
	Registerer prom.Registerer
	// QueueDepth is how many requests may wait for an engine that serves one at a time
	// (hailo-ollama) behind the one it is serving; more are answered 429 with Retry-After.
	QueueDepth int
	// MaxBody bounds a request body; a larger one is answered 413.
	MaxBody int64
	// StallTimeout cuts a client that has not taken a written chunk for this long, so a reader
	// that stopped reading cannot hold an engine.
	StallTimeout time.Duration
	// Version is what GET /api/version reports; the product's version when empty.
	Version string
	// Liveness reports a member's liveness now, as the mesh view shows it (mesh.Mesh.Liveness),
	// false when the view does not know it; nil does not watch owners. While a request is
	// forwarded its owner is watched: dead, left or forgotten ends the request at once, suspect
	// or unreachable for OwnerGrace ends it then — with an error status before the answer
	// began (and the next replica is tried), with an error in the stream after.
	Liveness func(host string) (api.Liveness, bool)
	// OwnerGrace: see Liveness; DefaultOwnerGrace when zero.
	OwnerGrace time.Duration
	// ResponseHeaderTimeout bounds the wait for a forwarded request's answer to begin;
	// DefaultResponseHeaderTimeout when zero.
	ResponseHeaderTimeout time.Duration
	// Seal carries hops to other agents over the mesh's sealed channel (internal/seal), where
	// each hop asserts its caller's principal instead of passing the caller's token on; nil
	// sends hops in plain HTTP with the token (in-process tests on loopback).
	Seal *seal.Identity
}

// Gateway serves the chat and model-listing routes.
type Gateway struct {
	cfg    Config
	a      *agent.Agent
	self   string
	log    *slog.Logger
	hop    *hopClient
	owners *owners
	m      *metrics
	// localLast: the last chat's first replica was a local one (see chat).
	localLast atomic.Bool

	// mu guards the maps below. Every chat reads inflight and speeds, so they are read under
	// the shared lock: a mutex there was the gateway's most waited-on lock at 64 streams.
	mu       sync.RWMutex
	inflight map[replica]*atomic.Int64
	// alone: when the mesh view, last looked at for a model (by namespace scope) while its
	// local replicas were busy, showed no ready replica of it on another agent (see candidates).
	alone  map[aloneKey]time.Time
	queues map[string]*queue     // by runtime + " " + engine address
	speeds map[string]*speedBook // by local placement id
	items  *itemStore            // answers given through /v1/responses, for item_reference
}

// New builds a gateway and registers its metrics.
func New(cfg Config) (*Gateway, error) {
	if cfg.Agent == nil {
		return nil, errors.New("gateway: no agent")
	}
	if cfg.QueueDepth <= 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.OwnerGrace <= 0 {
		cfg.OwnerGrace = DefaultOwnerGrace
	}
	if cfg.ResponseHeaderTimeout <= 0 {
		cfg.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = version.Get().Version
	}
	if cfg.Self == "" {
		cfg.Self = cfg.Agent.Name()
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = cfg.Agent.Metrics().Registry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		cfg: cfg, a: cfg.Agent, self: cfg.Self, log: cfg.Log.With("component", "gateway"), hop: newHopClient(cfg.Seal), m: m,
		inflight: map[replica]*atomic.Int64{},
		alone:    map[aloneKey]time.Time{},
		queues:   map[string]*queue{},
		speeds:   map[string]*speedBook{},
		items:    newItemStore(),
	}
	g.owners = &owners{g: g, hosts: map[string]*owner{}}
	return g, nil
}

// Register mounts the gateway's routes. Pass the agent server's Mount, which puts them behind
// bearer-token authentication (every handler reads the caller with agent.PrincipalFrom) and
// answers a refused token in the route's dialect. Routes the gateway does not have, under
// /v1/ and /api/, are answered in OpenAI's and Ollama's error shapes, so a client shows the
// message instead of "[object Object]".
//
// Every gateway route lists models or runs them, so each is open to the agent's anonymous
// namespace when the operator set one (agent.Config.AnonymousNamespace); nothing that places,
// deletes or pulls is among them.
func (g *Gateway) Register(mount func(pattern string, h http.Handler, r agent.Route)) {
	oa := agent.Route{Deny: denier(dialectOpenAI), Anonymous: true}
	ol := agent.Route{Deny: denier(dialectOllamaChat), Anonymous: true}
	mount("GET /v1/models", http.HandlerFunc(g.openAIModels), oa)
	mount("GET /v1/models/{id...}", http.HandlerFunc(g.openAIModel), oa)
	mount("POST /v1/chat/completions", http.HandlerFunc(g.openAIChat), oa)
	mount("POST /v1/responses", http.HandlerFunc(g.openAIResponses), oa)
	mount("POST /v1/embeddings", http.HandlerFunc(g.openAIEmbeddings), oa)
	mount("POST /v1/completions", http.HandlerFunc(g.openAICompletions), oa)
	mount("GET /api/tags", http.HandlerFunc(g.ollamaTags), ol)
	mount("GET /api/ps", http.HandlerFunc(g.ollamaPS), ol)
	mount("GET /api/version", http.HandlerFunc(g.ollamaVersion), ol)
	mount("POST /api/show", http.HandlerFunc(g.ollamaShow), ol)
	mount("POST /api/chat", http.HandlerFunc(g.ollamaChat), ol)
	mount("POST /api/generate", http.HandlerFunc(g.ollamaGenerate), ol)
	mount("POST /api/embed", http.HandlerFunc(g.ollamaEmbed), ol)
	mount("POST /api/embeddings", http.HandlerFunc(g.ollamaEmbeddings), ol)
	mount("GET /hailo/v1/list", http.HandlerFunc(g.hailoList), ol)
	// Ollama's clients (Open WebUI, ollama-python's health checks, hailo-ollama CLIs) ask GET /
	// whether a server is there, without a token, and look for these words. It tells nothing
	// else: every other route needs a token.
	mount("GET /{$}", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "Ollama is running")
	}), agent.Route{Public: true})
	mount("/v1/", noRoute(dialectOpenAI), agent.Route{Public: true})
	mount("/api/", noRoute(dialectOllamaChat), agent.Route{Public: true})
}

// denier answers a refused token in dialect d.
func denier(d dialect) func(http.ResponseWriter, *api.Error) {
	return func(w http.ResponseWriter, e *api.Error) {
		writeFailure(w, d, &failure{status: http.StatusUnauthorized, code: e.Code, oaCode: "invalid_api_key", msg: e.Message})
	}
}

// noRoute answers a path the gateway does not serve: 404 in dialect d, saying what was asked.
func noRoute(d dialect) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeFailure(w, d, &failure{status: http.StatusNotFound, code: api.CodeNotFound, oaCode: "unknown_url",
			msg: fmt.Sprintf("no route %s %s on this gateway", r.Method, sanitizePath(r.URL.Path))})
	})
}

// sanitizePath keeps a requested path printable and short for an error message.
func sanitizePath(p string) string {
	p = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(p, ""))
	if len(p) > 200 {
		p = strings.ToValidUTF8(p[:200], "") + "…"
	}
	return p
}

// principal is the authenticated caller. A request that reached a gateway route without one
// (a mount outside the authentication middleware) gets no access at all.
func principal(r *http.Request) (api.Principal, bool) {
	return agent.PrincipalFrom(r.Context())
}

// nsFilter is the namespace filter a principal's lookups use: "" (every namespace) for the admin.
func nsFilter(who api.Principal) string {
	if who.Admin {
		return ""
	}
	return who.Namespace
}

// replica names one placement on one host.
type replica struct{ host, id string }

// counter returns the in-flight counter of one placement.
func (g *Gateway) counter(host, id string) *atomic.Int64 {
	key := replica{host, id} // not a joined string: no allocation per look-up
	g.mu.RLock()
	c, ok := g.inflight[key]
	g.mu.RUnlock()
	if ok {
		return c
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok = g.inflight[key]; !ok {
		c = new(atomic.Int64)
		g.inflight[key] = c
	}
	return c
}

// candidate is one replica a request may go to.
type candidate struct {
	p     api.Placement
	local *agent.Local // nil: on another agent
	busy  *atomic.Int64
	load  int64 // busy at the time of choosing
}

// candidates lists the replicas of model the caller may use, least busy first. Local ones come
// from the agent; remote ones from the mesh view (never for a forwarded request). Busy is what
// this gateway knows: requests it is serving on a local placement (queued ones included), or
// forwards in flight to a remote one. Other agents' traffic to a remote replica is invisible
// here; measured speed breaks ties.
//
// Unless all, the remote replicas are not looked up (narrow) when a local one is idle: it would
// lead whatever they are (no load is below none, and local wins a tie), and looking means taking
// every member's state under the mesh's lock; nor, while local ones are busy, when a look
// less than aloneRecheck ago found none on another agent (see aloneRecheck).
func (g *Gateway) candidates(who api.Principal, model string, forwarded bool, v View, all bool) (out []candidate, narrow bool) {
	locals := g.a.Serving(who, model)
	for i := range locals {
		l := &locals[i] // not a copy: a Local is 700 bytes, and the range variable's address would move each to the heap
		c := candidate{p: l.Placement, local: l, busy: g.counter(l.Placement.Host, l.Placement.ID)}
		c.load = c.busy.Load()
		narrow = narrow || c.load == 0
		out = append(out, c)
	}
	narrow = narrow && !all && !forwarded && v != nil
	nlocal := len(out)
	key := aloneKey{nsFilter(who), model}
	if !narrow && !all && !forwarded && v != nil && nlocal > 0 && g.aloneLately(key) {
		narrow = true
	}
	if !forwarded && v != nil && !narrow {
		for _, p := range v.Ready(nsFilter(who), model) {
			if p.Host == g.self || !who.Allows(p.Namespace) {
				continue
			}
			c := candidate{p: p, busy: g.counter(p.Host, p.ID)}
			c.load = c.busy.Load()
			out = append(out, c)
		}
		if nlocal > 0 {
			g.lookedFor(key, len(out) > nlocal)
		}
	}
	slices.SortStableFunc(out, func(a, b candidate) int {
		return cmp.Or(
			cmp.Compare(a.load, b.load),
			boolOrder(a.local == nil, b.local == nil), // a local replica saves a hop
			cmp.Compare(b.p.TokensPerS, a.p.TokensPerS),
			cmp.Compare(a.p.TTFTMillis, b.p.TTFTMillis),
		)
	})
	return out, narrow
}

// aloneRecheck is how long a look at the mesh view that found no ready replica of a model on
// another agent, while this one's were busy, stands for the chats after it. Each look walks
// every member's state under the mesh's lock (it copied it all when this was measured), and with
// hundreds of simultaneous streams of a model served here alone one per chat was a measurable
// part of the agent's cost (BENCHMARKS.md).
// A replica that becomes ready elsewhere is then taken into account up to this much later, on
// top of the gossip that announced it; one that goes away is never tried for it (only a look
// that found none is kept); and a local replica that fails looks at once (widen).
const aloneRecheck = 100 * time.Millisecond

// aloneKey names what a look at the mesh view was for: a model, in a namespace scope (nsFilter).
type aloneKey struct{ ns, model string }

// aloneLately reports whether a look less than aloneRecheck ago found no remote replica.
func (g *Gateway) aloneLately(k aloneKey) bool {
	g.mu.RLock()
	at, ok := g.alone[k]
	g.mu.RUnlock()
	return ok && time.Since(at) < aloneRecheck
}

// lookedFor keeps what a look at the view found. Only models served here are keys (the caller
// looks for local replicas first), so clients cannot grow the map with names.
func (g *Gateway) lookedFor(k aloneKey, found bool) {
	g.mu.RLock()
	_, kept := g.alone[k]
	g.mu.RUnlock()
	if found && !kept {
		return // the usual case where there are remote replicas: no exclusive lock per chat
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if found {
		delete(g.alone, k)
	} else {
		g.alone[k] = time.Now()
	}
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// notServed is the error for a model with no replica to take the request: 503 when the caller
// may see a placement of it that is not ready (loading, restarting, on an unreachable host), 404
// when there is none — the same answer whether the model exists in a namespace the caller may
// not see or nowhere, so a token learns nothing of other namespaces.
func (g *Gateway) notServed(who api.Principal, model string, forwarded bool, v View) *failure {
	var seen []api.Placement
	for _, p := range g.a.List(who) {
		if p.Model == model {
			seen = append(seen, p)
		}
	}
	if !forwarded && v != nil {
		for _, p := range v.Placements() {
			if p.Model == model && who.Allows(p.Namespace) && p.Host != g.self {
				seen = append(seen, p)
			}
		}
	}
	for _, p := range seen {
		if p.State.Terminal() {
			continue
		}
		why := string(p.State)
		if p.Reason != "" {
			why += ": " + p.Reason
		}
		return &failure{status: http.StatusServiceUnavailable, code: api.CodeEngineUnavailable, oaCode: "model_not_ready",
			msg: fmt.Sprintf("model %q is not ready on %s (%s)", model, p.Host, why), retryAfter: 1}
	}
	where := "in the mesh"
	if forwarded || v == nil {
		where = "on " + g.self
	}
	return &failure{status: http.StatusNotFound, code: api.CodeNotFound, oaCode: "model_not_found",
		msg: fmt.Sprintf("model %q is not served %s for this token's namespace", model, where)}
}

// lookup finds the replicas of a requested model: by its name, else (only then, as looking
// costs a walk over every placement) by its Ollama twin. It returns the name they serve.
func (g *Gateway) lookup(who api.Principal, model string, forwarded bool, v View) (string, []candidate, bool) {
	if cands, narrow := g.candidates(who, model, forwarded, v, false); len(cands) > 0 {
		return model, cands, narrow
	}
	name := g.resolve(who, model, forwarded, v)
	if name == model {
		return model, nil, false
	}
	cands, narrow := g.candidates(who, name, forwarded, v, false)
	return name, cands, narrow
}

// resolve is the name a requested model is served under for who: the name itself when a
// placement the caller may see has it, else its Ollama twin when one has that ("x" and
// "x:latest" are one model to Ollama clients, which add or drop the tag as they please).
func (g *Gateway) resolve(who api.Principal, model string, forwarded bool, v View) string {
	twin, ok := ollamaTwin(model)
	if !ok {
		return model
	}
	found := false
	for _, p := range g.a.List(who) {
		if p.Model == model {
			return model
		}
		found = found || p.Model == twin
	}
	if !forwarded && v != nil {
		for _, p := range v.Placements() {
			if !who.Allows(p.Namespace) {
				continue
			}
			if p.Model == model {
				return model
			}
			found = found || p.Model == twin
		}
	}
	if found {
		return twin
	}
	return model
}

// ollamaTwin is the other spelling of an Ollama model name: without ":latest", or with it when
// the name has no tag.
func ollamaTwin(model string) (string, bool) {
	if base, ok := strings.CutSuffix(model, ":latest"); ok && base != "" {
		return base, true
	}
	if i := strings.LastIndex(model, "/"); !strings.Contains(model[i+1:], ":") {
		return model + ":latest", true
	}
	return "", false
}

// view is what the gateway reads of the mesh, or nil when it runs without one.
func (g *Gateway) view() View {
	if g.cfg.View == nil {
		return nil
	}
	return g.cfg.View()
}

// clientAddr is the address a request came from, for logs and X-Forwarded-For.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// hopByHop are the headers that describe one connection, never passed through a proxy.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// copyHeaders copies end-to-end headers (endToEnd). The values are shared, not copied (src is a
// request or answer that is passed on whole), each capped at its length so that an Add on
// either side copies instead of writing into the other's.
func copyHeaders(dst, src http.Header) {
	named := connectionNamed(src)
	for k, vs := range src {
		if endToEnd(k, named) {
			dst[k] = vs[:len(vs):len(vs)]
		}
	}
}

// endToEnd reports whether header k is passed on: not a hop-by-hop one, not one the Connection
// header names (named), not one of the gateway's internal ones.
func endToEnd(k string, named []string) bool {
	return !slices.Contains(hopByHop, k) && !slices.Contains(named, k) && !strings.HasPrefix(k, internalPrefix)
}

// connectionNamed are the headers h's Connection header names, canonical; nil when it has none.
func connectionNamed(h http.Header) []string {
	var named []string
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				named = append(named, http.CanonicalHeaderKey(f))
			}
		}
	}
	return named
}
