package llamaserver

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/sim/simtest"
)

// Every allowed argument says what it does to memory: the estimate follows it, or it changes
// nothing the estimate counts. One that says neither is refused before anything is sized.
func TestEveryAllowedArgumentIsSized(t *testing.T) {
	for _, a := range DefaultArgs {
		assert.True(t, (a.Size != nil) != a.NoMemory, "%s: exactly one of Size and NoMemory", a.Names[0])
	}
	d := newDriver(t, nil)
	run, err := d.SizeRun([]string{"-ctk", "f32", "--cache-type-v=q8_0", "-b", "4096", "--ubatch-size", "1024", "-fa", "off", "-np", "2", "-t", "2", "--mlock"})
	require.NoError(t, err)
	assert.Equal(t, sizing.Run{Slots: 2, CacheK: "f32", CacheV: "q8_0", Batch: 4096, UBatch: 1024, FlashAttn: "off"}, run)

	unsized := newDriver(t, func(c *Config) {
		c.ExtraArgs = []Arg{{Names: []string{"--swa-full"}}, {Names: []string{"-t"}, Value: "N", Valid: positive, NoMemory: true}}
	})
	_, err = unsized.SizeRun([]string{"-t", "2"})
	require.NoError(t, err)
	_, err = unsized.SizeRun([]string{"--swa-full"})
	assert.Equal(t, api.CodeMemoryCheckFailed, codeOf(err), "%v", err)
	assert.ErrorContains(t, err, "--swa-full changes memory in a way the estimate cannot count")
}

// The real llama-server's KV cache and compute buffers, as its log prints them, for each
// argument that changes them: the estimate counts at least as much, and moves the same way.
// (The issue this answers: -ctk f32 doubled the KV cache and -ub 4096 multiplied the compute
// buffer by 8 while the estimate stayed the same.) tiny.gguf's heads are 16 wide, too narrow
// for a quantized cache (blocks of 32): those are checked against gguf-parser-go in sizing.
func TestRealEngineMemoryFollowsEstimate(t *testing.T) {
	bin, model := enginetest.LlamaServer(t), enginetest.TinyGGUF(t)
	src, err := source.Parse(model)
	require.NoError(t, err)
	d := newDriver(t, nil)
	sizer := &sizing.Sizer{}
	const context = 4096
	kvLine := regexp.MustCompile(`KV buffer size = +([0-9.]+) MiB`)
	computeLine := regexp.MustCompile(`compute buffer size = +([0-9.]+) MiB`)
	mib := func(re *regexp.Regexp, log string) int64 {
		m := re.FindStringSubmatch(log)
		require.NotNil(t, m, "%s not in the log:\n%s", re, log)
		f, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return int64(f * (1 << 20))
	}
	type measured struct{ realKV, realCompute, estKV, estCompute int64 }
	measure := func(t *testing.T, args []string) measured {
		run, err := d.SizeRun(args)
		require.NoError(t, err)
		est, err := sizer.EstimateRun(t.Context(), src, context, run)
		require.NoError(t, err)
		checked, err := checkArgs(args, DefaultArgs)
		require.NoError(t, err)
		slots, extra := takeSlots(checked)
		// As Load starts it, at the verbosity that prints the buffers.
		full := append(append([]string{"-m", model, "--host", "127.0.0.1", "--port", "0", "-lv", "4"}, memoryArgs(context, slots, 0)...), extra...)
		var out simtest.Buffer
		cmd := exec.Command(bin, full...)
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		require.Eventually(t, func() bool { return computeLine.MatchString(out.String()) }, 60*time.Second, 10*time.Millisecond, "%q: no compute buffer line in:\n%s", args, &out)
		log := out.String()
		cmd.Process.Kill()
		return measured{realKV: mib(kvLine, log), realCompute: mib(computeLine, log), estKV: est.KV, estCompute: est.Compute}
	}
	base := measure(t, nil)
	for _, args := range [][]string{
		{"-ctk", "f32", "-ctv", "f32"},
		{"-ctk", "f32"},
		{"-b", "4096", "-ub", "4096"},
		{"-ub", "128"},
		{"-fa", "off"},
		{"-fa", "off", "-b", "4096", "-ub", "4096"},
		{"-np", "3"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			m := measure(t, args)
			t.Logf("real KV %d, compute %d; estimated KV %d, compute %d (defaults: real %d, %d; estimated %d, %d)",
				m.realKV, m.realCompute, m.estKV, m.estCompute, base.realKV, base.realCompute, base.estKV, base.estCompute)
			assert.GreaterOrEqual(t, m.estKV, m.realKV, "the estimate counts the whole KV cache")
			assert.GreaterOrEqual(t, m.estCompute, m.realCompute, "the estimate counts the whole compute buffer")
			// A change worth following is one of more than a tenth of what the estimate counts
			// by default (f32's bigger scratch beside a compute buffer the estimate already
			// counts 29 times over is not).
			same := func(real, est int64, realBase, estBase int64, what string) {
				switch {
				case real-realBase > estBase/10:
					assert.Greater(t, est, estBase, "the engine's %s grew, the estimate's must too", what)
				case realBase-real > estBase/10:
					assert.Less(t, est, estBase, "the engine's %s shrank, the estimate's follows", what)
				}
			}
			same(m.realKV, m.estKV, base.realKV, base.estKV, "KV cache")
			same(m.realCompute, m.estCompute, base.realCompute, base.estCompute, "compute buffer")
		})
	}
}
