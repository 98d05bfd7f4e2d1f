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
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/dialect"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/agent/route"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/version"
)

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

// View is what the gateway reads of the mesh: see route.View.
type View = route.View

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
	Registerer prometheus.Registerer
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
	// WakeTimeout bounds a request's wait for a sleeping model to load again; DefaultWakeTimeout
	// when zero.
	WakeTimeout time.Duration
	// FetchImages, when not nil, lets the agent fetch the images a chat names by http(s) URL,
	// through the download guard with these options (public addresses only unless they allow
	// more), at most 5 MiB a request with its other images; nil (the default) refuses them.
	FetchImages *download.Options
	// OnDemand, when set, is asked for a model that no host runs: it places it if it may and
	// returns once it serves, or why not (agent/keeper.Keeper.Demand). Nil answers not found.
	// A streaming chat is kept alive meanwhile (keepAlive).
	OnDemand func(ctx context.Context, who api.Principal, model string) error
}

// Gateway serves the chat and model-listing routes.
type Gateway struct {
	cfg    Config
	a      *agent.Agent
	self   string
	log    *slog.Logger
	hop    *hop.Client  // to the owners of forwarded requests
	images *http.Client // fetches images named by URL (Config.FetchImages); nil: refused
	owners *owners
	router *route.Router
	m      *metrics

	// mu guards the maps below. Every local chat reads speeds, under the shared lock.
	mu     sync.RWMutex
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
	if cfg.WakeTimeout <= 0 {
		cfg.WakeTimeout = DefaultWakeTimeout
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
		cfg: cfg, a: cfg.Agent, self: cfg.Self, log: cfg.Log.With("component", "gateway"), m: m,
		hop:    hop.NewClient(cfg.ResponseHeaderTimeout, cfg.Seal, nil),
		queues: map[string]*queue{},
		speeds: map[string]*speedBook{},
		items:  newItemStore(),
	}
	if cfg.FetchImages != nil {
		if g.images, err = download.NewClient(*cfg.FetchImages); err != nil {
			return nil, err
		}
	}
	g.router = route.New(cfg.Agent, cfg.Self, cfg.View)
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
	oa := agent.Route{Deny: denier(dialect.OpenAI), Anonymous: true}
	ol := agent.Route{Deny: denier(dialect.OllamaChat), Anonymous: true}
	an := agent.Route{Deny: denier(dialect.Anthropic), Anonymous: true}
	mount("GET /v1/models", http.HandlerFunc(g.openAIModels), oa)
	mount("GET /v1/models/{id...}", http.HandlerFunc(g.openAIModel), oa)
	mount("POST /v1/chat/completions", http.HandlerFunc(g.openAIChat), oa)
	mount("POST /v1/responses", http.HandlerFunc(g.openAIResponses), oa)
	mount("POST /v1/embeddings", http.HandlerFunc(g.openAIEmbeddings), oa)
	mount("POST /v1/completions", http.HandlerFunc(g.openAICompletions), oa)
	mount("POST /v1/messages", http.HandlerFunc(g.anthropicMessages), an)
	mount("POST /v1/messages/count_tokens", http.HandlerFunc(g.anthropicCountTokens), an)
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
	mount("/v1/", noRoute(dialect.OpenAI), agent.Route{Public: true})
	mount("/v1/messages/", noRoute(dialect.Anthropic), agent.Route{Public: true})
	mount("/api/", noRoute(dialect.OllamaChat), agent.Route{Public: true})
}

// denier answers a refused token in dialect d.
func denier(d dialect.Dialect) func(http.ResponseWriter, *api.Error) {
	return func(w http.ResponseWriter, e *api.Error) {
		dialect.WriteFailure(w, d, &dialect.Failure{Status: http.StatusUnauthorized, Code: e.Code, OACode: "invalid_api_key", Msg: e.Message})
	}
}

// noRoute answers a path the gateway does not serve: 404 in dialect d, saying what was asked.
func noRoute(d dialect.Dialect) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dialect.WriteFailure(w, d, &dialect.Failure{Status: http.StatusNotFound, Code: api.CodeNotFound, OACode: "unknown_url",
			Msg: fmt.Sprintf("no route %s %s on this gateway", r.Method, dialect.SanitizePath(r.URL.Path))})
	})
}

// principal is the authenticated caller. A request that reached a gateway route without one
// (a mount outside the authentication middleware) gets no access at all.
func principal(r *http.Request) (api.Principal, bool) {
	return agent.PrincipalFrom(r.Context())
}
