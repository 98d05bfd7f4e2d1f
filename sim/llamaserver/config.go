// Package llamaserver simulates llama.cpp's llama-server: one process serving one GGUF file on a
// loopback port. It answers /health 503 while "loading" and 200 after, serves the OpenAI chat API
// (streaming with llama-server's timings, and not), /v1/models, /props, /slots and /metrics (only
// with --metrics, like the real server), and can hold memory in proportion to the model file and
// crash after N completions, so that memory watching and supervision have something real to see.
//
// The package is the server; cmd/llama-server-sim wraps it in a binary that takes llama-server's
// command line (see ParseArgs), so the agent launches it exactly as it launches the real one.
package llamaserver

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/llmkube/mesh/sim/simtext"
)

// Config is one simulated llama-server. The first block mirrors the real command line; the second
// holds the simulator's own knobs, which come from the environment (ConfigFromEnv) because the
// agent launches the binary with the real command line only.
type Config struct {
	Addr      string // listen address, "127.0.0.1:0" by default
	ModelPath string // -m: the model file (any readable file; a GGUF one avoids a warning)
	Alias     string // --alias: the name /v1/models reports; the model path when empty
	CtxSize   int    // -c: context size in tokens; 0 means the model's (DefaultCtxSize here)
	GPULayers int    // -ngl: reported in Stats.Settings, changes nothing else
	Threads   int    // -t: reported in the start-up log
	Parallel  int    // -np: slots that generate at once; more requests wait (requests_deferred)
	// UnifiedKV: the slots share one context of CtxSize tokens (llama-server's default with
	// -np auto); otherwise each slot gets CtxSize / Parallel (its default with -np N).
	UnifiedKV bool
	CacheRAM  int // --cache-ram in MiB (-1 = no limit, 0 = off): reported, changes nothing else
	// TrainContext is the model's training context, read from its GGUF header by Start (0 =
	// unknown). Like llama-server, -c 0 means it, and no slot gets more.
	TrainContext int
	NPredict     int    // -n: default token limit per answer; -1 = until the answer ends
	Metrics      bool   // --metrics: without it /metrics answers 501 like the real server
	MLock        bool   // --mlock
	FlashAttn    string // -fa: on, off or auto
	Jinja        bool   // --jinja
	Embedding    bool   // --embeddings: /v1/embeddings answers
	Pooling      string // --pooling; "" = the model's
	// RPC are the --rpc workers (simulated ggml-rpc-servers): greeted before the model loads,
	// then held as liveness links, the loss of one aborting the server (RPCMain).
	RPC []string

	LoadDelay    time.Duration // how long /health answers 503 "Loading model"
	TokensPerSec float64       // generation speed; 0 = as fast as possible
	TTFT         time.Duration // delay before the first token (prompt processing)
	HoldMemory   float64       // fraction of the model file's size to allocate and touch while loaded
	CrashAfter   int           // exit (Done with ErrCrashed) after this many completions; 0 = never
	// StreamErrorAfter ends every streamed answer with an error line after this many tokens
	// (as llama-server does when a slot fails mid-answer); 0 = never.
	StreamErrorAfter int
	Seed             int64 // seed for answers whose request carries none
	// StampTokens ends the text of every streamed chat's token with the time it began to be
	// written (simtext.Stamp): for measuring what a token's way to the client costs.
	StampTokens bool
	// LongestAnswer is the most tokens an answer runs before the simulated model ends it on its
	// own (simtext.AnswerLengthUpTo); 0 = simtext.MaxAnswer.
	LongestAnswer int
}

// DefaultCtxSize is the context llama-server uses when -c is 0 or absent and the model's own
// training context is unknown to the simulator.
const DefaultCtxSize = 4096

// DefaultConfig is a quick simulator on a loopback port: a short load, instant generation.
// ModelPath must still be set.
func DefaultConfig() Config {
	return Config{
		Addr:      "127.0.0.1:0",
		CtxSize:   DefaultCtxSize,
		Parallel:  4, // llama-server's "auto" parallel setting: 4 slots sharing one context
		UnifiedKV: true,
		CacheRAM:  8192,
		NPredict:  -1,
		FlashAttn: "auto",
		Jinja:     true, // llama-server's default since it reads tools through the model's template
		LoadDelay: 200 * time.Millisecond,
	}
}

// maxHoldMemory bounds LLAMA_SIM_HOLD_MEMORY: a real model's footprint is at most a few times its
// file (weights plus KV cache plus buffers); anything larger is a typo that would exhaust the host.
const maxHoldMemory = 8

// Environment variables ConfigFromEnv reads.
const (
	EnvLoadDelay     = "LLAMA_SIM_LOAD_DELAY"         // duration, e.g. "2s"
	EnvTokensPerSec  = "LLAMA_SIM_TOKENS_PER_SEC"     // float >= 0
	EnvTTFT          = "LLAMA_SIM_TTFT"               // duration
	EnvHoldMemory    = "LLAMA_SIM_HOLD_MEMORY"        // float in [0, 8]
	EnvCrashAfter    = "LLAMA_SIM_CRASH_AFTER"        // int >= 0
	EnvStreamError   = "LLAMA_SIM_STREAM_ERROR_AFTER" // int >= 0
	EnvSeed          = "LLAMA_SIM_SEED"               // int64
	EnvStampTokens   = "LLAMA_SIM_STAMP_TOKENS"       // true or false
	EnvLongestAnswer = "LLAMA_SIM_LONGEST_ANSWER"     // tokens: 0 or 8 to 100000
)

