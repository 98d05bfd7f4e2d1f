package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/llmkube/mesh/agent/localmesh"
	enginels "github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/internal/atomicfile"
	"github.com/llmkube/mesh/sim/llamaserver"
)

// llamaServerName is the name under which this binary plays llama-server: the demo's Mac host
// launches it exactly as it launches the real llama-server, through a link of that name.
const llamaServerName = "llama-server"

// envKeepLog keeps the demo's log after it stops (any value but ""): by default a clean exit
// leaves nothing in $TMPDIR.
const envKeepLog = "LLMKUBE_DEMO_KEEP_LOG"

// demoLog is where the demo mesh logs: the terminal belongs to the console. One file per
// process, so two demos on one machine never write over each other's log.
func demoLog() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("llmkube-demo-%d.log", os.Getpid()))
}

// envFile is where the running demo leaves what a script needs to reach it: one known path,
// so `. "${TMPDIR:-/tmp}/llmkube-demo.env"` works without reading the screen.
func envFile() string {
	return filepath.Join(os.TempDir(), "llmkube-demo.env")
}

// runAsEngine runs the llama-server simulator, or the simulated ggml-rpc-server, when the
// program was started under that name, and reports whether it did (with its exit status).
func runAsEngine(ctx context.Context) (int, bool) {
	switch filepath.Base(os.Args[0]) {
	case llamaServerName:
		return llamaserver.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr), true
	case enginels.RPCBinaryName:
		return llamaserver.RPCMain(ctx, os.Args[1:], os.Stdout, os.Stderr), true
	}
	return 0, false
}

// scriptEnv is the env file's text: the variables llmkube-tui reads, and the gateway's URL
// for OpenAI and Ollama clients. It holds the mesh's secret: the file is the user's alone.
func scriptEnv(m *localmesh.Mesh) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# The running llmkube demo mesh (llmkube-demo, pid %d); removed when the demo stops.\n", os.Getpid())
	fmt.Fprintf(&b, "#   . %s && llmkube-tui mesh hosts\n", envFile())
	fmt.Fprintf(&b, "export LLMKUBE_JOIN=%s\n", shellQuote(m.JoinString()))
	fmt.Fprintf(&b, "export LLMKUBE_TOKEN=%s\n", shellQuote(m.AdminToken()))
	b.WriteString("export LLMKUBE_MESH_PROFILE=local\n")
	fmt.Fprintf(&b, "export %s=%d\n", envDemoPID, os.Getpid())
	if len(m.Hosts) > 0 {
		b.WriteString("# An OpenAI- and Ollama-compatible gateway: curl \"$LLMKUBE_DEMO_URL/v1/models\" -H \"Authorization: Bearer $LLMKUBE_TOKEN\"\n")
		fmt.Fprintf(&b, "export LLMKUBE_DEMO_URL=%s\n", shellQuote(m.Hosts[0].URL))
	}
	return b.Bytes()
}

// envDemoPID in the env file names the demo's process, so a stale file is known as such.
const envDemoPID = "LLMKUBE_DEMO_PID"

// readScriptEnv reads the exports of an env file as a shell sourcing it would (the values are
// single-quoted by shellQuote, or bare).
func readScriptEnv(b []byte) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if uq, isQuoted := strings.CutPrefix(v, "'"); isQuoted {
			v = strings.ReplaceAll(strings.TrimSuffix(uq, "'"), `'\''`, "'")
		}
		env[k] = v
	}
	return env
}

// runningDemo is the env of the demo running on this machine, if one is: `llmkube-demo mesh …`
// then acts on its mesh, so `place` and then `chat` share it, rather than on a new mesh of its
// own that lives for one command.
func runningDemo() (map[string]string, bool) {
	b, err := os.ReadFile(envFile())
	if err != nil {
		return nil, false
	}
	env := readScriptEnv(b)
	pid, err := strconv.Atoi(env[envDemoPID])
	if err != nil || pid <= 0 {
		return nil, false
	}
	p, err := os.FindProcess(pid)
	if err != nil || p.Signal(syscall.Signal(0)) != nil {
		return nil, false // the demo that wrote it is gone
	}
	return env, true
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// startDemo runs the demo mesh in this process — real agents on loopback, simulated engines —
// writes the env file scripts source to reach it, and returns its join string and the function
// that stops it all, engines included, and removes what it wrote.
func startDemo(ctx context.Context) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "llmkube-demo-")
	if err != nil {
		return "", nil, err
	}
	// The simulators are this program under the engines' names, side by side as the agent finds
	// llama.cpp's: the Mac-like host runs llama-server, and every host an RPC worker of splits.
	link, rpcLink := filepath.Join(dir, llamaServerName), filepath.Join(dir, enginels.RPCBinaryName)
	for _, l := range []string{link, rpcLink} {
		if err := os.Symlink(exe, l); err != nil {
			os.RemoveAll(dir)
			return "", nil, fmt.Errorf("linking the engine simulators: %w", err)
		}
	}
	logf, err := os.OpenFile(demoLog(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	log := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m, err := localmesh.StartDemo(ctx, link, rpcLink, log)
	if err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("%w (log: %s)", err, demoLog()) // kept: it says why
	}
	env := scriptEnv(m)
	if err := atomicfile.WriteFile(envFile(), env, 0o600); err != nil {
		m.Close()
		logf.Close()
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("writing %s: %w", envFile(), err)
	}
	stop := func() {
		removeIfOurs(envFile(), env) // a demo started since owns it now
		err := m.Close()
		if err != nil {
			log.Warn("stopping the demo mesh", "err", err)
		}
		logf.Close()
		os.RemoveAll(dir)
		if err == nil && os.Getenv(envKeepLog) == "" {
			os.Remove(demoLog())
		}
	}
	return m.JoinString(), stop, nil
}

// removeIfOurs removes name if it still holds what this process wrote there.
func removeIfOurs(name string, ours []byte) {
	if b, err := os.ReadFile(name); err == nil && bytes.Equal(b, ours) {
		_ = os.Remove(name)
	}
}
