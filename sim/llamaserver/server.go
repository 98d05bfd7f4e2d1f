package llamaserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmkube/mesh/sim/gguf"
	"github.com/llmkube/mesh/sim/internal/simserver"
)

// ErrCrashed is the server's Err after a simulated crash (Config.CrashAfter).
var ErrCrashed = errors.New("llamaserver: simulated crash")

// ErrBind is returned (wrapped) by Start when the listen address cannot be bound.
var ErrBind = errors.New("couldn't bind HTTP server socket")

// pageSize is the stride used to touch held memory so every page becomes resident.
const pageSize = 4096

// Server is a running simulated llama-server.
type Server struct {
	cfg       Config
	log       *slog.Logger
	srv       *http.Server
	url       string
	modelSize int64
	created   int64 // unix seconds the model "was loaded", as /v1/models reports

	run *simserver.Run // cancels the handlers' context on Close, so generations stop

	ready  chan struct{}
	loaded atomic.Bool
	err    error // set before the run's Done is closed

	slots      chan struct{} // one token per parallel slot
	kv         *kvPool       // the context the slots share (UnifiedKV); nil when each has its own
	processing atomic.Int64
	deferred   atomic.Int64

	requests simserver.Requests

	mu        sync.Mutex
	stats     Stats // Requests is filled in from requests by Stats
	totals    metricTotals
	crashConn net.Conn // the connection whose answer, once written, triggers the crash
	// streamed are the connections serving a streamed answer: closed once it is written (see
	// closeAfter).
	streamed map[net.Conn]bool
	held     []byte // memory held to simulate the loaded model
}

// Stats is what the simulator saw. GET /_sim/stats serves it as JSON.
type Stats struct {
	// Requests counts requests by "METHOD /path" (simulator routes excluded).
	Requests        map[string]int `json:"requests"`
	Completions     int            `json:"completions"`      // chat completions that got a slot, cut ones included
	Cancelled       int            `json:"cancelled"`        // generations stopped because the client left
	PromptTokens    int64          `json:"prompt_tokens"`    // as in llamacpp:prompt_tokens_total
	PredictedTokens int64          `json:"predicted_tokens"` // as in llamacpp:tokens_predicted_total
	Ready           bool           `json:"ready"`            // the model has "loaded"
	HeldBytes       int64          `json:"held_bytes"`       // memory held for the model
	Settings        Settings       `json:"settings"`         // what the command line asked for
}

// Settings are the server's command-line settings, so a test can check how it was launched.
type Settings struct {
	ModelPath string `json:"model_path"`
	Alias     string `json:"alias"`
	CtxSize   int    `json:"ctx_size"`
	GPULayers int    `json:"n_gpu_layers"`
	Threads   int    `json:"threads"`
	Parallel  int    `json:"parallel"`
	UnifiedKV bool   `json:"kv_unified"`
	CacheRAM  int    `json:"cache_ram"`
	Metrics   bool   `json:"metrics"`
	MLock     bool   `json:"mlock"`
	FlashAttn string `json:"flash_attn"`
	Jinja     bool   `json:"jinja"`
}

type metricTotals struct {
	promptSeconds    float64
	predictedSeconds float64
	nDecode          int64
	nTokensMax       int64
}

