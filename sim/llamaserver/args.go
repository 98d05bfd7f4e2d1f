package llamaserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ErrHelp and ErrVersion are returned by ParseArgs for -h/--help and --version; the caller prints
// Usage or Version and exits 0, like llama-server.
var (
	ErrHelp    = errors.New("help requested")
	ErrVersion = errors.New("version requested")
)

// Version is what --version prints, in llama-server's words (it prints to stderr).
const Version = "version: 5000 (llmsim00)\nbuilt with go for a simulator of llama-server\n"

// Usage is the short help -h prints.
const Usage = `usage: llama-server -m FILE [--host HOST] [--port PORT] [-c N] [-ngl N] [--alias NAME]
                    [--metrics] [-t N] [-np N] [-n N] [--mlock] [-fa on|off|auto] [--jinja]

A simulator of llama.cpp's llama-server. Other llama-server flags are accepted and ignored
with a warning. Simulator settings come from the environment:
  LLAMA_SIM_LOAD_DELAY       time /health answers 503 (default 200ms)
  LLAMA_SIM_TOKENS_PER_SEC   generation speed (default 0 = as fast as possible)
  LLAMA_SIM_TTFT             time to first token (default 0)
  LLAMA_SIM_HOLD_MEMORY      fraction of the model file's size to hold in RAM (default 0)
  LLAMA_SIM_CRASH_AFTER      exit with status 1 after N completion requests (default 0 = never)
  LLAMA_SIM_SEED             seed of answers whose request has none (default 0)
`

// Flags llama-server knows that take one value and that the simulator does not use. Listing
// them matters: an unknown flag's value is guessed, a known one's is certain, so "--temp -1" or
// "-ot .ffn_.*=CPU" never shift the rest of the command line.
var ignoredValueFlags = setOf(
	"-tb", "--threads-batch", "-b", "--batch-size", "-ub", "--ubatch-size", "--keep",
	"-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-ctkd", "--cache-type-k-draft",
	"-ctvd", "--cache-type-v-draft", "-dt", "--defrag-thold", "-sm", "--split-mode",
	"-ts", "--tensor-split", "-mg", "--main-gpu", "-dev", "--device", "-ot", "--override-tensor",
	"--numa", "--rope-scaling", "--rope-scale", "--rope-freq-base", "--rope-freq-scale",
	"--yarn-orig-ctx", "--yarn-ext-factor", "--yarn-attn-factor", "--yarn-beta-slow", "--yarn-beta-fast",
	"--temp", "--top-k", "--top-p", "--min-p", "--typical", "--repeat-penalty", "--repeat-last-n",
	"--presence-penalty", "--frequency-penalty", "--dry-multiplier", "--dry-base",
	"--dry-allowed-length", "--dry-penalty-last-n", "--mirostat", "--mirostat-lr", "--mirostat-ent",
	"--samplers", "--sampling-seq", "--grammar", "--grammar-file", "-j", "--json-schema",
	"--chat-template", "--chat-template-file", "--mmproj", "--mmproj-url", "-hf", "-hfr", "--hf-repo",
	"-hff", "--hf-file", "-hft", "--hf-token", "-mu", "--model-url", "--lora", "--control-vector",
	"-to", "--timeout", "--threads-http", "--slot-save-path", "--reasoning-format",
	"--reasoning-budget", "--api-key", "--api-key-file", "--ssl-key-file", "--ssl-cert-file",
	"--path", "--api-prefix", "--log-file", "-lv", "--verbosity", "--log-verbosity",
	"-md", "--model-draft", "--draft-max", "--draft", "--draft-n", "--draft-min", "--draft-p-min",
	"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "-devd", "--device-draft",
	"-cd", "--ctx-size-draft", "--cache-reuse", "-sps", "--slot-prompt-similarity",
	"-cram", "--cache-ram", "--ctx-checkpoints", "--fit", "-fitt", "--fit-target", "-fitc", "--fit-ctx",
	"-ncmoe", "--n-cpu-moe", "--poll", "-C", "--cpu-mask", "-Cr", "--cpu-range", "--prio",
	"--override-kv", "--models-dir", "--models-max", "--sleep-idle-seconds", "-tbd",
	"--threads-batch-draft", "-td", "--threads-draft", "--spec-replace", "--log-colors",
	"-dio", "--direct-io", "--props-file", "--alias-file",
)

