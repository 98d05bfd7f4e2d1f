package gateway_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/hailo"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
	hailosim "github.com/llmkube/mesh/sim/hailo"
)

// TestAnonymousHailoClients: a Pi whose operator turned anonymous access on for namespace
// "home" serves the requests a hailo-ollama client sends without a token (Home Assistant's
// integration lists with /hailo/v1/list, asks /api/show, chats on /api/chat), and only those:
// other namespaces' models stay invisible, and nothing else opens.
func TestAnonymousHailoClients(t *testing.T) {
	var dataDir string
	hs := hailoSim(t, func(c *hailosim.Config) { dataDir = c.DataDir }, "qwen2:1.5b")
	os := ollamaSim(t, nil, "llama3.2:1b")
	hd, err := hailo.New(hailo.Config{URL: hs.URL()}, nil)
	require.NoError(t, err)
	od, err := ollama.New(ollama.Config{URL: os.URL()}, nil)
	require.NoError(t, err)
	n := newNode(t, nodeOpts{name: "pi", fixture: "pi5-hailo", drivers: []engines.Driver{hd, od},
		sizer: &sizing.Sizer{Guard: download.Options{AllowPrivate: true}, HailoManifestsDir: filepath.Join(dataDir, "models", "manifests"), HailoLibraryURL: hs.LibraryURL(),
			OllamaDaemon: os.URL(), OllamaRegistry: os.RegistryURL()},
		agent: func(c *agent.Config) { c.AnonymousNamespace = "home" }})
	place(t, n, api.PlacementRequest{Source: "hailo://qwen2:1.5b", Name: "qwen2:1.5b", Namespace: "home"})
	place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", Namespace: "family"})

	resp, b := call(t, "GET", n.url+"/hailo/v1/list", "", "")
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	assert.JSONEq(t, `{"models":["qwen2:1.5b"]}`, string(b), "the anonymous namespace's models only")

	resp, b = call(t, "POST", n.url+"/api/show", "", `{"model":"qwen2:1.5b"}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var show struct {
		Details struct {
			Format, Family    string
			QuantizationLevel string `json:"quantization_level"`
		}
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string
	}
	require.NoError(t, json.Unmarshal(b, &show))
	assert.Equal(t, "hef", show.Details.Format)
	assert.Equal(t, "qwen2", show.Details.Family)
	assert.Equal(t, "Q4_0", show.Details.QuantizationLevel)
	assert.EqualValues(t, 2048, show.ModelInfo["qwen2.context_length"])
	assert.Equal(t, []string{"completion"}, show.Capabilities, "no tools on hailo-ollama")

	resp, b = call(t, "POST", n.url+"/api/chat", "", `{"model":"qwen2:1.5b","messages":[{"role":"user","content":"hi"}],"stream":false}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	resp, b = call(t, "POST", n.url+"/v1/chat/completions", "", chatBody("qwen2:1.5b", "hi", false, ""))
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	resp, b = call(t, "POST", n.url+"/v1/messages", "", anBody("qwen2:1.5b", false, ""))
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	// A wrong key is refused, in x-api-key as in Authorization.
	resp, b = anCall(t, n.url, "llmk_wrong", anBody("qwen2:1.5b", false, ""))
	require.Equal(t, 401, resp.StatusCode, "%s", b)
	typ, _ := anErr(t, b)
	assert.Equal(t, "authentication_error", typ)

	// Another namespace's model is as absent as a model that does not exist.
	resp, b = call(t, "POST", n.url+"/api/chat", "", `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, 404, resp.StatusCode, "%s", b)
	resp, b = call(t, "POST", n.url+"/api/show", "", `{"model":"llama"}`)
	assert.Equal(t, 404, resp.StatusCode, "%s", b)
	resp, b = call(t, "GET", n.url+"/api/tags", "", "")
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	assert.NotContains(t, string(b), "llama")

	// A wrong token is refused, not taken for anonymous; the agent's own API stays closed.
	resp, b = call(t, "GET", n.url+"/api/tags", "llmk_wrong", "")
	assert.Equal(t, 401, resp.StatusCode, "%s", b)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/host", ""},
		{"GET", "/v1/placements", ""},
		{"POST", "/v1/placements", `{"source":"hailo://qwen2:1.5b","namespace":"home"}`},
		{"GET", "/v1/events", ""},
		{"GET", "/metrics", ""},
	} {
		resp, b := call(t, c.method, n.url+c.path, "", c.body)
		assert.Equal(t, 401, resp.StatusCode, "%s %s: %s", c.method, c.path, b)
	}

	// The operator (and the console, and the doctor) see that it is on.
	resp, b = call(t, "GET", n.url+"/v1/host", adminToken, "")
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var h api.Host
	require.NoError(t, json.Unmarshal(b, &h))
	assert.Equal(t, "home", h.Anonymous)
}

// TestAnonymousForwarded: an anonymous request to one agent for a model another agent serves
// is forwarded with the namespace's token, so the owner serves it without having anonymous
// access on itself.
func TestAnonymousForwarded(t *testing.T) {
	sa, sb := ollamaSim(t, nil), ollamaSim(t, nil, "llama3.2:1b")
	a := ollamaNode(t, "a", sa, nil, func(c *agent.Config) { c.AnonymousNamespace = "home" })
	b := ollamaNode(t, "b", sb, nil)
	place(t, b, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", Namespace: "home"})
	join(t, a, b)
	resp, body := call(t, "POST", a.url+"/api/chat", "", `{"model":"llama","messages":[{"role":"user","content":"hi"}],"stream":false}`)
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	assert.NotContains(t, resp.Header.Get("Authorization"), "llmk")

	// b itself is closed to anonymous callers.
	resp, body = call(t, "POST", b.url+"/api/chat", "", `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, 401, resp.StatusCode, "%s", body)
	// And without anonymous access, a refuses them too.
	resp, body = call(t, "GET", b.url+"/api/tags", "", "")
	assert.Equal(t, 401, resp.StatusCode, "%s", body)
}

func TestAnonymousNamespaceChecked(t *testing.T) {
	for _, c := range []struct {
		ns, why string
		allow   []string
	}{
		{"Bad Name!", "anonymous namespace", nil},
		{"home", "not among the namespaces allowed", []string{"work"}},
	} {
		sd, err := state.Open(t.TempDir())
		require.NoError(t, err)
		t.Cleanup(func() { sd.Close() })
		_, err = agent.New(agent.Config{State: sd, Sizer: &sizing.Sizer{}, AnonymousNamespace: c.ns, Namespaces: c.allow, ModelsDir: t.TempDir(), AllowTempStore: true})
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.why)
	}
}