// ConfigFromEnv returns base with the simulator knobs set from the environment (read through
// getenv); unset variables keep base's values. Every value is validated with an error naming the
// variable.
func ConfigFromEnv(getenv func(string) string, base Config) (Config, error) {
	cfg := base
	if v := getenv(EnvLoadDelay); v != "" {
		d, err := parseDuration(EnvLoadDelay, v)
		if err != nil {
			return base, err
		}
		cfg.LoadDelay = d
	}
	if v := getenv(EnvTokensPerSec); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return base, fmt.Errorf("%s=%q: want a number of tokens per second >= 0 (0 = as fast as possible)", EnvTokensPerSec, v)
		}
		cfg.TokensPerSec = f
	}
	if v := getenv(EnvTTFT); v != "" {
		d, err := parseDuration(EnvTTFT, v)
		if err != nil {
			return base, err
		}
		cfg.TTFT = d
	}
	if v := getenv(EnvHoldMemory); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > maxHoldMemory || math.IsNaN(f) {
			return base, fmt.Errorf("%s=%q: want a fraction of the model file's size between 0 and %d", EnvHoldMemory, v, maxHoldMemory)
		}
		cfg.HoldMemory = f
	}
	if v := getenv(EnvCrashAfter); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return base, fmt.Errorf("%s=%q: want a number of completion requests >= 0 (0 = never crash)", EnvCrashAfter, v)
		}
		cfg.CrashAfter = n
	}
	if v := getenv(EnvStreamError); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return base, fmt.Errorf("%s=%q: want a number of tokens >= 0 (0 = streams end normally)", EnvStreamError, v)
		}
		cfg.StreamErrorAfter = n
	}
	if v := getenv(EnvStampTokens); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return base, fmt.Errorf("%s=%q: want true or false", EnvStampTokens, v)
		}
		cfg.StampTokens = b
	}
	if v := getenv(EnvLongestAnswer); v != "" {
		n, err := simtext.ParseLongestAnswer(EnvLongestAnswer, v)
		if err != nil {
			return base, err
		}
		cfg.LongestAnswer = n
	}
	if v := getenv(EnvSeed); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return base, fmt.Errorf("%s=%q: want an integer seed", EnvSeed, v)
		}
		cfg.Seed = n
	}
	return cfg, cfg.validate()
}

func parseDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration >= 0 such as \"250ms\" or \"2s\"", name, v)
	}
	return d, nil
}

// validate checks what Start relies on, except the model file, which Start opens itself.
func (c Config) validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("llamaserver: empty listen address")
	case c.CtxSize < 0:
		return fmt.Errorf("llamaserver: context size %d is negative", c.CtxSize)
	case c.Parallel < 1:
		return fmt.Errorf("llamaserver: parallel slots %d, want at least 1", c.Parallel)
	case c.NPredict < -1:
		return fmt.Errorf("llamaserver: n_predict %d, want -1 (unlimited) or more", c.NPredict)
	case c.LoadDelay < 0 || c.TTFT < 0:
		return fmt.Errorf("llamaserver: negative load delay or TTFT")
	case c.TokensPerSec < 0 || math.IsNaN(c.TokensPerSec) || math.IsInf(c.TokensPerSec, 0):
		return fmt.Errorf("llamaserver: tokens per second %v, want >= 0", c.TokensPerSec)
	case c.HoldMemory < 0 || c.HoldMemory > maxHoldMemory || math.IsNaN(c.HoldMemory):
		return fmt.Errorf("llamaserver: hold memory fraction %v, want 0..%d", c.HoldMemory, maxHoldMemory)
	case c.CrashAfter < 0:
		return fmt.Errorf("llamaserver: crash after %d, want >= 0", c.CrashAfter)
	case c.StreamErrorAfter < 0:
		return fmt.Errorf("llamaserver: stream error after %d, want >= 0", c.StreamErrorAfter)
	case c.CacheRAM < -1:
		return fmt.Errorf("llamaserver: cache-ram %d, want -1 (no limit) or more", c.CacheRAM)
	}
	if err := simtext.CheckLongestAnswer(c.LongestAnswer); err != nil {
		return fmt.Errorf("llamaserver: %w", err)
	}
	switch c.FlashAttn {
	case "", "on", "off", "auto":
	default:
		return fmt.Errorf("llamaserver: flash attention %q, want on, off or auto", c.FlashAttn)
	}
	return nil
}

// slotCtx is the context one request gets: the whole context when the slots share it (and
// compete for it), an even share of it otherwise, and never more than the model was trained for
// (llama-server caps it, saying so).
func (c Config) slotCtx() int {
	n := c.ctxSize()
	if !c.UnifiedKV {
		n /= c.Parallel
	}
	if c.TrainContext > 0 {
		n = min(n, c.TrainContext)
	}
	return n
}

// capped reports whether slotCtx is less than the slots were given.
func (c Config) capped() bool {
	n := c.ctxSize()
	if !c.UnifiedKV {
		n /= c.Parallel
	}
	return n > c.slotCtx()
}

// ctxSize is the context in effect: -c 0 means the model's training context (DefaultCtxSize
// when the header does not say).
func (c Config) ctxSize() int {
	switch {
	case c.CtxSize > 0:
		return c.CtxSize
	case c.TrainContext > 0:
		return c.TrainContext
	}
	return DefaultCtxSize
}
