// Package hailo simulates hailo-ollama 5.1.1 (or, with Config.Version, 5.3.0 or 5.4: see
// versions.go), Hailo's Ollama-like server for the Hailo-10H, with
// the quirks that break ordinary clients kept on purpose (see
// shared/reference/engines.md and the route table in routes.go), plus a second listener that
// plays Hailo's model library. It exists so the agent's real code paths can run against a
// Hailo-10H without one. It imports nothing of the product.
//
// What the simulator decides where hailo-ollama's behaviour is a crash or is not observable:
//   - A pull whose download fails answers {"error": …} on the stream (a 500 when not streaming);
//     hailo-ollama 5.1.1 throws in its download thread and dies.
//   - keep_alive is a number of seconds, as hailo-ollama's Int32 field; a string such as "5m"
//     fails to parse and the request gets a 500, as it does there.
//   - Generation: the answer to a prompt is simtext.Generate(seed, key, n) where key is the
//     prompt (/api/generate) or the messages' contents joined by "\n" (/api/chat,
//     /v1/chat/completions), seed is options.seed (0 when absent or -1) and n is
//     simtext.AnswerLengthUpTo(seed, key, LongestAnswer), cut to num_predict (max_tokens on /v1) and to the context
//     left after the prompt; a cut answer ends with done_reason "length", a whole one "stop".
//   - Concurrency: hailo-ollama serves every connection on its own thread but holds one lock over
//     the device for a whole generation (a stream included), a load, an unload and /api/ps. A
//     second such request waits for the first to finish; so it does here, in arrival order.
package hailo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/llmkube/mesh/sim/internal/simserver"
)

// Server is a running simulator: the engine listener and the library listener.
type Server struct {
	cfg        Config
	log        *slog.Logger
	clock      Clock
	store      *store
	dev        *device
	client     *http.Client
	libraryURL string
	routes     map[string]http.HandlerFunc // "METHOD /path" → handler

	ln, libLn   net.Listener
	srv, libSrv *http.Server
	run         *simserver.Run
	closeErr    error // set by the first Close

	requests, libRequests simserver.Requests

	statsMu sync.Mutex
	stats   Stats // Requests and LibraryRequests are filled in by Stats
}

// Stats counts what the simulator has been asked and has done; tests use it to assert, for
// example, that no download happened. The same document is served at GET /_sim/stats.
type Stats struct {
	// Requests counts engine requests by "METHOD /path" (404s included, /_sim/stats excluded).
	Requests map[string]int `json:"requests"`
	// LibraryRequests counts the library listener's requests by "METHOD /path".
	LibraryRequests map[string]int `json:"library_requests"`
	// LibraryBytes is the number of body bytes the library has served.
	LibraryBytes int64 `json:"library_bytes"`
	// Pulls counts downloads /api/pull started (a blob already present starts none).
	Pulls int `json:"pulls"`
	// Loads and Unloads count models put on and taken off the device (expiry included).
	Loads   int `json:"loads"`
	Unloads int `json:"unloads"`
	// Loaded is the model on the device, "" when none.
	Loaded string `json:"loaded"`
	// Waiting is the number of requests queued for the device behind the one using it.
	Waiting int `json:"waiting"`
	// Version is the release the simulator plays.
	Version string `json:"version"`
	// Degraded is true once a release with the swap defect (5.3.0) has loaded a model after
	// another one in this process: every answer since carries DegradedMarker. Only a restart
	// (a new process) clears it.
	Degraded bool `json:"degraded"`
}