// Start validates cfg, opens the model file like llama-server (a missing or unreadable file is an
// error), listens on cfg.Addr and starts "loading": /health answers 503 until cfg.LoadDelay has
// passed and the held memory (cfg.HoldMemory) is allocated. The server runs until Close, a
// simulated crash, or the end of ctx.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	size, magic, err := openModel(cfg.ModelPath)
	if err != nil {
		return nil, err
	}
	log = simserver.Logger(log)
	if magic != "GGUF" {
		// llama-server's words (gguf_init_from_reader), and it exits.
		return nil, fmt.Errorf("gguf_init_from_reader: invalid magic characters: %q, expected 'GGUF'", magic)
	}
	if cfg.TrainContext, err = gguf.TrainedContext(cfg.ModelPath); err != nil {
		log.Warn("the GGUF header could not be read; the training context is unknown", "err", err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("llamaserver: %w %s: %v", ErrBind, cfg.Addr, err)
	}
	s := &Server{
		cfg:       cfg,
		log:       log,
		url:       "http://" + ln.Addr().String(),
		modelSize: size,
		created:   time.Now().Unix(),
		ready:     make(chan struct{}),
		run:       simserver.NewRun(log),
		slots:     make(chan struct{}, cfg.Parallel),
		stats: Stats{Settings: Settings{
			ModelPath: cfg.ModelPath, Alias: cfg.Alias, CtxSize: cfg.CtxSize, GPULayers: cfg.GPULayers,
			Threads: cfg.Threads, Parallel: cfg.Parallel, UnifiedKV: cfg.UnifiedKV, CacheRAM: cfg.CacheRAM,
			Metrics: cfg.Metrics, MLock: cfg.MLock, FlashAttn: cfg.FlashAttn, Jinja: cfg.Jinja,
		}},
	}
	if cfg.UnifiedKV {
		s.kv = &kvPool{size: cfg.ctxSize()}
	}
	s.srv = simserver.NewHTTPServer(s.routes(), log)
	s.srv.BaseContext = s.run.BaseContext
	s.srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	track := s.srv.ConnState // simserver's own, which a stop needs
	s.srv.ConnState = func(c net.Conn, state http.ConnState) {
		track(c, state)
		s.connState(c, state)
	}
	s.run.Serve(s.srv, ln)
	go s.load()
	s.run.CloseWhen(ctx, s.Close)
	log.Info("loading model", "path", cfg.ModelPath, "url", s.url)
	return s, nil
}

// openModel checks the model file as llama-server would and returns its size and first 4 bytes.
func openModel(path string) (int64, string, error) {
	if path == "" {
		return 0, "", errors.New("llamaserver: no model path (-m)")
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, "", fmt.Errorf("llamaserver: failed to open model file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, "", fmt.Errorf("llamaserver: failed to open model file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return 0, "", fmt.Errorf("llamaserver: model path %s is not a regular file", path)
	}
	magic := make([]byte, 4)
	n, err := io.ReadFull(f, magic)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, "", fmt.Errorf("llamaserver: failed to read model file: %w", err)
	}
	return fi.Size(), string(magic[:n]), nil
}

// load simulates loading the model: it allocates and touches the held memory, waits out the
// load delay, then marks the server ready.
func (s *Server) load() {
	start := time.Now()
	if s.cfg.HoldMemory > 0 {
		n := int64(s.cfg.HoldMemory * float64(s.modelSize))
		b := make([]byte, n)
		for i := 0; i < len(b); i += pageSize {
			b[i] = 1 // a write makes the page resident: RSS really grows
		}
		s.mu.Lock()
		s.held = b
		s.stats.HeldBytes = n
		s.mu.Unlock()
	}
	if rest := s.cfg.LoadDelay - time.Since(start); rest > 0 {
		t := time.NewTimer(rest)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.run.Done():
			return
		}
	}
	select {
	case <-s.run.Done():
		return
	default:
	}
	s.loaded.Store(true)
	close(s.ready)
	s.log.Info("model loaded", "url", s.url)
}

// SlotContext is the context each request gets, and whether it was capped at the model's
// training context.
func (s *Server) SlotContext() (int, bool) { return s.cfg.slotCtx(), s.cfg.capped() }

// URL is the server's base URL, e.g. "http://127.0.0.1:41234".
func (s *Server) URL() string { return s.url }

// Ready is closed once the model has "loaded" and /health answers 200.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Done is closed when the server has stopped: Close, a simulated crash, or the end of Start's ctx.
func (s *Server) Done() <-chan struct{} { return s.run.Done() }

// Err is why the server stopped once Done is closed: ErrCrashed after a simulated crash, nil
// otherwise.
func (s *Server) Err() error {
	select {
	case <-s.run.Done():
		return s.err
	default:
		return nil
	}
}

// Close stops the server gracefully: generations in progress end, connections close, the held
// memory is released.
func (s *Server) Close() error {
	var err error
	s.end(nil, func() {
		if err = simserver.Shutdown(s.srv); err != nil {
			err = s.srv.Close()
		}
	})
	return err
}

// crash stops the server abruptly, as a dying process would: every connection is cut.
func (s *Server) crash() {
	s.end(ErrCrashed, func() {
		s.log.Error("simulated crash", "completions", s.cfg.CrashAfter)
		s.srv.Close()
	})
}

// end stops the server once, for reason: the run cancels the handlers' context, then stop cuts
// the connections, then the held memory is released.
func (s *Server) end(reason error, stop func()) {
	s.run.End(func() {
		stop()
		s.mu.Lock()
		s.held = nil
		s.stats.HeldBytes = 0
		s.mu.Unlock()
		s.err = reason
	})
}

