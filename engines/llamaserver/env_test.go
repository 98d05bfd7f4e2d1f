package llamaserver

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/engines"
)

// TestEngineGetsACleanEnvironment runs the simulator with the mesh secret in the agent's
// environment (as the README's LLMKUBE_JOIN example does) and reads what the process really got.
func TestEngineGetsACleanEnvironment(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/<pid>/environ")
	}
	t.Setenv("LLMKUBE_JOIN", "llmkube1-the-mesh-secret")
	t.Setenv("LLMKUBE_TOKEN", "the-admin-token")
	t.Setenv("OTHER_PROGRAMS_SECRET", "s3cr3t")
	t.Setenv("LLAMA_ARG_THREADS", "2")
	t.Setenv("LANG", "C.UTF-8")
	d := newDriver(t, func(c *Config) {
		c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s", "CUDA_VISIBLE_DEVICES=0", "LLMKUBE_JOIN=from-config"}
	})
	m := engines.Model{ID: "env", Name: "tiny", Source: modelFile(t)}
	inst, err := d.Load(t.Context(), m)
	require.NoError(t, err)

	raw, err := os.ReadFile("/proc/" + strconv.Itoa(inst.(*Instance).Pid()) + "/environ")
	require.NoError(t, err)
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k := range env {
		assert.False(t, strings.HasPrefix(k, "LLMKUBE_"), "the engine got %s", k)
	}
	assert.NotContains(t, env, "OTHER_PROGRAMS_SECRET")
	assert.Equal(t, os.Getenv("PATH"), env["PATH"])
	assert.Equal(t, "C.UTF-8", env["LANG"])
	assert.Equal(t, "2", env["LLAMA_ARG_THREADS"], "llama.cpp's own variables pass")
	assert.Equal(t, "0", env["CUDA_VISIBLE_DEVICES"], "Config.Env passes")
	assert.Equal(t, "0s", env["LLAMA_SIM_LOAD_DELAY"])
}