// Start sets up the data folder and the library, binds both listeners and serves until ctx ends
// or Close is called. It fails, binding nothing, when cfg is invalid or a listener cannot bind.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Version, _ = NormalizeVersion(cfg.Version) // Validate accepted it
	log = simserver.Logger(log)
	clock := cfg.Clock
	if clock == nil {
		clock = realClock{}
	}
	st, err := openStore(cfg)
	if err != nil {
		return nil, fmt.Errorf("data folder %s: %w", cfg.DataDir, err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("engine listener: %w", err)
	}
	libLn, err := net.Listen("tcp", cfg.LibraryListen)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("library listener: %w", err)
	}
	s := &Server{
		cfg:    cfg,
		log:    log,
		clock:  clock,
		store:  st,
		dev:    &device{sem: make(chan struct{}, 1)},
		client: &http.Client{Transport: &http.Transport{}},
		ln:     ln,
		libLn:  libLn,
		run:    simserver.NewRun(log),
	}
	s.routes = s.engineRoutes()
	s.libraryURL = cfg.LibraryURL
	if s.libraryURL == "" {
		s.libraryURL = s.LibraryURL()
	}
	if cfg.ConfigHome != "" {
		if err := s.writeRuntimeConfig(); err != nil {
			ln.Close()
			libLn.Close()
			return nil, fmt.Errorf("writing hailo-ollama.json: %w", err)
		}
	}
	// No BaseContext: Close cuts streams abruptly, as hailo-ollama dying would, rather than
	// letting handlers end them cleanly.
	s.srv = simserver.NewHTTPServer(http.HandlerFunc(s.serveEngine), log)
	s.libSrv = simserver.NewHTTPServer(http.HandlerFunc(s.serveLibrary), log)
	s.run.Serve(s.srv, ln)
	s.run.Serve(s.libSrv, libLn)
	s.run.CloseWhen(ctx, s.Close)
	log.Info("hailo-sim serving", "version", cfg.Version, "url", s.URL(), "library", s.LibraryURL(), "data", cfg.DataDir)
	return s, nil
}

// URL is the engine's base URL, "http://127.0.0.1:<port>".
func (s *Server) URL() string { return baseURL(s.ln.Addr()) }

// LibraryURL is the library listener's base URL.
func (s *Server) LibraryURL() string { return baseURL(s.libLn.Addr()) }

// baseURL names a bound address; an unspecified host (0.0.0.0, ::) is reached through loopback.
func baseURL(a net.Addr) string {
	tcp := a.(*net.TCPAddr)
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// Close stops both listeners at once, cutting any stream in flight. It is safe to call twice.
func (s *Server) Close() error {
	s.run.End(func() {
		s.closeErr = errors.Join(s.srv.Close(), s.libSrv.Close())
		s.client.CloseIdleConnections()
	})
	return s.closeErr
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.statsMu.Lock()
	out := s.stats
	s.statsMu.Unlock()
	out.Requests = s.requests.Snapshot()
	out.LibraryRequests = s.libRequests.Snapshot()
	out.Loaded = s.dev.loadedAt(s.clock.Now())
	out.Waiting = int(s.dev.waiting.Load())
	out.Version = s.cfg.Version
	out.Degraded = s.dev.isDegraded()
	return out
}

func (s *Server) count(f func(*Stats)) {
	s.statsMu.Lock()
	f(&s.stats)
	s.statsMu.Unlock()
}

// writeRuntimeConfig writes hailo-ollama.json as a real install has it, naming the addresses
// this simulator actually serves, so a tool that reads it finds the engine and its library.
func (s *Server) writeRuntimeConfig() error {
	type hostPort struct {
		Host string `json:"host"`
		Port int    `json:"port"`
	}
	split := func(raw string) (hostPort, error) {
		u, err := url.Parse(raw)
		if err != nil {
			return hostPort{}, err
		}
		port, _ := strconv.Atoi(u.Port())
		if port == 0 {
			port = map[string]int{"http": 80, "https": 443}[u.Scheme]
		}
		return hostPort{u.Hostname(), port}, nil
	}
	server, err := split(s.URL())
	if err != nil {
		return err
	}
	library, err := split(s.libraryURL)
	if err != nil {
		return err
	}
	body, err := json.MarshalIndent(map[string]any{
		"server": server, "library": library, "main_poll_time_ms": 200,
	}, "", "    ")
	if err != nil {
		return err
	}
	dir := filepath.Join(s.cfg.ConfigHome, "hailo-ollama")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, "hailo-ollama.json"), append(body, '\n'))
}

// countingWriter counts the body bytes a handler writes.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

var _ io.Writer = (*countingWriter)(nil)
