package llamaserver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigFromEnv(t *testing.T) {
	cfg, err := ConfigFromEnv(env(map[string]string{
		EnvLoadDelay: "2s", EnvTokensPerSec: "12.5", EnvTTFT: "300ms",
		EnvHoldMemory: "0.5", EnvCrashAfter: "3", EnvSeed: "-7", EnvStampTokens: "true",
		EnvLongestAnswer: "200",
	}), DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, cfg.LoadDelay)
	assert.Equal(t, 12.5, cfg.TokensPerSec)
	assert.Equal(t, 300*time.Millisecond, cfg.TTFT)
	assert.Equal(t, 0.5, cfg.HoldMemory)
	assert.Equal(t, 3, cfg.CrashAfter)
	assert.EqualValues(t, -7, cfg.Seed)
	assert.True(t, cfg.StampTokens)
	assert.Equal(t, 200, cfg.LongestAnswer)

	same, err := ConfigFromEnv(env(nil), DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, DefaultConfig(), same, "unset variables keep the base")
}

func TestConfigFromEnvRejectsBadValues(t *testing.T) {
	for name, bad := range map[string][]string{
		EnvLoadDelay:     {"soon", "-1s", "5"},
		EnvTokensPerSec:  {"fast", "-1", "NaN", "Inf"},
		EnvTTFT:          {"x"},
		EnvHoldMemory:    {"-0.1", "9", "half", "NaN"},
		EnvCrashAfter:    {"-1", "1.5", "x"},
		EnvSeed:          {"1e3", "x"},
		EnvStampTokens:   {"yes", "2"},
		EnvLongestAnswer: {"7", "-1", "100001", "1e9", "long"},
	} {
		for _, v := range bad {
			_, err := ConfigFromEnv(env(map[string]string{name: v}), DefaultConfig())
			require.Error(t, err, "%s=%q", name, v)
			assert.Contains(t, err.Error(), name, "the error names the variable")
		}
	}
}

func TestParseArgsRealCommandLine(t *testing.T) {
	args := []string{
		"-m", "/models/q.gguf", "--host", "127.0.0.1", "--port", "39001", "-c", "8192", "-ngl", "99",
		"--metrics", "--alias", "qwen:0.5b", "-t", "4", "--mlock", "-fa", "on", "--jinja",
		"-np", "2", "--cache-ram", "64", "-ctk", "q8_0", "--no-mmap",
	}
	cfg, err := ParseArgs(args, DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, "/models/q.gguf", cfg.ModelPath)
	assert.Equal(t, "127.0.0.1:39001", cfg.Addr)
	assert.Equal(t, 8192, cfg.CtxSize)
	assert.Equal(t, 99, cfg.GPULayers)
	assert.True(t, cfg.Metrics)
	assert.Equal(t, "qwen:0.5b", cfg.Alias)
	assert.Equal(t, 4, cfg.Threads)
	assert.True(t, cfg.MLock)
	assert.Equal(t, "on", cfg.FlashAttn)
	assert.True(t, cfg.Jinja)
	assert.Equal(t, 64, cfg.CacheRAM)
	assert.Equal(t, 2, cfg.Parallel)
	assert.False(t, cfg.UnifiedKV, "slots asked for explicitly split the context")
	assert.Equal(t, 4096, cfg.slotCtx())

	cfg, err = ParseArgs([]string{"--model", "m", "--ctx-size", "0", "--n-gpu-layers", "all", "--threads", "2"}, DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8080", cfg.Addr, "llama-server's default host and port")
	assert.Equal(t, DefaultCtxSize, cfg.ctxSize())
	assert.Equal(t, -1, cfg.GPULayers)
	assert.Equal(t, 4, cfg.Parallel, "-np auto")
	assert.True(t, cfg.UnifiedKV, "auto slots share one context")
	assert.Equal(t, DefaultCtxSize, cfg.slotCtx())
	assert.Equal(t, 8192, cfg.CacheRAM, "llama-server's default prompt cache")

	cfg, err = ParseArgs([]string{"-m", "m", "-np", "3", "-kvu", "-c", "300"}, DefaultConfig())
	require.NoError(t, err)
	assert.True(t, cfg.UnifiedKV)
	assert.Equal(t, 300, cfg.slotCtx())
	cfg, err = ParseArgs([]string{"-m", "m", "-no-kvu", "-c", "400"}, DefaultConfig())
	require.NoError(t, err)
	assert.False(t, cfg.UnifiedKV)
	assert.Equal(t, 100, cfg.slotCtx())
}

func TestParseArgsErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{}, "error: no model given: llama-server-sim needs -m FILE"},
		{[]string{"--port", "8080"}, "error: no model given: llama-server-sim needs -m FILE"},
		{[]string{"-m"}, `error while handling argument "-m": expected value for argument`},
		{[]string{"-m", "x", "--port", "99999"}, `error while handling argument "--port": invalid port: want a number from 0 to 65535`},
		{[]string{"-m", "x", "-c", "big"}, `error while handling argument "-c": stoi`},
		{[]string{"-m", "x", "-c", "-5"}, `error while handling argument "-c": -5 is below 0`},
		{[]string{"-m", "x", "-ngl", "many"}, `error while handling argument "-ngl": stoi`},
		{[]string{"-m", "x", "--port=8080"}, "error: invalid argument: --port=8080"},
		{[]string{"-m", "x", "-np", "0"}, `error while handling argument "-np": error: invalid value for n_parallel`},
		{[]string{"-m", "x", "-fa"}, `error while handling argument "-fa": expected value for argument`},
		{[]string{"-m", "x", "-fa", "yes"}, `error while handling argument "-fa": error: unknown value for --flash-attn: 'yes'`},
		{[]string{"-m", "x", "--some-new-flag"}, "error: invalid argument: --some-new-flag"},
		{[]string{"-m", "x", "stray"}, "error: invalid argument: stray"},
	} {
		_, err := ParseArgs(c.args, DefaultConfig())
		assert.EqualError(t, err, c.msg, "%q", c.args)
	}
	_, err := ParseArgs([]string{"-m", "x", "--help"}, DefaultConfig())
	assert.True(t, errors.Is(err, ErrHelp))
	_, err = ParseArgs([]string{"--version"}, DefaultConfig())
	assert.True(t, errors.Is(err, ErrVersion))
	// Read in order: a value flag takes "--version" as its value, a flag without one does not.
	_, err = ParseArgs([]string{"--mlock", "--version"}, DefaultConfig())
	assert.True(t, errors.Is(err, ErrVersion))
	_, err = ParseArgs([]string{"-c", "--version"}, DefaultConfig())
	assert.EqualError(t, err, `error while handling argument "-c": stoi`)
}

func FuzzParseArgs(f *testing.F) {
	f.Add("-m\x00m.gguf\x00--port\x008080\x00-c\x004096")
	f.Add("--temp\x00-1\x00-m\x00x\x00-fa\x00on")
	f.Add("-m\x00x\x00-np\x00-1\x00-no-kvu\x00--unknown")
	f.Add("--port=1\x00-m")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		cfg, err := ParseArgs(args, DefaultConfig())
		if err != nil {
			return
		}
		// Whatever parses is a config Start would accept (the model file aside).
		if verr := cfg.validate(); verr != nil {
			t.Fatalf("ParseArgs(%q) accepted an invalid config: %v", args, verr)
		}
		if cfg.ModelPath == "" {
			t.Fatalf("ParseArgs(%q) accepted a command line without -m", args)
		}
	})
}
