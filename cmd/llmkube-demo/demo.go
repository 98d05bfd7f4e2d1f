package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/sim/llamaserver"
)

// llamaServerName is the name under which this binary plays llama-server: the demo's Mac host
// launches it exactly as it launches the real llama-server, through a link of that name.
const llamaServerName = "llama-server"

// demoLog is where the demo mesh logs: the terminal belongs to the console. One file per
// process, so two demos on one machine never write over each other's log.
func demoLog() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("llmkube-demo-%d.log", os.Getpid()))
}

// runAsLlamaServer runs the llama-server simulator when the program was started under that
// name, and reports whether it did (with its exit status).
func runAsLlamaServer(ctx context.Context) (int, bool) {
	if filepath.Base(os.Args[0]) != llamaServerName {
		return 0, false
	}
	return llamaserver.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr), true
}

// startDemo runs the demo mesh in this process — real agents on loopback, simulated engines —
// and returns its join string and the function that stops it all, engines included.
func startDemo(ctx context.Context) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "llmkube-demo-")
	if err != nil {
		return "", nil, err
	}
	link := filepath.Join(dir, llamaServerName)
	if err := os.Symlink(exe, link); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("linking the llama-server simulator: %w", err)
	}
	logf, err := os.OpenFile(demoLog(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	log := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m, err := localmesh.StartDemo(ctx, link, log)
	if err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("%w (log: %s)", err, demoLog())
	}
	stop := func() {
		if err := m.Close(); err != nil {
			log.Warn("stopping the demo mesh", "err", err)
		}
		logf.Close()
		os.RemoveAll(dir)
	}
	return m.JoinString(), stop, nil
}
