package llamaserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
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
const Usage = `usage: llama-server -m FILE [--host HOST] [--port PORT] [-c N] [-np N] [-ngl N] [--alias NAME]
                    [--metrics] [-t N] [-n N] [--cache-ram N] [--mlock] [-fa on|off|auto] [--jinja]

A simulator of llama.cpp's llama-server. Like the real server it refuses a flag it does not
know; the flags it knows are listed in its flag table (sim/llamaserver/args.go). Simulator
settings come from the environment:
  LLAMA_SIM_LOAD_DELAY       time /health answers 503 (default 200ms)
  LLAMA_SIM_TOKENS_PER_SEC   generation speed (default 0 = as fast as possible)
  LLAMA_SIM_TTFT             time to first token (default 0)
  LLAMA_SIM_HOLD_MEMORY      fraction of the model file's size to hold in RAM (default 0)
  LLAMA_SIM_CRASH_AFTER      exit with status 1 after N completion requests (default 0 = never)
  LLAMA_SIM_STREAM_ERROR_AFTER  end each stream with an error line after N tokens (default 0 = never)
  LLAMA_SIM_SEED             seed of answers whose request has none (default 0)
  LLAMA_SIM_STAMP_TOKENS     end each streamed token with the time it began to be written (default false)
`

// parsing is a command line being read: the config, and what becomes its address.
type parsing struct {
	cfg        Config
	host, port string
	parallel   int    // -np as given; autoSlots when absent
	unified    string // "on" (-kvu), "off" (-no-kvu) or "" (llama-server decides)
}

// autoSlots is -np -1, llama-server's default: "auto", which is 4 slots sharing one context.
const autoSlots = -1

// flag is one llama-server flag the simulator knows. A flag with a sample takes a value (the
// next argument: llama-server has no "--flag=value" form); set reads it. A flag with a nil set
// is accepted and changes nothing in the simulator. The samples are valid values, so a test can
// run every flag through the real llama-server and the simulator alike.
type flag struct {
	names  []string
	sample string
	set    func(p *parsing, v string) error
}

// flags is every flag the simulator accepts. Each is a flag the real llama-server has, with the
// same arity (a test checks both against the real binary); any other flag is refused, as the
// real server refuses it.
var flags = []flag{
	{names: []string{"-m", "--model"}, sample: "model.gguf", set: func(p *parsing, v string) error { p.cfg.ModelPath = v; return nil }},
	{names: []string{"--host"}, sample: "127.0.0.1", set: func(p *parsing, v string) error { p.host = v; return nil }},
	{names: []string{"--port"}, sample: "8080", set: func(p *parsing, v string) error {
		if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
			return errors.New("invalid port: want a number from 0 to 65535")
		}
		p.port = v
		return nil
	}},
	{names: []string{"-a", "--alias"}, sample: "tiny", set: func(p *parsing, v string) error { p.cfg.Alias = v; return nil }},
	{names: []string{"-c", "--ctx-size"}, sample: "2048", set: func(p *parsing, v string) error {
		return atLeast(v, 0, &p.cfg.CtxSize)
	}},
	{names: []string{"-np", "--parallel"}, sample: "1", set: func(p *parsing, v string) error {
		if err := atoi(v, &p.parallel); err != nil {
			return err
		}
		if p.parallel != autoSlots && p.parallel < 1 {
			return errors.New("error: invalid value for n_parallel")
		}
		return nil
	}},
	{names: []string{"-kvu", "--kv-unified"}, set: func(p *parsing, _ string) error { p.unified = "on"; return nil }},
	{names: []string{"-no-kvu", "--no-kv-unified"}, set: func(p *parsing, _ string) error { p.unified = "off"; return nil }},
	{names: []string{"-cram", "--cache-ram"}, sample: "256", set: func(p *parsing, v string) error {
		return atLeast(v, -1, &p.cfg.CacheRAM)
	}},
	{names: []string{"-ngl", "--gpu-layers", "--n-gpu-layers"}, sample: "99", set: func(p *parsing, v string) error {
		if v == "auto" || v == "all" {
			p.cfg.GPULayers = -1
			return nil
		}
		return atoi(v, &p.cfg.GPULayers)
	}},
	{names: []string{"-t", "--threads"}, sample: "2", set: func(p *parsing, v string) error { return atoi(v, &p.cfg.Threads) }},
	{names: []string{"-n", "--predict", "--n-predict"}, sample: "16", set: func(p *parsing, v string) error {
		if err := atoi(v, &p.cfg.NPredict); err != nil {
			return err
		}
		p.cfg.NPredict = max(p.cfg.NPredict, -1) // -2 means "until the context is full": unlimited here
		return nil
	}},
	{names: []string{"-s", "--seed"}, sample: "42", set: func(p *parsing, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return errors.New("stoi")
		}
		p.cfg.Seed = n
		return nil
	}},
	{names: []string{"-fa", "--flash-attn"}, sample: "on", set: func(p *parsing, v string) error {
		switch v {
		case "on", "off", "auto":
			p.cfg.FlashAttn = v
			return nil
		}
		return fmt.Errorf("error: unknown value for --flash-attn: '%s'", v)
	}},
	{names: []string{"--metrics"}, set: func(p *parsing, _ string) error { p.cfg.Metrics = true; return nil }},
	{names: []string{"--mlock"}, set: func(p *parsing, _ string) error { p.cfg.MLock = true; return nil }},
	{names: []string{"--jinja"}, set: func(p *parsing, _ string) error { p.cfg.Jinja = true; return nil }},
	{names: []string{"--no-jinja"}, set: func(p *parsing, _ string) error { p.cfg.Jinja = false; return nil }},
	{names: []string{"--embedding", "--embeddings"}, set: func(p *parsing, _ string) error { p.cfg.Embedding = true; return nil }},
	{names: []string{"--pooling"}, sample: "mean", set: func(p *parsing, v string) error {
		switch v {
		case "none", "mean", "cls", "last", "rank":
			p.cfg.Pooling = v
			return nil
		}
		return fmt.Errorf("error: unknown value for --pooling: '%s'", v)
	}},

	{names: []string{"--rpc"}, sample: "127.0.0.1:50052", set: func(p *parsing, v string) (err error) {
		p.cfg.RPC, err = parseRPC(v)
		return err
	}},
	{names: []string{"-ts", "--tensor-split"}, sample: "1,1"},

	// Flags the simulator accepts and ignores: the rest of the driver's allowlist, and a few
	// that people add by habit.
	{names: []string{"-tb", "--threads-batch"}, sample: "2"},
	{names: []string{"-b", "--batch-size"}, sample: "512"},
	{names: []string{"-ub", "--ubatch-size"}, sample: "256"},
	{names: []string{"-ctk", "--cache-type-k"}, sample: "q8_0"},
	{names: []string{"-ctv", "--cache-type-v"}, sample: "q8_0"},
	{names: []string{"--temp"}, sample: "0.7"},
	{names: []string{"--top-k"}, sample: "40"},
	{names: []string{"--top-p"}, sample: "0.9"},
	{names: []string{"-to", "--timeout"}, sample: "600"},
	{names: []string{"--cache-reuse"}, sample: "256"},
	{names: []string{"--mmap"}},
	{names: []string{"--no-mmap"}},
	{names: []string{"--webui"}},
	{names: []string{"--no-webui"}},
	{names: []string{"--slots"}},
	{names: []string{"--no-slots"}},
	{names: []string{"--no-warmup"}},
	{names: []string{"-cb", "--cont-batching"}},
	{names: []string{"-nocb", "--no-cont-batching"}},
	{names: []string{"-v", "--verbose", "--log-verbose"}},
	{names: []string{"--log-disable"}},
}

