package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/hwprobe"
)

// The doctor is not silent when nothing can run: no engine at all is a finding with a fix for
// each runtime (the Hailo's first on a Pi with one), an error where the hardware or --runtimes
// asked for one, and a Hailo-10H without hailo-ollama is a
// warning even while other engines run.
func TestRuntimeFindings(t *testing.T) {
	hailo := []api.Accelerator{{Kind: hwprobe.KindHailo, Name: "Hailo-10H"}}
	down := func(r api.Runtime, why string) api.Engine { return api.Engine{Runtime: r, Detail: why} }
	up := func(r api.Runtime) api.Engine { return api.Engine{Runtime: r, Present: true, Healthy: true} }

	pi := api.Host{Name: "pi5", Accelerators: hailo, Engines: []api.Engine{
		down(api.RuntimeLlamaServer, "llama-server not found on PATH"), down(api.RuntimeOllama, "nothing answers on 127.0.0.1:11434"),
		down(api.RuntimeHailoOllama, "nothing answers on 127.0.0.1:8000")}}
	fs := runtimeFindings(pi, nil, false)
	require.Len(t, fs, 1)
	assert.Equal(t, api.SeverityError, fs[0].Severity)
	assert.Equal(t, "no engine runs on pi5, so no model can be placed there (hailo-ollama: nothing answers on 127.0.0.1:8000; "+
		"llama-server: llama-server not found on PATH; ollama: nothing answers on 127.0.0.1:11434)", fs[0].Problem)
	assert.Regexp(t, `^start hailo-ollama on pi5 .*; or install llama.cpp's llama-server on pi5`, fs[0].Fix, "the Hailo's runtime first")

	pi.Engines[0] = up(api.RuntimeLlamaServer)
	fs = runtimeFindings(pi, nil, false)
	require.Len(t, fs, 1)
	assert.Equal(t, api.SeverityWarning, fs[0].Severity)
	assert.Contains(t, fs[0].Problem, "pi5 has a Hailo-10H, but hailo-ollama does not run there (nothing answers on 127.0.0.1:8000)")
	assert.Empty(t, runtimeFindings(pi, map[api.Runtime]int{api.RuntimeHailoOllama: 1}, false), "placements waiting for it are their own finding")

	mac := api.Host{Name: "mac", Engines: []api.Engine{up(api.RuntimeLlamaServer), down(api.RuntimeOllama, "nothing answers")}}
	assert.Empty(t, runtimeFindings(mac, nil, false), "an engine runs and no hardware calls for another")
	box := api.Host{Name: "box", Engines: []api.Engine{down(api.RuntimeLlamaServer, "not found"), down(api.RuntimeOllama, "nothing answers")}}
	fs = runtimeFindings(box, nil, false)
	require.Len(t, fs, 1)
	assert.Equal(t, api.SeverityWarning, fs[0].Severity, "a host without engines still serves the gateway: nothing asked for one")
	fs = runtimeFindings(box, nil, true)
	require.Len(t, fs, 1)
	assert.Equal(t, api.SeverityError, fs[0].Severity, "an engine was asked for (--runtimes) and none runs")
	fs = runtimeFindings(mac, nil, true)
	require.Len(t, fs, 1, "a runtime the operator chose that does not run")
	assert.Equal(t, "ollama does not run on mac (nothing answers), although the agent was started to use it (--runtimes)", fs[0].Problem)
	assert.Contains(t, fs[0].Fix, "or leave it out of --runtimes")
}

// An agent with no engine configured at all says so through the doctor.
func TestDoctorFindsNoEngine(t *testing.T) {
	a := newBareAgent(t, "pi5-hailo", nil)
	var problems []string
	for _, f := range a.Findings(context.Background()) {
		problems = append(problems, f.Problem)
	}
	assert.Contains(t, problems, "no engine runs on "+a.Host().Name+", so no model can be placed there")
}
