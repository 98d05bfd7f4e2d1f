package llamaserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"time"
)

// Main is the whole llama-server stand-in as a program (cmd/llama-server-sim, and any binary
// that links it and is started under the name llama-server); it returns the exit status: 0 after SIGTERM/SIGINT, 1 on a bad
// command line, a model that cannot be opened, a simulated crash, or the loss of an --rpc
// worker (the real server aborts then).
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	started := time.Now()
	cfg, err := ParseArgs(args, DefaultConfig())
	switch {
	case errors.Is(err, ErrHelp):
		fmt.Fprint(stdout, Usage)
		return 0
	case errors.Is(err, ErrVersion):
		fmt.Fprint(stderr, Version)
		return 0
	case err != nil:
		fmt.Fprintln(stderr, err)
		fmt.Fprintln(stderr, "\nto show complete usage, run with -h")
		return 1
	}
	if cfg, err = ConfigFromEnv(getenv, cfg); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}

	threads := cfg.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	fmt.Fprintf(stderr, "build: 5000 (llmsim00) with %s for %s/%s (llama-server simulator)\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(stderr, "system info: n_threads = %d, n_threads_batch = %d, total_threads = %d\n", threads, threads, runtime.NumCPU())
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// logE writes an error line as llama-server logs one: its time since start, level E.
	logE := func(format string, a ...any) {
		d := time.Since(started)
		fmt.Fprintf(stderr, "%d.%02d.%03d.%03d E %s\n", int(d.Minutes()), int(d.Seconds())%60,
			d.Milliseconds()%1000, d.Microseconds()%1000, fmt.Sprintf(format, a...))
	}
	var lost <-chan string // the first --rpc worker whose link closed; nil without workers
	if len(cfg.RPC) > 0 {
		links, err := dialRPC(ctx, cfg.RPC)
		if err != nil {
			logE("Failed to connect to %v", err) // llama-server's words
			logE("srv    load_model: failed to load model, '%s'", cfg.ModelPath)
			logE("srv  llama_server: exiting due to model loading error")
			return 1
		}
		defer links.close()
		lost = links.lost
		for i, ep := range cfg.RPC {
			fmt.Fprintf(stderr, "load_tensors: RPC%d[%s] attached (simulated: no tensors cross the link)\n", i, ep)
		}
	}
	s, err := Start(ctx, cfg, log)
	if errors.Is(err, ErrBind) {
		// llama-server's own words, the reason first.
		logE("srv  llama_server: couldn't bind HTTP server socket, address: %s: %v", cfg.Addr, err)
		logE("srv  llama_server: exiting due to HTTP server error")
		return 1
	}
	if err != nil {
		// llama-server's own words when the model cannot be loaded, the reason first.
		fmt.Fprintf(stderr, "srv    load_model: loading model '%s'\n", cfg.ModelPath)
		logE("%v", err)
		logE("srv    load_model: failed to load model, '%s'", cfg.ModelPath)
		logE("srv  llama_server: exiting due to model loading error")
		return 1
	}
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL(), "http://"))
	fmt.Fprintf(stderr, "main: HTTP server is listening, hostname: %s, port: %s, http threads: %d\n", host, port, cfg.Parallel+4)
	fmt.Fprintln(stderr, "main: loading model")
	fmt.Fprintf(stderr, "srv    load_model: loading model '%s'\n", cfg.ModelPath)
	slotCtx, capped := s.SlotContext()
	if capped {
		fmt.Fprintf(stderr, "srv    load_model: the slot context exceeds the training context of the model (%d) - capping\n", slotCtx)
	}
	fmt.Fprintf(stderr, "srv    load_model: initializing, n_slots = %d, n_ctx_slot = %d, kv_unified = '%t'\n", cfg.Parallel, slotCtx, cfg.UnifiedKV)

	select {
	case <-s.Ready():
		fmt.Fprintln(stderr, "main: model loaded")
		fmt.Fprintf(stderr, "main: server is listening on %s - starting the main loop\n", s.URL())
		fmt.Fprintln(stderr, "srv  update_slots: all slots are idle")
	case <-s.Done():
	case ep := <-lost:
		return rpcAbort(s, ep, logE)
	}
	select {
	case <-s.Done():
	case ep := <-lost:
		return rpcAbort(s, ep, logE)
	}
	if errors.Is(s.Err(), ErrCrashed) {
		fmt.Fprintf(stderr, "llama-server-sim: simulated crash after %d completion requests (%s=%d)\n",
			cfg.CrashAfter, EnvCrashAfter, cfg.CrashAfter)
		return 1
	}
	fmt.Fprintln(stderr, "srv    operator(): operator(): cleaning up before exit...")
	return 0
}

// rpcAbort ends the server when a worker's link closed, as the real main aborts on a dead
// worker: nothing reconnects, the agent sees the process exit.
func rpcAbort(s *Server, ep string, logE func(string, ...any)) int {
	logE("ggml_rpc: the connection to RPC server %s was lost: aborting", ep)
	s.Close()
	return 1
}