// Boolean flags llama-server knows that the simulator does not use.
var ignoredBoolFlags = setOf(
	"--no-mmap", "--mmap", "--no-jinja", "--slots", "--no-slots", "--props", "--embedding",
	"--embeddings", "--reranking", "--rerank", "--no-webui", "--webui", "--no-ui", "--ui",
	"-v", "--verbose", "--log-verbose", "--log-disable", "--log-prefix", "--log-timestamps",
	"-cb", "--cont-batching", "-nocb", "--no-cont-batching", "--no-warmup", "-kvu", "--kv-unified",
	"-nkvo", "--no-kv-offload", "--no-context-shift", "--context-shift", "--swa-full", "--no-perf",
	"--check-tensors", "-cmoe", "--cpu-moe", "--no-mmproj", "--no-mmproj-offload", "--special",
	"-sp", "--verbose-prompt", "-e", "--escape", "--no-escape", "--offline", "--spm-infill",
	"--no-op-offload", "--no-repack", "--cache-prompt", "--no-cache-prompt", "--metrics-per-slot",
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// ParseArgs reads llama-server's command line (without the program name) into base. Flags the
// simulator does not use are accepted with a warning each, their values skipped. Like the real
// server it wants -m and takes each value as the next argument ("--port 8080"; "--port=8080"
// is an error there and here). -h and --version give ErrHelp and ErrVersion.
func ParseArgs(args []string, base Config) (cfg Config, warnings []string, err error) {
	cfg = base
	host, port := "127.0.0.1", "8080" // llama-server's defaults
	warn := func(format string, a ...any) { warnings = append(warnings, fmt.Sprintf(format, a...)) }

	for i := 0; i < len(args); i++ {
		arg := args[i]
		// value returns the next argument as this flag's value.
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("error: argument %s expects a value", arg)
			}
			i++
			return args[i], nil
		}
		intValue := func() (int, error) {
			v, err := value()
			if err != nil {
				return 0, err
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return 0, fmt.Errorf("error: argument %s: %q is not an integer", arg, v)
			}
			return n, nil
		}

		switch arg {
		case "-h", "--help", "--usage":
			return cfg, warnings, ErrHelp
		case "--version":
			return cfg, warnings, ErrVersion
		case "-m", "--model":
			if cfg.ModelPath, err = value(); err != nil {
				return cfg, warnings, err
			}
		case "--host":
			if host, err = value(); err != nil {
				return cfg, warnings, err
			}
		case "--port":
			if port, err = value(); err != nil {
				return cfg, warnings, err
			}
			if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
				return cfg, warnings, fmt.Errorf("error: invalid port %q: want a number from 0 to 65535", port)
			}
		case "-a", "--alias":
			if cfg.Alias, err = value(); err != nil {
				return cfg, warnings, err
			}
		case "-c", "--ctx-size":
			if cfg.CtxSize, err = intValue(); err != nil {
				return cfg, warnings, err
			}
			if cfg.CtxSize < 0 {
				return cfg, warnings, fmt.Errorf("error: context size %d is negative", cfg.CtxSize)
			}
		case "-ngl", "--gpu-layers", "--n-gpu-layers":
			v, verr := value()
			if verr != nil {
				return cfg, warnings, verr
			}
			// Newer llama-server also takes "auto" and "all".
			switch n, nerr := strconv.Atoi(v); {
			case v == "auto" || v == "all":
				cfg.GPULayers = -1
			case nerr != nil:
				return cfg, warnings, fmt.Errorf("error: argument %s: %q is not an integer, auto or all", arg, v)
			default:
				cfg.GPULayers = n
			}
		case "-t", "--threads":
			if cfg.Threads, err = intValue(); err != nil {
				return cfg, warnings, err
			}
		case "-np", "--parallel":
			if cfg.Parallel, err = intValue(); err != nil {
				return cfg, warnings, err
			}
			if cfg.Parallel == -1 {
				cfg.Parallel = 4 // "auto"
			}
			if cfg.Parallel < 1 {
				return cfg, warnings, fmt.Errorf("error: --parallel %d, want at least 1", cfg.Parallel)
			}
		case "-n", "--predict", "--n-predict":
			if cfg.NPredict, err = intValue(); err != nil {
				return cfg, warnings, err
			}
			if cfg.NPredict < -1 {
				cfg.NPredict = -1 // -2 means "until the context is full": unlimited here
			}
		case "-s", "--seed":
			v, verr := value()
			if verr != nil {
				return cfg, warnings, verr
			}
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil {
				return cfg, warnings, fmt.Errorf("error: argument %s: %q is not an integer", arg, v)
			}
			cfg.Seed = n
		case "--metrics":
			cfg.Metrics = true
		case "--mlock":
			cfg.MLock = true
		case "--jinja":
			cfg.Jinja = true
		case "-fa", "--flash-attn":
			// -fa takes on|off|auto since late 2025; older builds had a bare -fa meaning "on".
			if i+1 < len(args) {
				switch next := args[i+1]; next {
				case "on", "off", "auto":
					cfg.FlashAttn = next
					i++
					continue
				}
			}
			cfg.FlashAttn = "on"
		case "--lora-scaled":
			// Two values: FNAME SCALE.
			if i+2 >= len(args) {
				return cfg, warnings, fmt.Errorf("error: argument %s expects two values", arg)
			}
			warn("warn: argument %s %s %s is ignored by the simulator", arg, args[i+1], args[i+2])
			i += 2
		default:
			switch {
			case ignoredValueFlags[arg]:
				v, verr := value()
				if verr != nil {
					return cfg, warnings, verr
				}
				warn("warn: argument %s %s is ignored by the simulator", arg, v)
			case ignoredBoolFlags[arg]:
				warn("warn: argument %s is ignored by the simulator", arg)
			case strings.HasPrefix(arg, "-") && strings.Contains(arg, "="):
				name, _, _ := strings.Cut(arg, "=")
				if knownFlag(name) {
					return cfg, warnings, fmt.Errorf("error: invalid argument: %s (llama-server takes the value as the next argument: %s VALUE)", arg, name)
				}
				warn("warn: unknown argument %s ignored", arg)
			case strings.HasPrefix(arg, "-") && len(arg) > 1:
				// An unknown flag: take the next argument as its value unless it looks like a flag.
				if i+1 < len(args) && !looksLikeFlag(args[i+1]) {
					warn("warn: unknown argument %s %s ignored", arg, args[i+1])
					i++
				} else {
					warn("warn: unknown argument %s ignored", arg)
				}
			default:
				warn("warn: stray argument %q ignored", arg)
			}
		}
	}

	if cfg.ModelPath == "" {
		return cfg, warnings, errors.New("error: no model given: llama-server-sim needs -m FILE")
	}
	cfg.Addr = net.JoinHostPort(host, port)
	return cfg, warnings, cfg.validate()
}

// knownFlag reports whether name is a flag llama-server knows.
func knownFlag(name string) bool {
	switch name {
	case "-m", "--model", "--host", "--port", "-a", "--alias", "-c", "--ctx-size", "-ngl",
		"--gpu-layers", "--n-gpu-layers", "-t", "--threads", "-np", "--parallel", "-n", "--predict",
		"--n-predict", "-s", "--seed", "--metrics", "--mlock", "--jinja", "-fa", "--flash-attn":
		return true
	}
	return ignoredValueFlags[name] || ignoredBoolFlags[name]
}

// looksLikeFlag tells a flag from a value: "-x" and "--x" are flags, "-1" and "-0.5" are values.
func looksLikeFlag(s string) bool {
	if !strings.HasPrefix(s, "-") || s == "-" {
		return false
	}
	_, err := strconv.ParseFloat(s, 64)
	return err != nil
}
