package ollama

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/sim/internal/simserver"
)

// Server is a running simulated Ollama daemon with its registry.
type Server struct {
	cfg    Config
	log    *slog.Logger
	srv    *http.Server
	reg    *http.Server
	url    string
	regURL string

	run      *simserver.Run // cancels the daemon handlers' context on Close, so streams stop
	requests simserver.Requests
	registry simserver.Requests

	mu      sync.Mutex
	pulled  map[string]*pulledModel // by canonical name
	loaded  map[string]*loadedModel
	loading map[string]chan struct{}
	stats   Stats // Requests and Registry are filled in by Stats
}

type pulledModel struct {
	name     string // canonical name it was pulled under
	spec     *modelSpec
	modified time.Time
}

type loadedModel struct {
	name    string
	spec    *modelSpec
	numCtx  int
	inUse   int // requests generating with it; a busy model never expires
	expires time.Time
	timer   *time.Timer
	gen     int // bumped whenever a scheduled expiry stops applying
	// unloadWanted records a keep_alive 0 that came while the model was busy.
	unloadWanted bool
}

// Stats is what the simulator saw. GET /_sim/stats serves it as JSON.
type Stats struct {
	Requests       map[string]int `json:"requests"`        // daemon requests by "METHOD /path"
	Registry       map[string]int `json:"registry"`        // registry requests by "METHOD /path"
	Pulls          int            `json:"pulls"`           // pulls that reached "success"
	PullsCancelled int            `json:"pulls_cancelled"` // pulls stopped because the client left
	Loads          int            `json:"loads"`
	Unloads        int            `json:"unloads"`
	Generations    int            `json:"generations"` // chat/generate answers that ran to an end
	Cancelled      int            `json:"cancelled"`   // generations stopped because the client left
}

// Start listens on cfg.Addr (the daemon) and cfg.RegistryAddr (the registry) and serves until
// Close or the end of ctx. cfg.Preloaded models start out pulled.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = simserver.Logger(log)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("ollama sim: listen %s: %w", cfg.Addr, err)
	}
	rln, err := net.Listen("tcp", cfg.RegistryAddr)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("ollama sim: registry listen %s: %w", cfg.RegistryAddr, err)
	}
	s := &Server{
		cfg:     cfg,
		log:     log,
		url:     "http://" + ln.Addr().String(),
		regURL:  "http://" + rln.Addr().String(),
		run:     simserver.NewRun(log),
		pulled:  map[string]*pulledModel{},
		loaded:  map[string]*loadedModel{},
		loading: map[string]chan struct{}{},
	}
	now := time.Now()
	for _, name := range cfg.Preloaded {
		spec := lookup(name)
		if err := s.writeBlob(spec); err != nil {
			ln.Close()
			rln.Close()
			return nil, err
		}
		s.pulled[canonical(name)] = &pulledModel{name: canonical(name), spec: spec, modified: now}
	}
	s.srv = simserver.NewHTTPServer(s.routes(), log)
	s.srv.BaseContext = s.run.BaseContext
	s.reg = simserver.NewHTTPServer(s.registryRoutes(), log)
	s.run.Serve(s.srv, ln)
	s.run.Serve(s.reg, rln)
	s.run.CloseWhen(ctx, s.Close)
	log.Info(fmt.Sprintf("Listening on %s (version %s)", ln.Addr(), cfg.Version), "registry", s.regURL)
	return s, nil
}

// URL is the daemon's base URL, e.g. "http://127.0.0.1:11434".
func (s *Server) URL() string { return s.url }

// RegistryURL is the registry's base URL: manifests at /v2/library/<name>/manifests/<tag>.
func (s *Server) RegistryURL() string { return s.regURL }

// Done is closed once the server has stopped.
func (s *Server) Done() <-chan struct{} { return s.run.Done() }

