package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/auth"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/internal/seal"
)

// Limits of the API. Bodies are small JSON documents; the gateway sets its own limits for chats.
const (
	maxBody        = 1 << 20
	maxEventSubs   = 128
	requestTimeout = 30 * time.Second
	deleteWait     = 20 * time.Second
)

// ServerConfig builds the HTTP API server.
type ServerConfig struct {
	Agent *Agent
	// Secret is the mesh secret tokens are checked against, read once by NewServer.
	Secret []byte
	MeshID string
	// Mesh returns the mesh view when the agent runs in a mesh; nil serves a view of this host alone.
	Mesh func() api.MeshView
	// Doctor is the membership's report (mesh.Mesh.Doctor) when the agent runs in a mesh; GET
	// /v1/doctor adds the agent's own findings to it.
	Doctor func(ctx context.Context) api.DoctorReport
	// Seal is this agent's side of the mesh's sealed channel: calls forwarded to other hosts
	// (api.HostHeader) go over it. Nil forwards in plain HTTP with the caller's token
	// (in-process tests on loopback).
	Seal *seal.Identity
	// Findings are more of this host's own findings for GET /v1/doctor (what its sealed
	// listener refused); nil adds none.
	Findings func() []api.Finding
	// OpenMetrics serves /metrics without a token (for a scraper on a trusted network).
	// By default /metrics needs the admin token: its labels name every namespace's models.
	OpenMetrics bool
	// Heartbeat is how often an idle event stream gets a comment line (proxies drop silent
	// connections); 15 s when zero.
	Heartbeat time.Duration
	// Intents, when set, makes and deletes placements for the API instead of the agent alone:
	// a placement records an intent the mesh keeps, a deletion changes or removes it
	// (agent/keeper). Nil: this host's placements only.
	Intents Intents
	Log     *slog.Logger
}

// Intents is what places and deletes for POST and DELETE /v1/placements in a mesh that keeps
// intents (agent/keeper.Keeper); its methods mean what the Agent's of the same names do.
type Intents interface {
	Place(ctx context.Context, who api.Principal, req api.PlacementRequest) (api.Placement, error)
	Delete(who api.Principal, id string, wait time.Duration) (p api.Placement, done bool, err error)
}

// Server is the agent's HTTP API on one listener.
type Server struct {
	cfg    ServerConfig
	a      *Agent
	tokens *auth.Verifier // of cfg.Secret, read once
	log    *slog.Logger
	mux    *http.ServeMux
	subs   streamSlots
	// onward carries calls forwarded to other agents (via): over the sealed channel when the
	// agent has one, asserting the caller's principal.
	onward *hop.Client
}

// NewServer builds the API's routes.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, a: cfg.Agent, tokens: auth.NewVerifier(cfg.Secret), log: cfg.Log, mux: http.NewServeMux(),
		onward: hop.NewClient(0, cfg.Seal, nil)}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// The name tells a member checking this agent's advertised address who answered.
		w.Header().Set(api.NodeHeader, s.a.Name())
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.Handle("GET /v1/host", s.via(s.host))
	s.Handle("GET /v1/mesh", s.via(s.mesh))
	s.Handle("GET /v1/doctor", s.via(s.doctor))
	s.Handle("POST /v1/placements", s.via(s.place))
	s.Handle("GET /v1/placements", s.via(s.list))
	s.Handle("GET /v1/placements/{id}", s.via(s.get))
	s.Handle("GET /v1/placements/{id}/log", s.via(s.engineLog))
	s.Handle("GET /v1/placements/{id}/rpc", http.HandlerFunc(s.rpcTunnel))
	s.Handle("DELETE /v1/placements/{id}", s.via(s.delete))
	s.Handle("POST /v1/estimate", s.via(s.estimate))
	s.Handle("GET /v1/events", s.via(s.events))
	// Authenticated by the sealed channel's certificate alone: see files.ServeHTTP.
	s.mux.Handle("GET "+FilesPath+"{sha256}", s.a.files)
	s.mux.HandleFunc("GET "+HailoDigestsPath+"{path...}", s.a.serveDigest)
	if cfg.Agent.cfg.HailoLibrary != nil {
		// For this host's hailo-ollama, which sends no token: loopback only (see hailoLibrary).
		s.mux.HandleFunc("GET "+HailoLibraryPath+"{path...}", s.a.hailoLibrary)
	}
	if m := cfg.Agent.omirror; m != nil {
		// Agents only, like the files route; the mirror for this host's Ollama, loopback only.
		s.mux.HandleFunc("GET "+OllamaManifestPath+"{ns}/{model}/{tag}", m.serveManifest)
		s.mux.HandleFunc("GET "+OllamaRegistryPath+"{path...}", m.serveRegistry)
	}
	if cfg.OpenMetrics {
		s.mux.Handle("GET /metrics", s.a.metrics.Handler())
	} else {
		s.Handle("GET /metrics", adminOnly(s.a.metrics.Handler()))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, api.Errorf(api.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return s
}

// Handle mounts a handler behind token authentication; the handler finds the caller with
// PrincipalFrom.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.Mount(pattern, h, Route{})
}

