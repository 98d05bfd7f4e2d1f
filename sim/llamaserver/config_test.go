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
		EnvHoldMemory: "0.5", EnvCrashAfter: "3", EnvSeed: "-7",
	}), DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, cfg.LoadDelay)
	assert.Equal(t, 12.5, cfg.TokensPerSec)
	assert.Equal(t, 300*time.Millisecond, cfg.TTFT)
	assert.Equal(t, 0.5, cfg.HoldMemory)
	assert.Equal(t, 3, cfg.CrashAfter)
	assert.EqualValues(t, -7, cfg.Seed)

	same, err := ConfigFromEnv(env(nil), DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, DefaultConfig(), same, "unset variables keep the base")
}

func TestConfigFromEnvRejectsBadValues(t *testing.T) {
	for name, bad := range map[string][]string{
		EnvLoadDelay:    {"soon", "-1s", "5"},
		EnvTokensPerSec: {"fast", "-1", "NaN", "Inf"},
		EnvTTFT:         {"x"},
		EnvHoldMemory:   {"-0.1", "9", "half", "NaN"},
		EnvCrashAfter:   {"-1", "1.5", "x"},
		EnvSeed:         {"1e3", "x"},
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
	}
	cfg, warns, err := ParseArgs(args, DefaultConfig())
	require.NoError(t, err)
	assert.Empty(t, warns)
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

	cfg, _, err = ParseArgs([]string{"--model", "m", "--ctx-size", "0", "--n-gpu-layers", "-1", "-fa", "--threads", "2"}, DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8080", cfg.Addr, "llama-server's default host and port")
	assert.Equal(t, DefaultCtxSize, cfg.ctxSize())
	assert.Equal(t, -1, cfg.GPULayers)
	assert.Equal(t, "on", cfg.FlashAttn, "old bare -fa")
	assert.Equal(t, 2, cfg.Threads)
}

func TestParseArgsIgnoresOtherFlagsWithTheirValues(t *testing.T) {
	args := []string{
		"--temp", "-1", "-m", "m.gguf", "-ot", ".ffn_.*=CPU", "--no-mmap", "--some-new-flag", "v",
		"--future-bool", "--port", "9", "--lora-scaled", "a.gguf", "0.5", "stray",
	}
	cfg, warns, err := ParseArgs(args, DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, "m.gguf", cfg.ModelPath)
	assert.Equal(t, "127.0.0.1:9", cfg.Addr)
	joined := strings.Join(warns, "\n")
	for _, want := range []string{"--temp -1", "-ot .ffn_.*=CPU", "--no-mmap", "--some-new-flag v", "--future-bool", "--lora-scaled a.gguf 0.5", `"stray"`} {
		assert.Contains(t, joined, want)
	}
	assert.Len(t, warns, 7)
}

func TestParseArgsErrors(t *testing.T) {
	for _, args := range [][]string{
		{},                 // no model
		{"--port", "8080"}, // no model
		{"-m"},             // missing value
		{"-m", "x", "--port", "99999"},
		{"-m", "x", "--port", "http"},
		{"-m", "x", "-c", "big"},
		{"-m", "x", "-c", "-5"},
		{"-m", "x", "-ngl", "many"},
		{"-m", "x", "--port=8080"}, // the real server takes no "=" form
		{"-m", "x", "-np", "0"},
		{"-m", "x", "--lora-scaled", "a"},
	} {
		_, _, err := ParseArgs(args, DefaultConfig())
		assert.Error(t, err, "%q", args)
	}
	_, _, err := ParseArgs([]string{"-m", "x", "--help"}, DefaultConfig())
	assert.True(t, errors.Is(err, ErrHelp))
	_, _, err = ParseArgs([]string{"--version"}, DefaultConfig())
	assert.True(t, errors.Is(err, ErrVersion))
}

func FuzzParseArgs(f *testing.F) {
	f.Add("-m\x00m.gguf\x00--port\x008080\x00-c\x004096")
	f.Add("--temp\x00-1\x00-m\x00x\x00-fa")
	f.Add("-m\x00x\x00--lora-scaled\x00a\x000.5\x00--unknown")
	f.Add("--port=1\x00-m")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		cfg, _, err := ParseArgs(args, DefaultConfig())
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
