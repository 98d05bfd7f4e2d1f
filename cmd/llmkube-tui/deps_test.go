package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestConsoleLinksNoAgentEngineOrSimulator holds the layout (DESIGN §2): the console users
// install talks to agents through the mesh and their HTTP API, so it links no agent internals,
// no engine driver and no simulator; the demo mesh that needs them is llmkube-demo.
func TestConsoleLinksNoAgentEngineOrSimulator(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.CommandContext(t.Context(), goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := regexp.MustCompile(`^github\.com/llmkube/mesh/(sim|engines|hwprobe|agent)(/|$)`)
	contract := regexp.MustCompile(`^github\.com/llmkube/mesh/agent/api(/|$)`) // shared by every layer
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		if forbidden.MatchString(p) && !contract.MatchString(p) {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Errorf("llmkube-tui links %s", strings.Join(bad, ", "))
	}
	if !strings.Contains(string(out), "github.com/llmkube/mesh/tui\n") {
		t.Errorf("go list does not list the console itself: %s", out)
	}
}