// Route is how a mounted route treats callers. The gateway mounts its routes with the error
// shape of the client dialect they speak.
type Route struct {
	// Deny answers a caller refused by authentication (the status is 401 and
	// WWW-Authenticate is set already); nil answers with the API's error shape.
	Deny func(w http.ResponseWriter, e *api.Error)
	// Public routes are served without authentication and see no principal (the gateway's
	// answers for routes it does not have, in its clients' error shapes).
	Public bool
	// Anonymous routes (the gateway's listing and inference routes) serve a request without an
	// Authorization header as the agent's anonymous namespace, when one is set.
	Anonymous bool
}

// Mount mounts a handler as r says: behind token authentication unless r.Public.
func (s *Server) Mount(pattern string, h http.Handler, r Route) {
	if r.Public {
		s.mux.Handle(pattern, h)
		return
	}
	s.mux.Handle(pattern, s.authenticate(h, r))
}

// adminOnly refuses every token but the admin's: the metrics are the whole host's, labelled
// with every namespace's model names, so a namespace token must not read them.
func adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !principal(r).Admin {
			WriteError(w, api.Errorf(api.CodeNamespaceNotAllow, "%s needs the admin token: it shows every namespace", r.URL.Path))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Handler is the server's root handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve answers on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		// No WriteTimeout: event streams and streamed chats are long-lived by design; each
		// non-streaming handler bounds its own work with requestTimeout.
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = hs.Close()
	}
	<-errc
	return err
}

type principalKey struct{}

// PrincipalFrom returns who an authenticated request speaks for.
func PrincipalFrom(ctx context.Context) (api.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(api.Principal)
	return p, ok
}

