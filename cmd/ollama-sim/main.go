// Command ollama-sim runs a simulated Ollama daemon and, on a second port, the registry it pulls
// from. Settings come from OLLAMA_SIM_* environment variables, overridden by flags. It prints one
// ready line on stdout:
//
//	ollama-sim: serving http://127.0.0.1:11434 registry http://127.0.0.1:40123
//
// and exits 0 on SIGTERM or SIGINT. "ollama-sim serve" is accepted, like "ollama serve".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/llmkube/mesh/sim/ollama"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	base := ollama.DefaultConfig()
	base.Addr = "127.0.0.1:11434" // Ollama's own default
	cfg, err := ollama.ConfigFromEnv(getenv, base)
	if err != nil {
		fmt.Fprintln(stderr, "ollama-sim:", err)
		return 2
	}

	fs := flag.NewFlagSet("ollama-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ollama-sim [serve] [flags]\n\nA simulated Ollama daemon and registry. Flags override OLLAMA_SIM_* variables.\nModels: %s\n\n",
			strings.Join(ollama.CatalogueNames(), ", "))
		fs.PrintDefaults()
	}
	preloaded := strings.Join(cfg.Preloaded, ",")
	keepAlive := keepAliveString(cfg.KeepAlive)
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "daemon listen address ("+ollama.EnvAddr+")")
	fs.StringVar(&cfg.RegistryAddr, "registry-addr", cfg.RegistryAddr, "registry listen address ("+ollama.EnvRegistryAddr+")")
	fs.StringVar(&cfg.Version, "version", cfg.Version, "version /api/version reports ("+ollama.EnvVersion+")")
	fs.StringVar(&preloaded, "preloaded", preloaded, "comma-separated models pulled at start ("+ollama.EnvPreloaded+")")
	fs.Int64Var(&cfg.PullBytesPerSec, "pull-rate", cfg.PullBytesPerSec, "simulated download bytes per second, 0 = instant ("+ollama.EnvPullBytesPerSec+")")
	fs.DurationVar(&cfg.LoadDelay, "load-delay", cfg.LoadDelay, "time to load a model ("+ollama.EnvLoadDelay+")")
	fs.Float64Var(&cfg.TokensPerSec, "tokens-per-sec", cfg.TokensPerSec, "generation speed, 0 = as fast as possible ("+ollama.EnvTokensPerSec+")")
	fs.DurationVar(&cfg.TTFT, "ttft", cfg.TTFT, "time to first token ("+ollama.EnvTTFT+")")
	fs.StringVar(&keepAlive, "keep-alive", keepAlive, "default keep_alive: seconds or a duration, negative = forever ("+ollama.EnvKeepAlive+")")
	fs.IntVar(&cfg.MaxLoaded, "max-loaded", cfg.MaxLoaded, "models loaded at once ("+ollama.EnvMaxLoaded+")")
	fs.IntVar(&cfg.NumCtx, "num-ctx", cfg.NumCtx, "default num_ctx ("+ollama.EnvNumCtx+")")
	fs.Int64Var(&cfg.VRAM, "vram", cfg.VRAM, "GPU memory in bytes, 0 = CPU only ("+ollama.EnvVRAM+")")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of answers whose request has none ("+ollama.EnvSeed+")")
	fs.StringVar(&cfg.ModelsDir, "models", cfg.ModelsDir, "folder the pulled models' blobs are written to, like OLLAMA_MODELS ("+ollama.EnvModelsDir+")")
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ollama-sim: unexpected arguments %q\n", fs.Args())
		return 2
	}
	cfg.Preloaded = ollama.SplitList(preloaded)
	if cfg.KeepAlive, err = ollama.ParseKeepAlive(keepAlive); err != nil {
		fmt.Fprintf(stderr, "ollama-sim: -keep-alive %q: %v\n", keepAlive, err)
		return 2
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := ollama.Start(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "ollama-sim:", err)
		return 1
	}
	fmt.Fprintf(stdout, "ollama-sim: serving %s registry %s\n", s.URL(), s.RegistryURL())
	<-s.Done() // Start's ctx ends on SIGTERM/SIGINT, which closes the server
	return 0
}

func keepAliveString(d time.Duration) string {
	if d == ollama.Forever {
		return "-1"
	}
	return d.String()
}
