package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/sim/gguf"
	"github.com/llmkube/mesh/sim/simtest"
	"github.com/llmkube/mesh/version"
)

// bins are the programs the tests run as processes, built once.
var bins struct {
	agent, llamaSim string
}

func TestMain(m *testing.M) {
	if code, ok := runFakeManager(); ok {
		os.Exit(code) // this binary was started as a fake systemctl, loginctl or launchctl
	}
	simtest.Main(m, func(dir string) (err error) {
		if bins.agent, err = simtest.Build(dir, ".", "llmkube-agent"); err != nil {
			return err
		}
		bins.llamaSim, err = simtest.LlamaServer(dir)
		return err
	})
}

// noEnv is an empty environment (HOME unset: every folder comes from flags).
func noEnv(string) string { return "" }

// runCmd runs the command line in process and returns its exit code and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb simtest.Buffer
	code := run(context.Background(), args, noEnv, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := runCmd(t, "version")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "llmkube-agent "+version.Get().Version)
	assert.Contains(t, out, "API "+api.Version)
	// --version says the same.
	code, flagOut, _ := runCmd(t, "--version")
	assert.Equal(t, exitOK, code)
	assert.Equal(t, out, flagOut)
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"run", "--no-such-flag"},
		{"run", "--log-format", "xml"},
		{"run", "--runtimes", "vllm"},
		{"run", "--memory-budget", "lots"},
		{"init", "--mesh-id", "Bad_ID"},
		{"probe"},
	} {
		code, _, errOut := runCmd(t, args...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
}

func TestInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	code, out, errOut := runCmd(t, "init", "--mesh-id", "home", "--state-dir", dir, "--allow-temp-store")
	require.Equal(t, exitOK, code, errOut)
	var joinLine, tokenLine string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "join string: "); ok {
			joinLine = v
		}
		if v, ok := strings.CutPrefix(line, "admin token: "); ok {
			tokenLine = v
		}
	}
	j, err := api.ParseJoin(joinLine)
	require.NoError(t, err)
	assert.Equal(t, "home", j.MeshID)
	assert.Equal(t, api.AdminToken(j.Secret), tokenLine)
	fi, err := os.Stat(filepath.Join(dir, state.JoinFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assert.NotContains(t, errOut, tokenLine, "the token went to the log stream")

	code, _, errOut = runCmd(t, "init", "--state-dir", dir, "--allow-temp-store")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "--force")
	code, _, _ = runCmd(t, "init", "--state-dir", dir, "--allow-temp-store", "--force")
	assert.Equal(t, exitOK, code)
	// Without --mesh-id the id is unguessable: 64 random bits (it was 16).
	ids := map[string]bool{}
	for range 2 {
		d := filepath.Join(t.TempDir(), "state")
		code, out, errOut := runCmd(t, "init", "--state-dir", d, "--allow-temp-store")
		require.Equal(t, exitOK, code, errOut)
		_, rest, _ := strings.Cut(out, "mesh:")
		id, _, _ := strings.Cut(strings.TrimSpace(rest), "\n")
		require.Regexp(t, `^mesh-[0-9a-f]{16}$`, id)
		ids[id] = true
	}
	assert.Len(t, ids, 2)
	// Without --allow-temp-store a state folder under /tmp is refused.
	code, _, errOut = runCmd(t, "init", "--state-dir", filepath.Join(t.TempDir(), "s"))
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "state folder")
	assert.Contains(t, errOut, "temporary folder")
}

