package llamaserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// RPCBinaryName is llama.cpp's RPC worker, looked up beside llama-server.
const RPCBinaryName = "ggml-rpc-server"

// RPCConfig configures the rpc-server driver: one ggml-rpc-server per split part, on a
// loopback port (it has no authentication: the agent's sealed API is its only door), with its
// tensor cache on (-c), so a restart of the split does not ship the weights again.
type RPCConfig struct {
	// Binary is ggml-rpc-server's path; "" looks for it beside LlamaServer, then on PATH.
	Binary      string
	LlamaServer string
	// LogDir holds each part's log, <LogDir>/<placement id>.log. Required.
	LogDir string
	// CacheDir is the tensor cache (LLAMA_CACHE); "" is llama.cpp's default (~/.cache/llama.cpp).
	CacheDir string
	// Threads for the CPU device; 0 leaves ggml-rpc-server its own default (half the CPUs the
	// machine has, as its --help says: 1 on two cores).
	Threads int
	// StopGrace is how long a stop waits after SIGTERM before SIGKILL; 0 is DefaultStopGrace.
	StopGrace time.Duration
}

// RPCDriver runs one ggml-rpc-server per split part (api.RuntimeRPCServer). Its Endpoint is
// the worker's loopback host:port, which only the agent dials.
type RPCDriver struct {
	cfg RPCConfig
	log *slog.Logger

	mu        sync.Mutex
	instances map[string]*Instance
	version   knownVersion
}

var _ engines.Driver = (*RPCDriver)(nil)

// NewRPC returns the rpc-server driver; a missing binary shows in Detect.
func NewRPC(cfg RPCConfig, log *slog.Logger) (*RPCDriver, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := logFolder(cfg.LogDir, "rpc-server driver", "RPCConfig.LogDir"); err != nil {
		return nil, err
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	return &RPCDriver{cfg: cfg, log: log.With("runtime", string(api.RuntimeRPCServer)), instances: map[string]*Instance{}}, nil
}

// Runtime is api.RuntimeRPCServer.
func (d *RPCDriver) Runtime() api.Runtime { return api.RuntimeRPCServer }

const rpcInstallHint = "ggml-rpc-server comes with llama.cpp built with -DGGML_RPC=ON; put it beside llama-server"

func (d *RPCDriver) binary() (string, error) {
	cands := []string{d.cfg.Binary}
	if d.cfg.Binary == "" {
		if d.cfg.LlamaServer != "" {
			cands = []string{filepath.Join(filepath.Dir(d.cfg.LlamaServer), RPCBinaryName)}
		}
		if p, err := exec.LookPath(RPCBinaryName); err == nil {
			cands = append(cands, p)
		}
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); c != "" && err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("%s not found; %s", RPCBinaryName, rpcInstallHint)
}

// rpcVersionRE is the worker's banner: "Starting RPC server v5.0.0".
var rpcVersionRE = regexp.MustCompile(`Starting RPC server v([0-9]+\.[0-9]+\.[0-9]+)`)

// Detect reports ggml-rpc-server and its RPC protocol version as Version. The version is only
// printed when the worker starts, and stdout is buffered until it exits: it is started on a
// port the probe holds, so it prints its banner, fails to bind and exits at once.
func (d *RPCDriver) Detect(ctx context.Context) api.Engine {
	e := api.Engine{Runtime: api.RuntimeRPCServer}
	bin, err := d.binary()
	if err != nil {
		e.Detail = err.Error()
		return e
	}
	e.Present, e.Address = true, bin
	key, keyErr := binaryKey(bin)
	d.mu.Lock()
	known := d.version
	d.mu.Unlock()
	if keyErr == nil && known.key == key && time.Since(known.at) < versionRecheck {
		e.Version, e.Healthy = known.version, true
		return e
	}
	v, err := probeRPCVersion(ctx, bin)
	if err != nil {
		e.Detail = err.Error()
		return e
	}
	if keyErr == nil {
		d.mu.Lock()
		d.version = knownVersion{key: key, version: v, at: time.Now()}
		d.mu.Unlock()
	}
	e.Version, e.Healthy = v, true
	return e
}

func probeRPCVersion(ctx context.Context, bin string) (string, error) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer held.Close()
	port := strconv.Itoa(held.Addr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-H", "127.0.0.1", "-p", port)
	cmd.WaitDelay = time.Second
	out, _ := cmd.CombinedOutput() // it fails to bind by design
	m := rpcVersionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s printed no RPC protocol version: %s", bin, lastLine(string(out)))
	}
	return string(m[1]), nil
}

// Health: the worker process runs. It is never dialled for it: it serves one client at a time,
// and that is the main host's llama-server.
func (d *RPCDriver) Health(_ context.Context, m engines.Model) error {
	d.mu.Lock()
	inst, ok := d.instances[m.ID]
	d.mu.Unlock()
	switch {
	case !ok:
		return &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("part %s has no rpc-server running", m.ID)}
	case inst.exited():
		if err := inst.Err(); err != nil {
			return err
		}
		return &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("part %s's rpc-server was stopped", m.ID)}
	}
	return nil
}

