// Command hailo-sim runs the hailo-ollama simulator (package sim/hailo), as release 5.1.1 or, with
// --version (HAILO_SIM_VERSION), 5.3.0 or 5.4: the engine on one listener and Hailo's model
// library on another. It prints one line when both serve:
//
//	hailo-sim: serving http://127.0.0.1:8000 library http://127.0.0.1:41234
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
	"path/filepath"
	"strings"
	"syscall"

	"github.com/llmkube/mesh/sim/hailo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// envHome is the simulator's home: its XDG data and config folders live under it.
const envHome = "HAILO_SIM_HOME"

// settings maps each flag to the environment variable it mirrors; a flag given wins.
var settings = []struct{ flag, env, usage string }{
	{"version", hailo.EnvVersion, "hailo-ollama `release` to play: 5.1.1, 5.3.0 or 5.4 (default 5.1.1)"},
	{"listen", hailo.EnvListen, "engine address `ip:port` (default: the release's own setting, OLLAMA_HOST for 5.3 and later, the JSON \"server\" in <home>/.config/hailo-ollama/hailo-ollama.json for 5.1.1; without it 127.0.0.1:8000, loopback where hailo-ollama would take 0.0.0.0)"},
	{"library-listen", hailo.EnvLibraryListen, "model library address `ip:port` (default 127.0.0.1:0, a free port)"},
	{"library-url", hailo.EnvLibraryURL, "library `URL` /api/pull fetches from (default: this simulator's own library)"},
	{"library-version", hailo.EnvLibraryVersion, "release `folder` of the 5.4 library form /v<version>/blob/<file> (default 5.4.0)"},
	{"data-dir", hailo.EnvDataDir, "hailo-ollama data `folder` holding models/ (default <home>/.local/share/hailo-ollama)"},
	{"hef-size", hailo.EnvHEFSize, "exact `size` of every fake HEF: 4096, 64KiB, 1MiB… (default 1MiB)"},
	{"real-sizes", hailo.EnvRealSizes, "`true` reports each model's real HEF size (Hailo's) where the library and daemon report sizes, the files staying hef-size (default false)"},
	{"preloaded", hailo.EnvPreloaded, "comma-separated `models` already downloaded at start, e.g. qwen2:1.5b"},
	{"filename-manifests", hailo.EnvFilenameManifests, "comma-separated `models` whose manifest uses the 5.4 hef_filename form"},
	{"tokens-per-second", hailo.EnvTokensPerSecond, "generation `rate`; 0 is as fast as possible (default \"model\": Hailo's figure per model)"},
	{"ttft", hailo.EnvTTFT, "time to first token, a `duration` (default \"model\")"},
	{"load-time", hailo.EnvLoadTime, "time to load a model, a `duration` (default \"model\")"},
	{"switch-delay", hailo.EnvSwitchDelay, "pause before loading another model, a `duration` (default 2s)"},
	{"context", hailo.EnvContext, "context size in `tokens`; a longer prompt is a 500 (default 2048)"},
	{"final-chunks", hailo.EnvFinalChunks, "`true` sends the last chunk of streamed chats and pulls, which hailo-ollama 5.1.1 does not (default false: the connection closes after the last token)"},
}

const usageHead = `Usage: hailo-sim [flags]

Simulates hailo-ollama (5.1.1, 5.3.0 or 5.4) on a Hailo-10H, with its quirks, and Hailo's
model library.
Every flag mirrors an environment variable (named after it); a flag given wins.

Files: the simulator runs in its own home, never in the user's: its data folder is
<home>/.local/share/hailo-ollama and it writes <home>/.config/hailo-ollama/hailo-ollama.json,
as a real install's XDG_DATA_HOME and XDG_CONFIG_HOME hold them, so it needs no set-up and
can never touch a real hailo-ollama's models. With --home (or HAILO_SIM_HOME) the home is kept
between runs (pulled models stay); without, a fresh temporary home is made and removed at exit.

Exit status: 0 after SIGINT/SIGTERM, 2 for bad settings, 1 when it cannot start (a port taken).

Flags:
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hailo-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHead)
		fs.PrintDefaults()
	}
	values := map[string]*string{}
	for _, s := range settings {
		values[s.env] = fs.String(s.flag, "", s.usage+" ["+s.env+"]")
	}
	home := fs.String("home", "", "simulator `home` folder, kept between runs (default: a temporary one) ["+envHome+"]")
	jsonLogs := fs.Bool("log-json", false, "write logs to stderr as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hailo-sim: unexpected arguments %q\n", fs.Args())
		return 2
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	merged := func(key string) string {
		for _, s := range settings {
			if s.env == key && given[s.flag] {
				return *values[key]
			}
		}
		return getenv(key)
	}

	var log *slog.Logger
	if *jsonLogs {
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	} else {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}

	if !given["home"] {
		*home = getenv(envHome)
	}
	if *home == "" {
		tmp, err := os.MkdirTemp("", "hailo-sim-")
		if err != nil {
			fmt.Fprintf(stderr, "hailo-sim: making a temporary home: %v\n", err)
			return 1
		}
		defer os.RemoveAll(tmp)
		*home = tmp
	}
	base := hailo.DefaultConfig()
	base.Listen = "127.0.0.1:8000"
	base.DataDir = filepath.Join(*home, ".local", "share", "hailo-ollama")
	base.ConfigHome = filepath.Join(*home, ".config")
	cfg, err := hailo.ConfigFromEnv(merged, base)
	if err == nil && merged(hailo.EnvListen) == "" {
		cfg, err = releaseBind(cfg, getenv, log)
	}
	if err != nil {
		fmt.Fprintf(stderr, "hailo-sim: bad settings:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return 2
	}

	srv, err := hailo.Start(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "hailo-sim: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "hailo-sim: serving %s library %s\n", srv.URL(), srv.LibraryURL())
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		fmt.Fprintf(stderr, "hailo-sim: closing: %v\n", err)
		return 1
	}
	return 0
}

// releaseBind binds the engine where the release would, by its own setting (hailo.BindSetting),
// when no --listen says otherwise. Without that setting the release would take every interface;
// the simulator stays on loopback and says so.
func releaseBind(cfg hailo.Config, getenv func(string) string, log *slog.Logger) (hailo.Config, error) {
	addr, from, ok, err := hailo.BindSetting(cfg.Version, getenv, cfg.ConfigHome)
	if err != nil {
		return cfg, err
	}
	if !ok {
		log.Info("the release's bind setting is absent: hailo-ollama would bind "+hailo.DefaultBind+"; the simulator keeps "+cfg.Listen,
			"version", cfg.Version, "setting", from)
		return cfg, nil
	}
	cfg.Listen = addr
	log.Info("binding by the release's own setting", "version", cfg.Version, "setting", from, "listen", addr)
	return cfg, cfg.Validate()
}