// Close stops both listeners; streams in progress end.
func (s *Server) Close() error {
	var err error
	s.run.End(func() {
		err = simserver.Shutdown(s.srv, s.reg)
		s.mu.Lock()
		for _, lm := range s.loaded {
			if lm.timer != nil {
				lm.timer.Stop()
			}
		}
		s.mu.Unlock()
	})
	return err
}

// Stats returns a copy of what the server saw.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Requests = s.requests.Snapshot()
	st.Registry = s.registry.Snapshot()
	return st
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "Ollama is running")
	})
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": s.cfg.Version})
	})
	mux.HandleFunc("GET /api/tags", s.handleTags)
	mux.HandleFunc("POST /api/pull", s.handlePull)
	mux.HandleFunc("POST /api/show", s.handleShow)
	mux.HandleFunc("DELETE /api/delete", s.handleDelete)
	mux.HandleFunc("GET /api/ps", s.handlePs)
	mux.HandleFunc("POST /api/generate", s.handleGenerate)
	mux.HandleFunc("POST /api/chat", s.handleChat)
	mux.HandleFunc("POST /api/embed", s.handleEmbed)
	mux.HandleFunc("POST /v1/chat/completions", s.handleOpenAIChat)
	mux.HandleFunc("GET /v1/models", s.handleOpenAIModels)
	return simserver.WithStats(&s.requests, func() any { return s.Stats() }, mux)
}

// writeJSON writes v with a Content-Length, so the body is complete once flushed.
func writeJSON(w http.ResponseWriter, code int, v any) {
	simserver.WriteJSON(w, code, v, `{"error":"encoding failed"}`)
}