// Pull has nothing to fetch: the main host ships the tensors over RPC.
func (d *RPCDriver) Pull(context.Context, engines.Model, func(engines.Progress)) error { return nil }

// rpcInstance is a worker: its Endpoint is host:port, dialled by the agent, not HTTP.
type rpcInstance struct{ *Instance }

func (i rpcInstance) Endpoint() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(i.port)) }

// rpcReady bounds a worker's start: it listens within milliseconds.
const rpcReady = 15 * time.Second

// Load starts m's worker on a free loopback port and returns once it accepts connections.
func (d *RPCDriver) Load(ctx context.Context, m engines.Model) (engines.Instance, error) {
	if m.ID == "" || !filepath.IsLocal(m.ID) || filepath.Base(m.ID) != m.ID {
		return nil, &engines.Error{Code: api.CodeBadRequest, Err: fmt.Errorf("placement id %q cannot name a log file", m.ID)}
	}
	bin, err := d.binary()
	if err != nil {
		return nil, &engines.Error{Code: api.CodeEngineUnavailable, Err: err}
	}
	d.mu.Lock()
	if inst, ok := d.instances[m.ID]; ok && !inst.exited() {
		d.mu.Unlock()
		return rpcInstance{inst}, nil
	}
	d.mu.Unlock()
	port, err := freePort()
	if err != nil {
		return nil, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("finding a free port: %w", err)}
	}
	args := []string{"-H", "127.0.0.1", "-p", strconv.Itoa(port), "-c"}
	if d.cfg.Threads > 0 {
		args = append(args, "-t", strconv.Itoa(d.cfg.Threads))
	}
	env := os.Environ()
	if d.cfg.CacheDir != "" {
		env = append(env, "LLAMA_CACHE="+d.cfg.CacheDir)
	}
	logPath := filepath.Join(d.cfg.LogDir, m.ID+".log")
	d.log.Info("starting", "placement", m.ID, "binary", bin, "args", args, "log", logPath)
	inst, err := launch(bin, args, env, m.ID, m.Name, port, logPath, DefaultMaxLog, d.cfg.StopGrace)
	if err != nil {
		return nil, err
	}
	if err := waitListening(ctx, inst); err != nil {
		inst.stop(context.WithoutCancel(ctx), d.cfg.StopGrace)
		return nil, err
	}
	d.mu.Lock()
	d.instances[m.ID] = inst
	d.mu.Unlock()
	return rpcInstance{inst}, nil
}

// waitListening polls until the worker accepts a connection. Its log cannot tell (its output
// is buffered until it exits); a connection closed at once costs it nothing: it reads no
// command, drops the client and waits for the next, the main's llama-server.
func waitListening(ctx context.Context, inst *Instance) error {
	deadline := time.Now().Add(rpcReady)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(inst.port))
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-inst.done:
			return inst.Err()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("rpc-server did not listen within %s", rpcReady)}
		}
	}
}

// Unload stops m's worker.
func (d *RPCDriver) Unload(ctx context.Context, m engines.Model) error {
	d.mu.Lock()
	inst, ok := d.instances[m.ID]
	delete(d.instances, m.ID)
	d.mu.Unlock()
	if ok {
		inst.stop(ctx, d.cfg.StopGrace)
		d.log.Info("stopped", "placement", m.ID)
	}
	return nil
}

// StopAll stops every worker, for the agent's shutdown.
func (d *RPCDriver) StopAll(ctx context.Context) {
	d.mu.Lock()
	all := d.instances
	d.instances = map[string]*Instance{}
	d.mu.Unlock()
	for _, inst := range all {
		inst.stop(ctx, d.cfg.StopGrace)
	}
}

// Loaded lists the parts whose worker runs.
func (d *RPCDriver) Loaded(context.Context) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []string{}
	for id, inst := range d.instances {
		if !inst.exited() {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Chat: a worker serves no chats; its split's main does.
func (d *RPCDriver) Chat(context.Context, engines.Model, engines.ChatRequest, func(engines.ChatChunk) error) error {
	return &engines.Error{Code: api.CodeBadRequest, Err: fmt.Errorf("an rpc-server part serves no chats: %w", engines.ErrUnsupported)}
}

// logFolder makes a driver's log folder, which it requires (field names the setting).
func logFolder(dir, driver, field string) error {
	if dir == "" {
		return fmt.Errorf("%s: a log folder (%s) is required", driver, field)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("%s: log folder: %w", driver, err)
	}
	return nil
}

// rpcArgs make llama-server use the split's workers: every repeating layer offloaded (-ngl 99)
// to the RPC devices, in the shares of the plan.
func rpcArgs(endpoints []string, shares []float64) []string {
	if len(endpoints) == 0 {
		return nil
	}
	args := []string{"--rpc", strings.Join(endpoints, ","), "-ngl", "99"}
	if len(shares) == len(endpoints) {
		parts := make([]string, len(shares))
		for i, s := range shares {
			parts[i] = strconv.FormatFloat(s, 'f', -1, 64)
		}
		args = append(args, "--tensor-split", strings.Join(parts, ","))
	}
	return args
}
