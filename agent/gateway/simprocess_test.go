package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	hailosim "github.com/llmkube/mesh/sim/hailo"
	"github.com/llmkube/mesh/sim/simtest"
)

// ollamaSimProcess runs the Ollama simulator as a program of its own, as Ollama is beside an
// agent, with models preloaded and kept, the given OLLAMA_SIM_* settings, on loopback ports of
// its choosing; it returns the daemon's and the registry's URLs and stops the program when the
// benchmark ends. In the benchmark's own process the simulator shared the agent's scheduler and
// collector, which no real engine does: its per-token cost then moved with the agent's.
func ollamaSimProcess(b *testing.B, env []string, models ...string) (daemon, registry string) {
	b.Helper()
	return simProcess(b, "ollama-sim", "ollama-sim: serving %s registry %s", env,
		"serve", "-addr", "127.0.0.1:0", "-registry-addr", "127.0.0.1:0", "-keep-alive", "-1", "-preloaded", strings.Join(models, ","))
}

// hailoSimProcess is ollamaSimProcess for the hailo-ollama simulator, with FastConfig's
// settings, its data in dataDir: it returns the daemon's and the model library's URLs.
func hailoSimProcess(b *testing.B, dataDir string, env []string, models ...string) (daemon, library string) {
	b.Helper()
	env = append([]string{hailosim.EnvListen + "=127.0.0.1:0", hailosim.EnvLibraryListen + "=127.0.0.1:0",
		hailosim.EnvDataDir + "=" + dataDir, hailosim.EnvHEFSize + "=4096", hailosim.EnvPreloaded + "=" + strings.Join(models, ","),
		hailosim.EnvTokensPerSecond + "=0", hailosim.EnvTTFT + "=0s", hailosim.EnvLoadTime + "=0s", hailosim.EnvSwitchDelay + "=0s"}, env...)
	return simProcess(b, "hailo-sim", "hailo-sim: serving %s library %s", env)
}

// simProcess builds cmd/name and runs it with args and env added to this process's, until the
// benchmark ends; the first line it prints, read with format, gives its two URLs.
func simProcess(b *testing.B, name, format string, env []string, args ...string) (first, second string) {
	b.Helper()
	bin, err := simtest.Build(b.TempDir(), "github.com/llmkube/mesh/cmd/"+name, name)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var logs simtest.Buffer
	cmd.Stderr = &logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	// Its first line names its addresses.
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		io.Copy(io.Discard, out) // so the program never blocks on a full pipe
	}()
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Second)
	defer cancel()
	select {
	case l, ok := <-line:
		if _, err := fmt.Sscanf(l, format, &first, &second); !ok || err != nil {
			b.Fatalf("%s said %q (%v); its log:\n%s", name, l, err, logs.String())
		}
	case <-ctx.Done():
		b.Fatalf("%s did not start; its log:\n%s", name, logs.String())
	}
	return first, second
}