// Stats returns a copy of what the server saw.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Requests = s.requests.Snapshot()
	st.Ready = s.loaded.Load()
	return st
}

type connKey struct{}

// connState crashes the server once the connection that served the last allowed completion has
// finished writing it (idle again, or closed), so the client gets its whole answer first; and
// closes a connection that served a streamed answer once it is written (see closeAfter).
func (s *Server) connState(c net.Conn, state http.ConnState) {
	if state != http.StateIdle && state != http.StateClosed {
		return
	}
	s.mu.Lock()
	hit := s.crashConn != nil && s.crashConn == c
	streamed := s.streamed[c]
	delete(s.streamed, c)
	s.mu.Unlock()
	if streamed && state == http.StateIdle {
		c.Close()
	}
	if hit {
		go s.crash()
	}
}

// closeAfter marks the request's connection to be closed once its answer is written, without
// saying so (no "Connection: close"; the headers still offer keep-alive), as llama-server does
// after every streamed answer: cpp-httplib ends the connection when the stream's content
// provider finishes (seen on build 10470, chats and completions; answers that do not stream
// keep their connection). A client that reuses such a connection fails with EOF or a broken
// pipe, as it would on the real server.
func (s *Server) closeAfter(ctx context.Context) {
	c, ok := ctx.Value(connKey{}).(net.Conn)
	if !ok {
		return
	}
	s.mu.Lock()
	if s.streamed == nil {
		s.streamed = map[net.Conn]bool{}
	}
	s.streamed[c] = true
	s.mu.Unlock()
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /v1/health", s.handleHealth)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /models", s.handleModels)
	mux.HandleFunc("GET /props", s.handleProps)
	mux.HandleFunc("GET /slots", s.handleSlots)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /chat/completions", s.handleChat)
	mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /completions", s.handleCompletions)
	mux.HandleFunc("POST /embeddings", s.handleEmbeddings)
	mux.HandleFunc("POST /apply-template", s.handleApplyTemplate)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// llama-server (cpp-httplib) answers any unknown route or method with this 404.
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
			"message": "File Not Found", "type": "not_found_error", "code": 404,
		}})
	})
	engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No endpoint is served while the model loads, /health included.
		if !s.loaded.Load() {
			writeError(w, http.StatusServiceUnavailable, "unavailable_error", "Loading model", nil)
			return
		}
		mux.ServeHTTP(w, r)
	})
	h := simserver.WithStats(&s.requests, func() any { return s.Stats() }, engine)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "llama.cpp") // on the simulator's own routes too
		h.ServeHTTP(w, r)
	})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// modelID is the name clients use: the alias, or the model path when there is none.
func (s *Server) modelID() string {
	if s.cfg.Alias != "" {
		return s.cfg.Alias
	}
	return s.cfg.ModelPath
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	id := s.modelID()
	writeJSON(w, http.StatusOK, map[string]any{
		"models": []any{map[string]any{
			"name": id, "model": id, "modified_at": "", "size": "", "digest": "", "type": "model",
			"description": "", "tags": []string{""}, "capabilities": []string{"completion"},
			"parameters": "", "details": map[string]any{
				"parent_model": "", "format": "gguf", "family": "", "families": []string{""},
				"parameter_size": "", "quantization_level": "",
			},
		}},
		"object": "list",
		"data": []any{map[string]any{
			"id": id, "object": "model", "created": s.created, "owned_by": "llamacpp",
			"meta": map[string]any{"n_ctx_train": cmp.Or(s.cfg.TrainContext, s.cfg.ctxSize()), "size": s.modelSize},
		}},
	})
}

func (s *Server) handleProps(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{
			"n_ctx": s.cfg.slotCtx(),
			"params": map[string]any{
				"n_predict": s.cfg.NPredict, "seed": s.cfg.Seed, "temperature": 0.8, "top_k": 40,
				"top_p": 0.95, "min_p": 0.05, "stream": true,
			},
		},
		"total_slots":      s.cfg.Parallel,
		"model_alias":      s.modelID(),
		"model_path":       s.cfg.ModelPath,
		"modalities":       map[string]bool{"vision": false, "audio": false},
		"endpoint_slots":   true,
		"endpoint_props":   false,
		"endpoint_metrics": s.cfg.Metrics,
		"chat_template":    chatTemplate,
		"bos_token":        "<|begin_of_text|>",
		"eos_token":        "<|eot_id|>",
		"build_info":       "b5000-llmsim00",
		"is_sleeping":      false,
	})
}

