package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/hwprobe"
)

// probeFixture probes one of hwprobe's recorded hosts.
func probeFixture(t testing.TB, name string) hwprobe.Info {
	t.Helper()
	goos, arch := "linux", "arm64"
	switch name {
	case "mac-m2":
		goos = "darwin"
	case "x86-nvidia", "container-2g", "cgroup-v1-hybrid":
		arch = "amd64"
	}
	return hwprobe.Probe(context.Background(), hwprobe.Options{Root: filepath.Join("..", "hwprobe", "testdata", name), OS: goos, Arch: arch})
}

// testLog sends the agent's log to the test's output.
func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// openState opens a state dir that is closed when the test ends.
func openState(t testing.TB, dir string) *state.Dir {
	t.Helper()
	sd, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	return sd
}

// newBareAgent builds an agent on a fixture host with no drivers, for tests of the accounting
// and of the API that need no engine.
func newBareAgent(t testing.TB, fixture string, mod func(*Config)) *Agent {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{
		State:          openState(t, filepath.Join(dir, "state")),
		ModelsDir:      filepath.Join(dir, "models"),
		AllowTempStore: true,
		Host:           probeFixture(t, fixture),
		Sizer:          &sizing.Sizer{},
		Log:            testLog(t),
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// served is an agent running with its API on a loopback listener.
type served struct {
	a      *Agent
	srv    *Server
	url    string
	secret []byte
	admin  *apiclient.Client
}

// serve runs a (Run) and its API server until the test ends.
func serve(t testing.TB, a *Agent, mod func(*ServerConfig)) *served {
	t.Helper()
	secret, err := api.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc := ServerConfig{Agent: a, Secret: secret, MeshID: "test", Log: a.log}
	if mod != nil {
		mod(&sc)
	}
	srv := NewServer(sc)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	srvDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	go func() { srvDone <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-srvDone
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	s := &served{a: a, srv: srv, url: "http://" + ln.Addr().String(), secret: secret}
	s.admin = apiclient.New(s.url, api.AdminToken(secret))
	waitReady(t, a)
	return s
}

func waitReady(t testing.TB, a *Agent) {
	t.Helper()
	waitFor(t, func() bool { return a.Ready() == nil }, "the agent to be ready")
}

// nsClient is a client holding namespace ns's token.
func (s *served) nsClient(t testing.TB, ns string) *apiclient.Client {
	t.Helper()
	tok, err := api.NamespaceToken(api.AdminToken(s.secret), ns)
	if err != nil {
		t.Fatal(err)
	}
	return apiclient.New(s.url, tok)
}

// codeOfErr is the API error code of err, or "".
func codeOfErr(err error) api.Code {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
