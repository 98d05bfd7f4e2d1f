// Package simserver is the HTTP scaffolding the engine simulators (sim/llamaserver, sim/ollama,
// sim/hailo) share: serving listeners until the simulator stops, counting requests for
// GET /_sim/stats, writing JSON bodies, reading OpenAI message content, and choosing and spacing
// generated tokens. Only mechanism that is the same in every simulator lives here; routes, error
// shapes and each engine's quirks stay in the simulator that imitates them. Like the simulators,
// it imports nothing of the product.
package simserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// shutdownGrace is how long a graceful stop waits for requests in flight before giving up.
const shutdownGrace = 2 * time.Second

// NewHTTPServer is an http.Server for one of a simulator's listeners: a header timeout so a
// stuck client cannot hold a connection forever, and net/http's own complaints sent to log at
// debug level rather than to stderr.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	f := &freshConns{conns: map[net.Conn]struct{}{}}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnState:         f.track,
	}
	srv.RegisterOnShutdown(f.close)
	return srv
}

// freshConns are a server's connections that have not begun a request. net/http's Shutdown
// closes idle connections at once but waits five seconds for fresh ones, longer than
// shutdownGrace: a client's spare connection (Go's transport dials one for a request that an
// idle connection then took) made a simulator's stop fail with the deadline. Nothing is lost
// by closing them when the server shuts down: they carry no request.
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  bool
}

func (f *freshConns) track(c net.Conn, s http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case s == http.StateNew && f.down:
		c.Close() // accepted as the listener closed
	case s == http.StateNew:
		f.conns[c] = struct{}{}
	default:
		delete(f.conns, c)
	}
}

// close runs when Shutdown has closed the listeners.
func (f *freshConns) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = true
	for c := range f.conns {
		c.Close()
	}
	clear(f.conns)
}

// Logger is log, or a logger that drops everything when log is nil.
func Logger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// Run is one simulator's life: the context its handlers start from, the goroutines serving its
// listeners, and the single moment it stops.
type Run struct {
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	served sync.WaitGroup
	done   chan struct{}
	once   sync.Once
}

// NewRun starts a run; it lasts until End.
func NewRun(log *slog.Logger) *Run {
	r := &Run{log: log, done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// BaseContext fits http.Server.BaseContext: requests' contexts are cancelled when the run ends,
// so generations and streams in progress stop instead of holding a graceful shutdown up.
func (r *Run) BaseContext(net.Listener) context.Context { return r.ctx }

// Serve serves srv on ln in the background until srv is shut down or closed.
func (r *Run) Serve(srv *http.Server, ln net.Listener) {
	r.served.Add(1)
	go func() {
		defer r.served.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("serve", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// CloseWhen calls closeFn when ctx ends, unless the run has ended first.
func (r *Run) CloseWhen(ctx context.Context, closeFn func() error) {
	go func() {
		select {
		case <-ctx.Done():
			closeFn()
		case <-r.done:
		}
	}()
}

// End ends the run once: it cancels the handlers' base context, calls stop (which shuts the
// listeners' servers down, and whatever else the simulator must release), waits for Serve's
// goroutines and closes Done. Later calls do nothing.
func (r *Run) End(stop func()) {
	r.once.Do(func() {
		r.cancel()
		stop()
		r.served.Wait()
		close(r.done)
	})
}

// Done is closed once End has finished.
func (r *Run) Done() <-chan struct{} { return r.done }

// Shutdown stops every server gracefully, waiting up to two seconds in all for requests in
// flight, and reports what failed, the deadline included.
func Shutdown(srvs ...*http.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	errs := make([]error, len(srvs))
	for i, srv := range srvs {
		errs[i] = srv.Shutdown(ctx)
	}
	return errors.Join(errs...)
}
