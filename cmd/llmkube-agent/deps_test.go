package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestAgentLinksNoPrometheusClient holds issue 17's saving: the Prometheus client library and
// what it drags (protobuf, procfs, expfmt, ...) were 2.4 MB of the agent's binary, whose pages
// are most of an idle agent's resident memory; internal/prom writes /metrics instead. Tests
// may import them (they parse /metrics with expfmt): they never enter the binary.
func TestAgentLinksNoPrometheusClient(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.CommandContext(t.Context(), goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		for _, prefix := range []string{"github.com/prometheus/", "google.golang.org/protobuf/"} {
			if strings.HasPrefix(p, prefix) {
				bad = append(bad, p)
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("llmkube-agent links %s", strings.Join(bad, ", "))
	}
	if !strings.Contains(string(out), "github.com/llmkube/mesh/internal/prom\n") {
		t.Errorf("go list does not list the agent's metrics package: %s", out)
	}
}
