// Package ollama simulates an Ollama daemon and the Ollama registry it pulls from: the native
// API (/api/tags, /api/pull with NDJSON progress, /api/generate loads and unloads, /api/ps,
// /api/chat, /api/show, /api/delete), the OpenAI-compatible /v1/chat/completions, and, on a
// second listener as the real registry is another host, the registry's manifest and blob routes
// so a model can be sized before it is pulled. Sizes are reported, never transferred: pulling a
// 2 GB model allocates nothing.
//
// The catalogue holds a few real models (llama3.2:1b, llama3.2:3b, qwen2.5:0.5b, gemma3:1b)
// with their real sizes and architecture figures. Answers are deterministic for a seed.
package ollama

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/sim/simtext"
)

// Config is one simulated Ollama daemon and its registry.
type Config struct {
	Addr         string // daemon listen address; "127.0.0.1:0" by default
	RegistryAddr string // registry listen address; "127.0.0.1:0" by default
	Version      string // what /api/version reports

	Preloaded       []string      // models already pulled at start ("llama3.2:1b")
	PullBytesPerSec int64         // simulated download speed; 0 = instant
	LoadDelay       time.Duration // time to load a model into memory
	TokensPerSec    float64       // generation speed; 0 = as fast as possible
	TTFT            time.Duration // delay before the first token
	KeepAlive       time.Duration // default keep_alive (OLLAMA_KEEP_ALIVE); Forever never unloads
	MaxLoaded       int           // models loaded at once (OLLAMA_MAX_LOADED_MODELS); the idlest goes first
	NumCtx          int           // default num_ctx
	VRAM            int64         // GPU memory in bytes; 0 = a CPU-only host (size_vram 0)
	Seed            int64         // seed for answers whose request carries none
	// StampTokens ends every token's text with the time it began to be written
	// (simtext.Stamp): for measuring what a token's way to the client costs.
	StampTokens bool
	// LongestAnswer is the most tokens an answer runs before the simulated model ends it on its
	// own (simtext.AnswerLengthUpTo); 0 = simtext.MaxAnswer.
	LongestAnswer int
	// ModelsDir is where the daemon keeps its blobs (OLLAMA_MODELS): when set, a pulled model's
	// blob is written to <ModelsDir>/blobs/sha256-<hex> (its GGUF header, the rest a hole, so
	// nothing is allocated for the weights) and /api/show's Modelfile names it, as Ollama's does.
	// Empty: no blob is written, and the Modelfile names /root/.ollama/models.
	ModelsDir string
}

// Forever is the keep-alive of a model that never unloads (keep_alive < 0), as Ollama stores it.
const Forever = time.Duration(math.MaxInt64)

// DefaultConfig is a fast simulator on loopback ports with Ollama's defaults.
func DefaultConfig() Config {
	return Config{
		Addr:         "127.0.0.1:0",
		RegistryAddr: "127.0.0.1:0",
		Version:      "0.5.7",
		KeepAlive:    5 * time.Minute,
		MaxLoaded:    3,
		NumCtx:       2048,
	}
}

// Environment variables ConfigFromEnv reads.
const (
	EnvAddr            = "OLLAMA_SIM_ADDR"
	EnvRegistryAddr    = "OLLAMA_SIM_REGISTRY_ADDR"
	EnvVersion         = "OLLAMA_SIM_VERSION"
	EnvPreloaded       = "OLLAMA_SIM_PRELOADED" // comma-separated model names
	EnvPullBytesPerSec = "OLLAMA_SIM_PULL_BYTES_PER_SEC"
	EnvLoadDelay       = "OLLAMA_SIM_LOAD_DELAY"
	EnvTokensPerSec    = "OLLAMA_SIM_TOKENS_PER_SEC"
	EnvTTFT            = "OLLAMA_SIM_TTFT"
	EnvKeepAlive       = "OLLAMA_SIM_KEEP_ALIVE" // like keep_alive: "5m", "-1" (forever), "0", or seconds
	EnvMaxLoaded       = "OLLAMA_SIM_MAX_LOADED"
	EnvNumCtx          = "OLLAMA_SIM_NUM_CTX"
	EnvVRAM            = "OLLAMA_SIM_VRAM" // bytes
	EnvSeed            = "OLLAMA_SIM_SEED"
	EnvStampTokens     = "OLLAMA_SIM_STAMP_TOKENS"   // true or false
	EnvLongestAnswer   = "OLLAMA_SIM_LONGEST_ANSWER" // tokens: 0 or 8 to 100000
	EnvModelsDir       = "OLLAMA_SIM_MODELS"         // a folder, like OLLAMA_MODELS
)