func TestProbeHost(t *testing.T) {
	root := filepath.Join("..", "..", "hwprobe", "testdata", "pi5-hailo")
	code, out, errOut := runCmd(t, "probe-host", "--root", root, "--os", "linux", "--arch", "arm64", "--json")
	require.Equal(t, exitOK, code, errOut)
	var info struct {
		Arch         string `json:"arch"`
		Accelerators []struct {
			Name string `json:"name"`
		} `json:"accelerators"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &info))
	assert.Equal(t, "arm64", info.Arch)
	require.Len(t, info.Accelerators, 1)
	assert.Equal(t, "Hailo-10H", info.Accelerators[0].Name)
	code, out, _ = runCmd(t, "probe-host", "--root", root, "--os", "linux", "--arch", "arm64")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "Hailo-10H")
}

func TestRunRefusals(t *testing.T) {
	tmp := t.TempDir()
	dirs := []string{"--state-dir", filepath.Join(tmp, "state"), "--models-dir", filepath.Join(tmp, "models"), "--no-mesh", "--listen", "127.0.0.1:0"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unsupported OS", append([]string{"--hwprobe-os", "windows", "--allow-temp-store"}, dirs...), `"windows", which is not supported`},
		{"store under /tmp", dirs, "temporary folder"},
		{"llama-server missing", append([]string{"--allow-temp-store", "--runtimes", "llama-server", "--llama-server", filepath.Join(tmp, "nope")}, dirs...), "llama.cpp"},
		{"bad join string", append([]string{"--allow-temp-store", "--join-string", "llmk1:x"}, dirs...), "join string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runCmd(t, append([]string{"run"}, c.args...)...)
			assert.NotEqual(t, exitOK, code)
			assert.Contains(t, errOut, c.want)
		})
	}
}

// started is an agent running in process (run with real listeners).
type started struct {
	api    string // API base URL
	gossip string
	stderr *simtest.Buffer
	cancel context.CancelFunc
	code   chan int
}

// startInProcess runs `run` until the test ends and waits for its API.
func startInProcess(t *testing.T, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{stderr: &simtest.Buffer{}, cancel: cancel, code: make(chan int, 1)}
	go func() {
		s.code <- run(ctx, append([]string{"run", "--log-format", "json", "--listen", "127.0.0.1:0"}, args...), noEnv, io.Discard, s.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case c := <-s.code:
			assert.Equal(t, exitOK, c, "exit code; log:\n%s", s.stderr.String())
		case <-time.After(30 * time.Second):
			t.Error("the agent did not stop")
		}
	})
	require.Eventually(t, func() bool {
		s.api = logField(s.stderr.String(), "API listening", "addr")
		s.gossip = logField(s.stderr.String(), "mesh member started", "gossip")
		return s.api != ""
	}, 20*time.Second, 5*time.Millisecond, "no API listening; log:\n%s", s.stderr.String())
	s.api = "http://" + s.api
	return s
}

// logField returns a field of the first JSON log line with message msg.
func logField(log, msg, field string) string {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			s, _ := m[field].(string)
			return s
		}
	}
	return ""
}

func adminClient(t *testing.T, url, stateDir string) *apiclient.Client {
	t.Helper()
	j, ok, err := state.LoadJoinFile(filepath.Join(stateDir, state.JoinFile))
	require.NoError(t, err)
	require.True(t, ok)
	return apiclient.New(url, api.AdminToken(j.Secret))
}

func tinyGGUF(t *testing.T, dir, name string) string {
	t.Helper()
	spec, _ := gguf.Preset("sim-tiny")
	p := filepath.Join(dir, name+".gguf")
	require.NoError(t, gguf.Write(p, spec))
	return p
}

func TestRunInProcessSingleHost(t *testing.T) {
	tmp := t.TempDir()
	stateDir := filepath.Join(tmp, "state")
	s := startInProcess(t, "--no-mesh", "--allow-temp-store", "--state-dir", stateDir, "--models-dir", filepath.Join(tmp, "models"),
		"--runtimes", "llama-server", "--llama-server", bins.llamaSim, "--health-interval", "100ms",
		"--hwprobe-root", filepath.Join("..", "..", "hwprobe", "testdata", "x86-nvidia"), "--hwprobe-os", "linux", "--hwprobe-arch", "amd64")
	// The agent logs what it found as it starts running, beside the API that just said it listens.
	require.Eventually(t, func() bool { return strings.Contains(s.stderr.String(), "no Hailo device node") },
		20*time.Second, 5*time.Millisecond, "the start-up findings were not logged")
	log := s.stderr.String()
	assert.Contains(t, log, "made a new single-host mesh")
	c := adminClient(t, s.api, stateDir)
	assert.NotContains(t, log, c.Token, "a token was logged")
	ctx := context.Background()
	h, err := c.Host(ctx)
	require.NoError(t, err)
	assert.Equal(t, "NVIDIA GeForce RTX 3090", h.Accelerators[0].Name)
	require.Len(t, h.Engines, 1, "only the selected runtime is driven")
	p, err := c.Place(ctx, api.PlacementRequest{Source: tinyGGUF(t, tmp, "tiny")})
	require.NoError(t, err)
	p, err = c.WaitPlacement(ctx, p.ID, 20*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, api.StateReady, p.State)
	// Chat through the gateway, as any OpenAI client would.
	var answer strings.Builder
	err = c.ChatStream(ctx, "tiny", []apiclient.ChatMessage{{Role: "user", Content: "Say hello."}}, apiclient.ChatOptions{MaxTokens: 8},
		func(d apiclient.ChatDelta) error {
			answer.WriteString(d.Content)
			return nil
		})
	require.NoError(t, err)
	assert.NotEmpty(t, answer.String())
	require.NoError(t, c.Delete(ctx, p.ID))
	ps, err := c.Placements(ctx)
	require.NoError(t, err)
	assert.Empty(t, ps)
	// /metrics needs the token by default.
	resp, err := http.Get(s.api + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestRunInProcessTwoAgentsFormAMesh(t *testing.T) {
	tmp := t.TempDir()
	code, out, errOut := runCmd(t, "init", "--mesh-id", "pair", "--state-dir", filepath.Join(tmp, "a"), "--allow-temp-store")
	require.Equal(t, exitOK, code, errOut)
	join := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "join string: ", 2)[1], "\n", 2)[0])
	common := []string{"--allow-temp-store", "--no-mdns", "--bind", "127.0.0.1", "--gossip-port", "0", "--mesh-profile", "local",
		"--runtimes", "ollama", "--ollama-url", "http://127.0.0.1:1"}
	a := startInProcess(t, append([]string{"--state-dir", filepath.Join(tmp, "a"), "--models-dir", filepath.Join(tmp, "am"), "--node-name", "alpha"}, common...)...)
	require.NotEmpty(t, a.gossip)
	b := startInProcess(t, append([]string{"--state-dir", filepath.Join(tmp, "b"), "--models-dir", filepath.Join(tmp, "bm"), "--node-name", "beta",
		"--join-string", join, "--join", a.gossip}, common...)...)
	ca := adminClient(t, a.api, filepath.Join(tmp, "a"))
	cb := adminClient(t, b.api, filepath.Join(tmp, "b"))
	require.Equal(t, ca.Token, cb.Token, "one mesh, one admin token")
	for _, c := range []*apiclient.Client{ca, cb} {
		require.Eventually(t, func() bool {
			v, err := c.Mesh(context.Background())
			if err != nil || len(v.Members) != 2 {
				return false
			}
			for _, m := range v.Members {
				if m.Liveness != api.Alive || m.Host == nil {
					return false
				}
			}
			return true
		}, 20*time.Second, 20*time.Millisecond, "both agents see each other alive")
	}
	// Each agent's /metrics shows its own member's gossip: probes answered, with their round
	// trips, and bytes both ways.
	for _, s := range []*started{a, b} {
		require.Eventually(t, func() bool {
			fams := scrapeMetrics(t, s.api, ca.Token)
			// value is a counter's value, or a histogram's count, of the series with these labels.
			value := func(name string, labels ...string) float64 {
				for _, m := range fams[name].GetMetric() {
					var got []string
					for _, l := range m.GetLabel() {
						got = append(got, l.GetName(), l.GetValue())
					}
					if slices.Equal(got, labels) {
						return m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
					}
				}
				return 0
			}
			for _, name := range []string{"llmkube_gossip_probes_total", "llmkube_gossip_probe_rtt_seconds", "llmkube_gossip_health_score", "llmkube_gossip_dropped_total"} {
				require.NotEmpty(t, fams[name].GetHelp(), name)
			}
			return value("llmkube_gossip_probes_acked_total") > 0 && value("llmkube_gossip_probe_rtt_seconds") > 0 &&
				value("llmkube_gossip_bytes_total", "direction", "received", "proto", "udp") > 0 &&
				value("llmkube_gossip_bytes_total", "direction", "sent", "proto", "tcp") > 0
		}, 20*time.Second, 50*time.Millisecond, "the gossip metrics of %s", s.api)
	}
}

// scrapeMetrics reads an agent's /metrics as the Prometheus text format.
func scrapeMetrics(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// TestBinary runs the built llmkube-agent as a process: start, place a model on the
// llama-server simulator, stop with SIGTERM, and check the engine went with it.
// agentProcess is the agent binary running with args (and a JSON log), stopped at cleanup.
type agentProcess struct {
	cmd     *exec.Cmd
	stderr  *simtest.Buffer
	exited  chan struct{}
	waitErr error
	api     string // the API's URL, once it listens
}

func startAgentProcess(t *testing.T, args ...string) *agentProcess {
	t.Helper()
	p := &agentProcess{stderr: &simtest.Buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bins.agent, append([]string{"run", "--log-format", "json", "--listen", "127.0.0.1:0"}, args...)...)
	p.cmd.Stderr = p.stderr
	p.cmd.Env = append(os.Environ(), "LLAMA_SIM_LOAD_DELAY=0")
	require.NoError(t, p.cmd.Start())
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	var addr string
	require.Eventually(t, func() bool {
		addr = logField(p.stderr.String(), "API listening", "addr")
		return addr != ""
	}, 20*time.Second, 10*time.Millisecond, "log:\n%s", p.stderr)
	p.api = "http://" + addr
	return p
}

func TestBinary(t *testing.T) {
	tmp := t.TempDir()
	stateDir := filepath.Join(tmp, "state")
	a := startAgentProcess(t, "--no-mesh", "--allow-temp-store", "--state-dir", stateDir, "--models-dir", filepath.Join(tmp, "models"),
		"--runtimes", "llama-server", "--llama-server", bins.llamaSim, "--memory-budget", "2GiB")
	c := adminClient(t, a.api, stateDir)
	ctx := context.Background()
	h, err := c.Host(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2<<30), h.Memory.Budget)
	p, err := c.Place(ctx, api.PlacementRequest{Source: tinyGGUF(t, tmp, "tiny")})
	require.NoError(t, err)
	p, err = c.WaitPlacement(ctx, p.ID, 20*time.Millisecond, nil)
	require.NoError(t, err)
	engine := p.Engine
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-a.exited:
		require.NoError(t, a.waitErr, "exit status; log:\n%s", a.stderr)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop on SIGTERM")
	}
	_, err = http.Get(engine + "/health")
	assert.Error(t, err, "the engine outlived the agent")
	assert.Contains(t, a.stderr.String(), "agent stopped")
}