// writeError writes Ollama's native error shape: {"error":"..."}.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// decode reads a JSON request body the way Ollama's handlers do: an empty body is "missing
// request body", anything unparsable a 400 with the parser's words.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(v)
	switch {
	case errors.Is(err, io.EOF):
		writeError(w, http.StatusBadRequest, "missing request body")
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// nameOf is a request's model: "model", or the deprecated "name".
func nameOf(model, name string) string {
	if model != "" {
		return model
	}
	return name
}

func (s *Server) handleTags(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	list := make([]*pulledModel, 0, len(s.pulled))
	for _, p := range s.pulled {
		list = append(list, p)
	}
	s.mu.Unlock()
	// Most recently modified first, as Ollama lists them.
	slices.SortStableFunc(list, func(a, b *pulledModel) int {
		if c := b.modified.Compare(a.modified); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	models := make([]map[string]any, 0, len(list))
	for _, p := range list {
		models = append(models, map[string]any{
			"name": p.name, "model": p.name, "modified_at": p.modified, "size": p.spec.totalSize(),
			"digest": p.spec.digest, "details": p.spec.details(),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (s *Server) pulledSpec(name string) *pulledModel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pulled[canonical(name)]
}

func (s *Server) handleShow(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	if !decode(w, r, &req) {
		return
	}
	name := nameOf(req.Model, req.Name)
	if name == "" {
		writeError(w, http.StatusBadRequest, "model is required")
		return
	}
	p := s.pulledSpec(name)
	if p == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", name))
		return
	}
	m := p.spec
	var params []string
	if m.paramsDoc != "" {
		var doc map[string]any
		json.Unmarshal([]byte(m.paramsDoc), &doc)
		keys := make([]string, 0, len(doc))
		for k := range doc {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if list, ok := doc[k].([]any); ok {
				for _, v := range list {
					params = append(params, fmt.Sprintf("%-30s %#v", k, v))
				}
				continue
			}
			params = append(params, fmt.Sprintf("%-30s %v", k, doc[k]))
		}
	}
	var mf strings.Builder
	fmt.Fprintf(&mf, "# Modelfile generated by \"ollama show\"\n# To build a new Modelfile based on this, replace FROM with:\n# FROM %s\n\n", p.name)
	fmt.Fprintf(&mf, "FROM %s\n", s.blobPath(m))
	fmt.Fprintf(&mf, "TEMPLATE \"\"\"%s\"\"\"\n", m.template)
	if m.system != "" {
		fmt.Fprintf(&mf, "SYSTEM %s\n", m.system)
	}
	for _, p := range params {
		fmt.Fprintf(&mf, "PARAMETER %s\n", strings.Join(strings.Fields(p), " "))
	}
	fmt.Fprintf(&mf, "LICENSE \"\"\"%s\"\"\"\n", m.license)
	writeJSON(w, http.StatusOK, map[string]any{
		"license":      m.license,
		"modelfile":    mf.String(),
		"parameters":   strings.Join(params, "\n"),
		"template":     m.template,
		"system":       m.system,
		"details":      m.details(),
		"model_info":   m.modelInfo(),
		"modified_at":  p.modified,
		"capabilities": []string{"completion"},
	})
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	if !decode(w, r, &req) {
		return
	}
	name := nameOf(req.Model, req.Name)
	s.mu.Lock()
	p, ok := s.pulled[canonical(name)]
	delete(s.pulled, canonical(name))
	shared := false // another name pulled for the same model keeps its blob, as Ollama's do
	for _, o := range s.pulled {
		shared = shared || (ok && o.spec == p.spec)
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("model '%s' not found", name))
		return
	}
	if s.cfg.ModelsDir != "" && !shared {
		os.Remove(s.blobPath(p.spec))
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handlePs(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	models := make([]map[string]any, 0, len(s.loaded))
	for _, lm := range s.loaded {
		size := lm.spec.memory(lm.numCtx)
		models = append(models, map[string]any{
			"name": lm.name, "model": lm.name, "size": size, "digest": lm.spec.digest,
			"details": lm.spec.details(), "expires_at": lm.expires, "size_vram": min(size, s.cfg.VRAM),
			"context_length": lm.numCtx,
		})
	}
	s.mu.Unlock()
	// Longest time left first, as Ollama lists them.
	slices.SortStableFunc(models, func(a, b map[string]any) int {
		if c := b["expires_at"].(time.Time).Compare(a["expires_at"].(time.Time)); c != 0 {
			return c
		}
		return strings.Compare(a["name"].(string), b["name"].(string))
	})
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

// registryRoutes serves the registry's manifest and blob routes for the "library" namespace.
func (s *Server) registryRoutes() http.Handler {
	mux := http.NewServeMux()
	// A GET pattern also answers HEAD; net/http drops the body.
	mux.HandleFunc("GET /v2/library/{name}/manifests/{tag}", func(w http.ResponseWriter, r *http.Request) {
		spec := lookup(r.PathValue("name") + ":" + r.PathValue("tag"))
		if spec == nil {
			registryError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "manifest unknown")
			return
		}
		w.Header().Set("Content-Type", MediaTypeManifest)
		w.Header().Set("Docker-Content-Digest", "sha256:"+spec.digest)
		w.Header().Set("Content-Length", fmt.Sprint(len(spec.manifest)))
		w.Write(spec.manifest)
	})
	mux.HandleFunc("GET /v2/library/{name}/blobs/{digest}", func(w http.ResponseWriter, r *http.Request) {
		// Blobs are content-addressed: any name's blob route serves any known digest.
		digest := r.PathValue("digest")
		for _, spec := range catalogue {
			if rd, size, ok := spec.blob(digest); ok {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Docker-Content-Digest", digest)
				http.ServeContent(w, r, "", time.Time{}, io.NewSectionReader(rd, 0, size))
				return
			}
		}
		registryError(w, http.StatusNotFound, "BLOB_UNKNOWN", "blob unknown to registry")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.registry.Add(simserver.Key(r))
		mux.ServeHTTP(w, r)
	})
}

// registryError writes the OCI distribution error shape.
func registryError(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, map[string]any{"errors": []any{map[string]any{"code": errCode, "message": msg}}})
}
