package gateway_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// A namespace that names its model like the admin's does not receive the admin's chats: the
// admin's bare name is the default namespace's, "team-b/tiny" is team-b's, and nothing resolves
// across namespaces unasked — not even at a gateway whose only local replica is team-b's.
func TestAdminNamesDoNotCrossNamespaces(t *testing.T) {
	simA := ollamaSim(t, nil, "llama3.2:1b")
	simB := ollamaSim(t, nil, "qwen2.5:0.5b")
	a := ollamaNode(t, "node-a", simA, nil)
	b := ollamaNode(t, "node-b", simB, nil)
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "tiny"})
	place(t, b, api.PlacementRequest{Source: "ollama://qwen2.5:0.5b", Name: "tiny", Namespace: "team-b"})
	join(t, a, b)

	chatAt := func(n *node, token, model string) {
		t.Helper()
		resp, body := call(t, "POST", n.url+"/v1/chat/completions", token, chatBody(model, "hi", false, ""))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	}
	for range 3 {
		chatAt(b, adminToken, "tiny")
		chatAt(a, adminToken, "tiny")
	}
	assert.Equal(t, 6, simA.Stats().Generations, "the admin's bare name is the default namespace's model")
	assert.Zero(t, simB.Stats().Generations, "team-b's model of the same name got none of the admin's chats")

	chatAt(a, adminToken, "team-b/tiny")
	chatAt(b, nsToken(t, "team-b"), "tiny")
	chatAt(a, nsToken(t, "team-b"), "team-b/tiny")
	assert.Equal(t, 3, simB.Stats().Generations, "team-b's model, by its qualified name or team-b's own token")
	assert.Equal(t, 6, simA.Stats().Generations)
}

// Embeddings resolve names as chats do: the admin's bare name never reaches another namespace's
// model, "team-b/tiny" does.
func TestEmbeddingNamesDoNotCrossNamespaces(t *testing.T) {
	sim := ollamaSim(t, nil, "qwen2.5:0.5b")
	b := ollamaNode(t, "node-b", sim, nil)
	place(t, b, api.PlacementRequest{Source: "ollama://qwen2.5:0.5b", Name: "tiny", Namespace: "team-b"})
	resp, body := call(t, "POST", b.url+"/v1/embeddings", adminToken, `{"model":"tiny","input":"hello"}`)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the admin's bare name is the default namespace's: %s", body)
	resp, body = call(t, "POST", b.url+"/api/embed", adminToken, `{"model":"tiny","input":"hello"}`)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", body)
	resp, body = call(t, "POST", b.url+"/v1/embeddings", adminToken, `{"model":"team-b/tiny","input":"hello"}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	resp, body = call(t, "POST", b.url+"/v1/embeddings", nsToken(t, "team-b"), `{"model":"tiny","input":"hello"}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	resp, body = call(t, "POST", b.url+"/v1/embeddings", adminToken, `{"model":"tiny","input":"hello"}`, "Upgrade", "websocket")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "no protocol upgrades, as on every model route: %s", body)
}
