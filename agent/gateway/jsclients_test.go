package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// jsClients is the JS project of the official clients (testdata/jsclients: package.json and
// package-lock.json; `npm ci` there installs them, as .ci/run does).
const jsClients = "testdata/jsclients"

// jsChecks are the checks beyond plain chat the model can take.
type jsChecks struct {
	tools     bool // it calls tools
	embed     bool // it embeds
	responses bool // run the AI SDK through /v1/responses
	// netns runs the clients inside that network namespace, as another host on the LAN; on
	// this host when empty.
	netns string
}

// runJSClients runs the official JS clients (OpenAI SDK, Ollama SDK, Anthropic SDK, the AI SDK) against the
// gateway at url, or skips, saying why, when node or the installed packages are missing.
func runJSClients(t *testing.T, url, token, model string, with jsChecks) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the JS client tests need Node.js 18 or later")
	}
	if _, err := os.Stat(filepath.Join(jsClients, "node_modules")); err != nil {
		t.Skipf("the JS clients are not installed: run `npm ci` in agent/gateway/%s (%v)", jsClients, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	name, args := node, []string{"clients.mjs"}
	if with.netns != "" {
		name, args = "ip", append([]string{"netns", "exec", with.netns, node}, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = jsClients
	flag := map[bool]string{true: "1", false: "0"}
	cmd.Env = append(os.Environ(), "GATEWAY="+url, "TOKEN="+token, "MODEL="+model,
		"TOOLS="+flag[with.tools], "EMBED="+flag[with.embed], "RESPONSES="+flag[with.responses], "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	t.Logf("node clients.mjs:\n%s", out)
	require.NoError(t, err, "a JS client check failed (its line above says which)")
}

// TestJSClients: the official JS clients, streaming and not, tools included, against agents
// on loopback serving the simulators: an Ollama placement on the agent itself, and a
// llama-server placement on another agent, reached by forwarding.
func TestJSClients(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	front := ollamaNode(t, "front", sim, nil)
	place(t, front, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", Namespace: "team"})
	back := llamaServerNode(t, "back")
	join(t, front, back)
	t.Run("ollama", func(t *testing.T) {
		runJSClients(t, front.url, nsToken(t, "team"), "llama", jsChecks{tools: true, embed: true, responses: true})
	})
	t.Run("llama-server, forwarded", func(t *testing.T) {
		runJSClients(t, front.url, adminToken, "tiny", jsChecks{tools: true, responses: true})
	})
}
