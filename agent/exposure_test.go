package agent

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/hwprobe"
	hailosim "github.com/llmkube/mesh/sim/hailo"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F40":                         "127.0.0.1:8000",
		"00000000:1F40":                         "0.0.0.0:8000",
		"0501A8C0:2CAA":                         "192.168.1.5:11434",
		"00000000000000000000000000000000:1F40": "[::]:8000",
		"00000000000000000000000001000000:1F40": "[::1]:8000",
	} {
		ip, port, ok := parseProcAddr(in)
		if !ok {
			t.Fatalf("%s: not parsed", in)
		}
		if got := net.JoinHostPort(ip.String(), strconv.Itoa(port)); got != want {
			t.Errorf("%s = %s, want %s", in, got, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007:1F40", "zz00007F:1F40", "0100007F:99999"} {
		if _, _, ok := parseProcAddr(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// startHailoOn runs a hailo-ollama simulator of a release on listen.
func startHailoOn(t *testing.T, version, listen string) *hailosim.Server {
	t.Helper()
	cfg := hailosim.FastConfig(t.TempDir())
	cfg.Version, cfg.Listen = version, listen
	ctx, cancel := context.WithCancel(context.Background())
	s, err := hailosim.Start(ctx, cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	return s
}

func hostWith(engines ...api.Engine) api.Host { return api.Host{Name: "pi5", Engines: engines} }

// The doctor reads the engines' listening sockets: one bound on every interface is named, with
// the fix for its engine and release; one on loopback is not.
func TestExposedEnginesAreNamed(t *testing.T) {
	for _, c := range []struct {
		version, reported, fix string
	}{
		{"5.3.0", "5.3.0", "hailo-ollama 5.3.0 binds by OLLAMA_HOST, not by its JSON: set OLLAMA_HOST=127.0.0.1:"},
		{"5.1.1", "0.5.1", `hailo-ollama before 5.3 binds by its JSON: set "server": {"host": "127.0.0.1", "port": `},
	} {
		open := startHailoOn(t, c.version, "0.0.0.0:0")
		closed := startHailoOn(t, c.version, "127.0.0.1:0")
		fs := exposureFindings(hostWith(
			api.Engine{Runtime: api.RuntimeHailoOllama, Present: true, Version: c.reported, Address: open.URL()},
		), nil)
		if len(fs) != 1 {
			t.Fatalf("%s on 0.0.0.0: findings %+v", c.version, fs)
		}
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(open.URL(), "http://"))
		// Go binds 0.0.0.0 dual-stack, as [::]: the socket table shows which.
		if f := fs[0]; f.Severity != api.SeverityError || !strings.Contains(f.Problem, ":"+port+" (every interface)") || !strings.Contains(f.Fix, c.fix) {
			t.Errorf("%s: finding %+v", c.version, f)
		}
		if c.version == "5.1.1" && !strings.Contains(fs[0].Fix, "also set OLLAMA_HOST") {
			t.Errorf("0.5.1 says nothing of the release: the fix names both settings: %s", fs[0].Fix)
		}
		if fs := exposureFindings(hostWith(
			api.Engine{Runtime: api.RuntimeHailoOllama, Present: true, Version: c.reported, Address: closed.URL()},
		), nil); len(fs) != 0 {
			t.Errorf("%s on loopback: findings %+v", c.version, fs)
		}
	}

	// An Ollama started by hand on every interface, and a llama-server placement's port.
	cfg := ollamasim.DefaultConfig()
	cfg.Addr = "[::]:0"
	ctx, cancel := context.WithCancel(context.Background())
	oll, err := ollamasim.Start(ctx, cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); oll.Close() })
	exposedLlama := startHailoOn(t, "5.1.1", "0.0.0.0:0") // any server will do for a socket
	fs := exposureFindings(hostWith(
		api.Engine{Runtime: api.RuntimeOllama, Present: true, Version: "0.12.0", Address: oll.URL()},
		api.Engine{Runtime: api.RuntimeLlamaServer, Present: true, Address: "/usr/bin/llama-server"},
	), []api.Placement{{Runtime: api.RuntimeLlamaServer, Engine: exposedLlama.URL()}})
	if len(fs) != 2 {
		t.Fatalf("findings %+v", fs)
	}
	if !strings.Contains(fs[0].Problem, "engine ollama") || !strings.Contains(fs[0].Problem, "listens on [::]:") || !strings.Contains(fs[0].Fix, "Environment=OLLAMA_HOST=127.0.0.1:") {
		t.Errorf("ollama finding %+v", fs[0])
	}
	if !strings.Contains(fs[1].Problem, "engine llama-server") || !strings.Contains(fs[1].Fix, "--host 127.0.0.1") {
		t.Errorf("llama-server finding %+v", fs[1])
	}
}

// An engine the agent is told to reach at a LAN address is reachable from the LAN by definition.
func TestEngineConfiguredOffLoopbackIsNamed(t *testing.T) {
	fs := exposureFindings(hostWith(api.Engine{Runtime: api.RuntimeOllama, Present: true, Address: "http://192.0.2.7:11434"}), nil)
	if len(fs) != 1 || !strings.Contains(fs[0].Problem, "listens on 192.0.2.7:11434") {
		t.Fatalf("findings %+v", fs)
	}
}

// The doctor names a Hailo version skew with its fix, from the recorded hosts.
func TestSkewIsNamed(t *testing.T) {
	skewed := engineAgent(t, t.TempDir(), "pi5-hailo-skewed", nil, nil)
	var skew []api.Finding
	for _, f := range skewed.Findings(context.Background()) {
		if strings.Contains(f.Problem, "Hailo versions disagree") {
			skew = append(skew, f)
		}
	}
	if len(skew) != 1 || !strings.Contains(skew[0].Problem, "driver 5.3.0, firmware 5.1.1, runtime 5.3.0") ||
		!strings.Contains(skew[0].Fix, "still runs the firmware it loaded at boot (5.1.1), not the installed release's (5.3.0): reboot the host") {
		t.Fatalf("findings %+v", skew)
	}
	for _, f := range engineAgent(t, t.TempDir(), "pi5-hailo-530", nil, nil).Findings(context.Background()) {
		if strings.Contains(f.Problem, "disagree") {
			t.Errorf("a consistent 5.3.0 host: %+v", f)
		}
	}

	acc := hwprobe.Accelerator{Kind: hwprobe.KindHailo, Driver: "5.3.0", Runtimes: []string{"5.1.1"}}
	if fix := skewFix(acc); !strings.Contains(fix, "the kernel driver (5.3.0) and the HailoRT library (5.1.1) are of different releases: reinstall") {
		t.Errorf("driver/library fix: %s", fix)
	}
}