// flagsByName indexes flags by every spelling.
var flagsByName = func() map[string]*flag {
	m := map[string]*flag{}
	for i := range flags {
		for _, n := range flags[i].names {
			m[n] = &flags[i]
		}
	}
	return m
}()

// Flags lists every flag the simulator accepts with a valid sample value ("" for a flag
// without value), for tests that run the same command lines through the real llama-server.
func Flags() map[string]string {
	out := make(map[string]string, len(flagsByName))
	for n, f := range flagsByName {
		out[n] = f.sample
	}
	return out
}

func atoi(v string, out *int) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return errors.New("stoi") // llama-server's words: std::stoi threw
	}
	*out = n
	return nil
}

func atLeast(v string, least int, out *int) error {
	if err := atoi(v, out); err != nil {
		return err
	}
	if *out < least {
		return fmt.Errorf("%d is below %d", *out, least)
	}
	return nil
}

// ParseArgs reads llama-server's command line (without the program name) into base, as strictly
// as llama-server: a flag it does not know, a missing or malformed value, or "--flag=value" is
// an error, in llama-server's words, and the program exits 1. Flags are read in order, so
// -h and --version (ErrHelp, ErrVersion) end the reading where they stand.
func ParseArgs(args []string, base Config) (Config, error) {
	p := parsing{cfg: base, host: "127.0.0.1", port: "8080", parallel: autoSlots} // llama-server's defaults
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch arg {
		case "-h", "--help", "--usage":
			return p.cfg, ErrHelp
		case "--version":
			return p.cfg, ErrVersion
		}
		f, ok := flagsByName[arg]
		if !ok {
			return p.cfg, fmt.Errorf("error: invalid argument: %s", arg)
		}
		var value string
		if f.sample != "" {
			if i+1 >= len(args) {
				return p.cfg, fmt.Errorf("error while handling argument %q: expected value for argument", arg)
			}
			i++
			value = args[i]
		}
		if f.set != nil {
			if err := f.set(&p, value); err != nil {
				return p.cfg, fmt.Errorf("error while handling argument %q: %v", arg, err)
			}
		}
	}
	if p.cfg.ModelPath == "" {
		return p.cfg, errors.New("error: no model given: llama-server-sim needs -m FILE")
	}
	// -np -1 ("auto") is 4 slots sharing one context; slots asked for explicitly split it,
	// unless -kvu says to share it.
	p.cfg.Parallel, p.cfg.UnifiedKV = p.parallel, p.unified == "on"
	if p.parallel == autoSlots {
		p.cfg.Parallel, p.cfg.UnifiedKV = 4, p.unified != "off"
	}
	p.cfg.Addr = net.JoinHostPort(p.host, p.port)
	return p.cfg, p.cfg.validate()
}