// chatTemplate is the template /props reports; the simulator renders prompts its own simple way.
const chatTemplate = "{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ message['content'] }}<|eot_id|>{% endfor %}"

func (s *Server) handleSlots(w http.ResponseWriter, r *http.Request) {
	busy := int(s.processing.Load())
	slots := make([]map[string]any, s.cfg.Parallel)
	for i := range slots {
		slots[i] = map[string]any{
			"id": i, "n_ctx": s.cfg.slotCtx(), "speculative": false, "is_processing": i < busy,
		}
	}
	writeJSON(w, http.StatusOK, slots)
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Metrics {
		writeError(w, http.StatusNotImplemented, "not_supported_error",
			"This server does not support metrics endpoint. Start it with `--metrics`", nil)
		return
	}
	s.mu.Lock()
	st, tot := s.stats, s.totals
	s.mu.Unlock()
	rate := func(n int64, secs float64) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(n) / secs
	}
	busyPerDecode := 0.0
	if tot.nDecode > 0 {
		busyPerDecode = 1 // one sequence per decode call in the simulator
	}
	var b strings.Builder
	emit := func(name, help, kind string, v float64) {
		fmt.Fprintf(&b, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %s\n",
			name, help, name, kind, name, formatFloat(v))
	}
	emit("prompt_tokens_total", "Number of prompt tokens processed.", "counter", float64(st.PromptTokens))
	emit("prompt_seconds_total", "Prompt process time", "counter", tot.promptSeconds)
	emit("tokens_predicted_total", "Number of generation tokens processed.", "counter", float64(st.PredictedTokens))
	emit("tokens_predicted_seconds_total", "Predict process time", "counter", tot.predictedSeconds)
	emit("n_decode_total", "Total number of llama_decode() calls", "counter", float64(tot.nDecode))
	emit("n_tokens_max", "Largest observed n_tokens.", "counter", float64(tot.nTokensMax))
	emit("prompt_tokens_seconds", "Average prompt throughput in tokens/s.", "gauge", rate(st.PromptTokens, tot.promptSeconds))
	emit("predicted_tokens_seconds", "Average generation throughput in tokens/s.", "gauge", rate(st.PredictedTokens, tot.predictedSeconds))
	emit("requests_processing", "Number of requests processing.", "gauge", float64(s.processing.Load()))
	emit("requests_deferred", "Number of requests deferred.", "gauge", float64(s.deferred.Load()))
	emit("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", "gauge", busyPerDecode)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, b.String())
}

// writeJSON writes v with a Content-Length, so the body is complete once flushed.
func writeJSON(w http.ResponseWriter, code int, v any) {
	simserver.WriteJSON(w, code, v, `{"error":{"code":500,"message":"encoding failed","type":"server_error"}}`)
}

// writeError writes llama-server's error shape: {"error":{"code","message","type",...}}.
func writeError(w http.ResponseWriter, code int, typ, msg string, extra map[string]any) {
	e := map[string]any{"code": code, "message": msg, "type": typ}
	for k, v := range extra {
		e[k] = v
	}
	writeJSON(w, code, map[string]any{"error": e})
}

// kvPool is a context the slots share: every request's prompt and answer take cells from it,
// and a request that finds it full fails ("Context size has been exceeded"), as in llama-server
// with a unified KV cache.
type kvPool struct {
	mu         sync.Mutex
	size, used int
}

// lease is one request's share of a pool; a nil pool (each slot has its own context) always
// has room, since a request's own context is checked before it starts.
type lease struct {
	pool *kvPool
	n    int
}

func (p *kvPool) lease() *lease { return &lease{pool: p} }

func (l *lease) take(n int) bool {
	if l.pool == nil {
		return true
	}
	l.pool.mu.Lock()
	defer l.pool.mu.Unlock()
	if l.pool.used+n > l.pool.size {
		return false
	}
	l.pool.used += n
	l.n += n
	return true
}

func (l *lease) release() {
	if l.pool == nil {
		return
	}
	l.pool.mu.Lock()
	l.pool.used -= l.n
	l.pool.mu.Unlock()
	l.n = 0
}