// ConfigFromEnv returns base with settings from the environment (read through getenv); unset
// variables keep base's values. Every value is validated, with errors naming the variable.
func ConfigFromEnv(getenv func(string) string, base Config) (Config, error) {
	cfg := base
	var err error
	str := func(name string, dst *string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	str(EnvAddr, &cfg.Addr)
	str(EnvRegistryAddr, &cfg.RegistryAddr)
	str(EnvVersion, &cfg.Version)
	str(EnvModelsDir, &cfg.ModelsDir)
	if v := getenv(EnvPreloaded); v != "" {
		cfg.Preloaded = SplitList(v)
	}
	if v := getenv(EnvPullBytesPerSec); v != "" {
		if cfg.PullBytesPerSec, err = strconv.ParseInt(v, 10, 64); err != nil || cfg.PullBytesPerSec < 0 {
			return base, fmt.Errorf("%s=%q: want bytes per second >= 0 (0 = instant)", EnvPullBytesPerSec, v)
		}
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{EnvLoadDelay, &cfg.LoadDelay}, {EnvTTFT, &cfg.TTFT}} {
		if v := getenv(d.name); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst < 0 {
				return base, fmt.Errorf("%s=%q: want a duration >= 0 such as \"250ms\"", d.name, v)
			}
		}
	}
	if v := getenv(EnvTokensPerSec); v != "" {
		f, perr := strconv.ParseFloat(v, 64)
		if perr != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return base, fmt.Errorf("%s=%q: want tokens per second >= 0 (0 = as fast as possible)", EnvTokensPerSec, v)
		}
		cfg.TokensPerSec = f
	}
	if v := getenv(EnvStampTokens); v != "" {
		if cfg.StampTokens, err = strconv.ParseBool(v); err != nil {
			return base, fmt.Errorf("%s=%q: want true or false", EnvStampTokens, v)
		}
	}
	if v := getenv(EnvLongestAnswer); v != "" {
		if cfg.LongestAnswer, err = simtext.ParseLongestAnswer(EnvLongestAnswer, v); err != nil {
			return base, err
		}
	}
	if v := getenv(EnvKeepAlive); v != "" {
		if cfg.KeepAlive, err = ParseKeepAlive(v); err != nil {
			return base, fmt.Errorf("%s=%q: %w", EnvKeepAlive, v, err)
		}
	}
	for _, n := range []struct {
		name string
		dst  *int
		min  int
	}{{EnvMaxLoaded, &cfg.MaxLoaded, 1}, {EnvNumCtx, &cfg.NumCtx, 1}} {
		if v := getenv(n.name); v != "" {
			if *n.dst, err = strconv.Atoi(v); err != nil || *n.dst < n.min {
				return base, fmt.Errorf("%s=%q: want an integer >= %d", n.name, v, n.min)
			}
		}
	}
	if v := getenv(EnvVRAM); v != "" {
		if cfg.VRAM, err = strconv.ParseInt(v, 10, 64); err != nil || cfg.VRAM < 0 {
			return base, fmt.Errorf("%s=%q: want GPU memory in bytes >= 0 (0 = CPU only)", EnvVRAM, v)
		}
	}
	if v := getenv(EnvSeed); v != "" {
		if cfg.Seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			return base, fmt.Errorf("%s=%q: want an integer seed", EnvSeed, v)
		}
	}
	return cfg, cfg.Validate()
}

// SplitList splits a comma-separated list, dropping blanks.
func SplitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ParseKeepAlive reads a keep-alive the way Ollama does: a number of seconds or a Go duration;
// a negative value means Forever.
func ParseKeepAlive(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(f) {
			return 0, fmt.Errorf("want seconds or a duration such as \"5m\" (negative = forever)")
		}
		return secondsKeepAlive(f), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want seconds or a duration such as \"5m\" (negative = forever)")
	}
	if d < 0 {
		return Forever, nil
	}
	return d, nil
}

// secondsKeepAlive turns a keep-alive in seconds into a duration: negative, or too long for a
// time.Duration (where Ollama's own conversion overflows), is Forever.
func secondsKeepAlive(f float64) time.Duration {
	if f < 0 || f >= float64(math.MaxInt64/int64(time.Second)) {
		return Forever
	}
	return time.Duration(f) * time.Second
}

// Validate checks the configuration, including that preloaded models are in the catalogue.
func (c Config) Validate() error {
	switch {
	case c.Addr == "" || c.RegistryAddr == "":
		return fmt.Errorf("ollama sim: empty listen address")
	case c.Version == "":
		return fmt.Errorf("ollama sim: empty version")
	case c.PullBytesPerSec < 0:
		return fmt.Errorf("ollama sim: pull rate %d, want >= 0", c.PullBytesPerSec)
	case c.LoadDelay < 0 || c.TTFT < 0 || c.KeepAlive < 0:
		return fmt.Errorf("ollama sim: negative load delay, TTFT or keep-alive")
	case c.TokensPerSec < 0 || math.IsNaN(c.TokensPerSec) || math.IsInf(c.TokensPerSec, 0):
		return fmt.Errorf("ollama sim: tokens per second %v, want >= 0", c.TokensPerSec)
	case c.MaxLoaded < 1:
		return fmt.Errorf("ollama sim: max loaded %d, want at least 1", c.MaxLoaded)
	case c.NumCtx < 1:
		return fmt.Errorf("ollama sim: num_ctx %d, want at least 1", c.NumCtx)
	case c.VRAM < 0:
		return fmt.Errorf("ollama sim: VRAM %d, want >= 0", c.VRAM)
	}
	for _, name := range c.Preloaded {
		if lookup(name) == nil {
			return fmt.Errorf("ollama sim: preloaded model %q is not in the catalogue (%s)", name, strings.Join(CatalogueNames(), ", "))
		}
	}
	return nil
}