// WithPrincipal returns ctx carrying p (for handlers that authenticate by other means).
func WithPrincipal(ctx context.Context, p api.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// authenticate admits requests with a valid bearer token (admin or namespace) and puts the
// principal in the request context; others get 401 Unauthorized. Tokens are never logged.
func (s *Server) authenticate(next http.Handler, route Route) http.Handler {
	deny := route.Deny
	if deny == nil {
		deny = func(w http.ResponseWriter, e *api.Error) { WriteError(w, e) }
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, asserted, err := assertedBy(r); asserted {
			if err != nil {
				deny(w, api.Errorf(api.CodeUnauthorized, "hop refused: %v", err))
				return
			}
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
			return
		}
		plain := lanPlain(r)
		if plain && !route.Anonymous {
			WriteError(w, api.Errorf(api.CodeNamespaceNotAllow, "%s is served to other hosts over TLS only: use https:// with the mesh's CA certificate (llmkube-agent ca); plain HTTP from the LAN (--lan-http) reaches the gateway's routes alone", r.URL.Path))
			return
		}
		tok, ok := bearer(r)
		if ns := s.a.AnonymousNamespace(); !ok && route.Anonymous && ns != "" && r.Header.Get("Authorization") == "" && r.Header.Get("X-Api-Key") == "" {
			// The caller sent no token at all (a wrong one is still refused below). It is
			// served as the anonymous namespace, and carries that namespace's token from here
			// on, so a request the gateway forwards to the model's owner is checked there as
			// any namespace request is. The token never goes back to the caller.
			nsTok, err := s.tokens.NamespaceToken(ns)
			if err != nil {
				WriteError(w, api.Errorf(api.CodeInternal, "anonymous namespace: %v", err))
				return
			}
			r.Header.Set("Authorization", "Bearer "+nsTok)
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), api.Principal{Namespace: ns})))
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="llmkube"`)
			deny(w, api.Errorf(api.CodeUnauthorized, "missing bearer token: send Authorization: Bearer <token> (`llmkube-agent init` prints the admin token)"))
			return
		}
		p, err := s.tokens.Verify(tok)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="llmkube", error="invalid_token"`)
			deny(w, api.Errorf(api.CodeUnauthorized, "token refused: %v", err))
			return
		}
		if plain && p.Admin {
			// The admin token places, deletes and reads everything: it is not taken where the
			// LAN reads it, and the user is told it was just sent where the LAN could read it.
			deny(w, api.Errorf(api.CodeUnauthorized, "the admin token is refused in plain HTTP from the LAN, and anyone on the LAN may have read it now: use https:// with the mesh's CA certificate (llmkube-agent ca), and a namespace token on --lan-http"))
			return
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

// bearer is the request's token: Authorization: Bearer, or else x-api-key, which Anthropic's
// clients send.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		k := strings.TrimSpace(r.Header.Get("X-Api-Key"))
		return k, k != ""
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// HTTPStatus is the status an error code is answered with.
func HTTPStatus(code api.Code) int {
	switch code {
	case api.CodeBadRequest, api.CodeInvalidSource, api.CodeRuntimeMismatch, api.CodeContextLimit:
		return http.StatusBadRequest
	case api.CodeUnauthorized:
		return http.StatusUnauthorized
	case api.CodeNamespaceNotAllow, api.CodeForbidden:
		return http.StatusForbidden
	case api.CodeNotFound:
		return http.StatusNotFound
	case api.CodeConflict:
		return http.StatusConflict
	case api.CodeAcceleratorMissing, api.CodeInsufficientMemory, api.CodeMemoryCheckFailed:
		return http.StatusUnprocessableEntity
	case api.CodeTooBusy:
		return http.StatusTooManyRequests
	case api.CodeEngineUnavailable:
		return http.StatusServiceUnavailable
	case api.CodeEngineError, api.CodePullFailed, api.CodeUnreachable:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// WriteError answers with the JSON error body and the status that fits its code.
func WriteError(w http.ResponseWriter, err error) {
	e := asAPIError(err, api.CodeInternal)
	writeJSON(w, HTTPStatus(e.Code), api.ErrorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// decode reads a bounded JSON body, refusing unknown fields so a typo ("contxt") is an error
// rather than a silently ignored setting.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return api.Errorf(api.CodeBadRequest, "Content-Type %q: send application/json", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return api.Errorf(api.CodeBadRequest, "body larger than %d bytes", maxBody)
		}
		return api.Errorf(api.CodeBadRequest, "body is not a valid request: %v", err)
	}
	if dec.More() {
		return api.Errorf(api.CodeBadRequest, "body holds more than one JSON document")
	}
	if _, err := dec.Token(); err != io.EOF {
		return api.Errorf(api.CodeBadRequest, "trailing data after the JSON document")
	}
	return nil
}

func principal(r *http.Request) api.Principal {
	p, _ := PrincipalFrom(r.Context())
	return p
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := s.a.Ready(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// host serves this host's capacity and state as the caller may see it (api.Principal.ScopeHost).
func (s *Server) host(w http.ResponseWriter, r *http.Request) {
	who := principal(r)
	writeJSON(w, http.StatusOK, who.ScopeHost(s.a.Host(), s.a.List(who)))
}

// mesh serves the mesh view as the caller may see it (api.Principal.ScopeView): a namespace
// token sees its own namespace's placements and no other namespace's model names.
func (s *Server) mesh(w http.ResponseWriter, r *http.Request) {
	var v api.MeshView
	if s.cfg.Mesh != nil {
		v = s.cfg.Mesh()
	} else {
		h := s.a.Host()
		v = api.MeshView{Mesh: s.cfg.MeshID, Self: h.Name, At: time.Now().UTC(), Members: []api.Member{{
			Name: h.Name, Role: api.RoleAgent, Addr: h.APIAddr, Liveness: api.Alive,
			Host: &h, Placements: s.a.Placements(), Updated: time.Now().UTC(),
		}}}
	}
	v = principal(r).ScopeView(v)
	writeJSON(w, http.StatusOK, v)
}

// doctorTimeout bounds the fresh checks a doctor's report makes (dialling agents that did not
// answer), so a console merging every agent's report gets each one in time.
const doctorTimeout = 5 * time.Second

// doctor serves what this agent finds wrong: what its membership sees of the mesh (checked from
// this host, not from the caller's) and its own host's engines and placements, as the caller
// may see them (a namespace token: host- and mesh-wide findings, and its own placements').
func (s *Server) doctor(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), doctorTimeout)
	defer cancel()
	own := make(chan []api.Finding, 1) // the host's own checks and the mesh's run side by side
	go func() { own <- s.a.Findings(ctx) }()
	var rep api.DoctorReport
	if s.cfg.Doctor != nil {
		rep = s.cfg.Doctor(ctx)
	} else {
		rep = api.DoctorReport{Mesh: s.cfg.MeshID, Node: s.a.Name(), Members: 1, At: time.Now()}
	}
	rep.Findings = append(rep.Findings, <-own...)
	if s.cfg.Findings != nil {
		rep.Findings = append(rep.Findings, s.cfg.Findings()...)
	}
	rep.Findings = principal(r).ScopeFindings(rep.Findings)
	api.SortFindings(rep.Findings)
	if rep.Findings == nil {
		rep.Findings = []api.Finding{}
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) place(w http.ResponseWriter, r *http.Request) {
	var req api.PlacementRequest
	if err := decode(w, r, &req); err != nil {
		WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*requestTimeout)
	defer cancel()
	place := s.a.Place
	if s.cfg.Intents != nil {
		place = s.cfg.Intents.Place
	}
	p, err := place(ctx, principal(r), req)
	if err != nil {
		WriteError(w, err)
		return
	}
	w.Header().Set("Location", "/v1/placements/"+p.ID)
	writeJSON(w, http.StatusCreated, p)
}

func (s *Server) estimate(w http.ResponseWriter, r *http.Request) {
	var req api.PlacementRequest
	if err := decode(w, r, &req); err != nil {
		WriteError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*requestTimeout)
	defer cancel()
	e, err := s.a.Estimate(ctx, principal(r), req)
	if err != nil {
		WriteError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.PlacementList{Placements: s.a.List(principal(r))})
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	p, err := s.a.Get(principal(r), r.PathValue("id"))
	if err != nil {
		WriteError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// Log tail sizes: what the console shows by default, and the most one request reads.
const (
	logTailDefault = 16 << 10
	logTailMax     = 1 << 20
)

// engineLog answers the tail of the engine log of a placement the caller may see, as text: the
// console shows it in the host's detail. Engines whose output the agent does not own (the
// Ollama and hailo-ollama daemons) have none here.
func (s *Server) engineLog(w http.ResponseWriter, r *http.Request) {
	p, err := s.a.Get(principal(r), r.PathValue("id"))
	if err != nil {
		WriteError(w, err)
		return
	}
	n := int64(logTailDefault)
	if q := r.URL.Query().Get("bytes"); q != "" {
		v, err := strconv.ParseInt(q, 10, 64)
		if err != nil || v <= 0 {
			WriteError(w, api.Errorf(api.CodeBadRequest, "bytes=%q: want a positive number", q))
			return
		}
		n = min(v, logTailMax)
	}
	if p.LogPath == "" {
		WriteError(w, &api.Error{Code: api.CodeNotFound,
			Message: fmt.Sprintf("%s runs on the %s daemon, whose log is its own", p.Model, p.Runtime),
			Fix:     "read the daemon's log on " + p.Host + " (for example journalctl -u " + string(p.Runtime) + ")"})
		return
	}
	tail, err := tailFile(p.LogPath, n)
	if err != nil {
		WriteError(w, api.Errorf(api.CodeNotFound, "engine log of %s: %v", p.ID, err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(tail)
}

// tailFile reads the last n bytes of a file, starting at a line boundary when it cut one.
func tailFile(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return b, nil
}

// delete answers 200 with the placement once it is gone, or 202 while the engine is still
// letting go (the deletion finishes in the background; an event says when).
func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	del := s.a.Delete
	if s.cfg.Intents != nil {
		del = s.cfg.Intents.Delete
	}
	p, done, err := del(principal(r), r.PathValue("id"), deleteWait)
	if err != nil {
		WriteError(w, err)
		return
	}
	status := http.StatusOK
	if !done {
		status = http.StatusAccepted
	}
	writeJSON(w, status, p)
}

// events streams server-sent events: `id`, `event: <type>`, `data: <api.Event JSON>`.
// Last-Event-ID (or ?since=) replays what the ring still holds; a namespace token sees its own
// namespace's placement events and host-wide ones (engines, mesh).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	who := principal(r)
	var after uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			WriteError(w, api.Errorf(api.CodeBadRequest, "Last-Event-ID %q is not a sequence number", v))
			return
		}
		after = n
	} else if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			WriteError(w, api.Errorf(api.CodeBadRequest, "since=%q is not a sequence number", v))
			return
		}
		after = n
	}
	release, busy := s.subs.acquire(who)
	if busy != nil {
		WriteError(w, busy)
		return
	}
	defer release()
	rc := http.NewResponseController(w)
	filter := func(ev api.Event) bool { return ev.Placement == nil || who.Allows(ev.Placement.Namespace) }
	replay, sub := s.a.hub.Subscribe(after, filter)
	defer sub.Close()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(ev api.Event) error {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b); err != nil {
			return err
		}
		return rc.Flush()
	}
	// A comment first, so the client sees the stream is open even before any event.
	if _, err := io.WriteString(w, ": llmkube events\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	for _, ev := range replay {
		if write(ev) != nil {
			return
		}
	}
	hb := time.NewTicker(s.cfg.Heartbeat)
	defer hb.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-sub.C():
			if !ok {
				return // fell behind: the client reconnects with Last-Event-ID and replays
			}
			if write(ev) != nil {
				return
			}
		case <-hb.C:
			if _, err := io.WriteString(w, ": ping\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// via serves a call for this host, and forwards one for another host of the mesh
// (api.HostHeader) to that host's API: the same method, path and body, over the sealed channel
// with the caller's principal asserted (checked here; the token stays here), marked as
// forwarded (api.ViaHeader) so it goes no further,
// its answer streamed back as it comes (an event stream too).
func (s *Server) via(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Header.Get(api.HostHeader)
		if host == "" || host == s.a.Name() {
			h(w, r)
			return
		}
		if by := r.Header.Get(api.ViaHeader); by != "" {
			WriteError(w, api.Errorf(api.CodeBadRequest, "a call for host %q was forwarded to %s, which is another host: calls are forwarded once",
				api.Clip(host, maxHostEcho), s.a.Name()))
			return
		}
		mb, err := s.member(host)
		if err != nil {
			WriteError(w, err)
			return
		}
		addr := mb.Host.APIAddr
		target := &url.URL{Scheme: s.onward.Scheme(), Host: addr}
		peer := seal.PeerNamed(mb.Name, mb.SealKey)
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Header.Del(api.HostHeader)
				pr.Out.Header.Set(api.ViaHeader, s.a.Name())
				if s.onward.Sealed() {
					AssertOn(pr.In.Context(), pr.Out.Header)
				}
			},
			Transport:     roundTripper(func(req *http.Request) (*http.Response, error) { return s.onward.Do(req, peer) }),
			FlushInterval: -1,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				if r.Context().Err() != nil {
					return // the caller left
				}
				WriteError(w, api.Errorf(api.CodeUnreachable, "host %s (%s) did not answer the call forwarded to it: %v", host, addr, err))
			},
		}
		rp.ServeHTTP(w, r)
	})
}

// maxHostEcho bounds a host name echoed in a refusal.
const maxHostEcho = 80

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// member is the mesh's agent named host, alive with an API address, as this agent's view has it.
func (s *Server) member(host string) (api.Member, error) {
	if s.cfg.Mesh != nil {
		for _, m := range s.cfg.Mesh().Members {
			if m.Name != host || m.Role != api.RoleAgent || m.Host == nil {
				continue
			}
			if m.Liveness != api.Alive || m.Host.APIAddr == "" {
				return api.Member{}, api.Errorf(api.CodeUnreachable, "host %s is %s in the mesh as %s sees it: %s", host, m.Liveness, s.a.Name(), m.Reason)
			}
			return m, nil
		}
	}
	return api.Member{}, api.Errorf(api.CodeNotFound, "host %q is not in the mesh as %s sees it", api.Clip(host, maxHostEcho), s.a.Name())
}
