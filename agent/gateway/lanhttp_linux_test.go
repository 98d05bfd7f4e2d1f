package gateway_test

import (
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/netnslab"
)

// TestClientsOverLANHTTP: the official JS clients (OpenAI, Ollama, Anthropic, AI SDK) and
// openai-go reach a node run with --lan-http in plain HTTP from another host, with a namespace
// token; the admin token is refused there. The hosts are two network namespaces: the node's API
// listens on host 1's LAN address, the clients run in host 2.
func TestClientsOverLANHTTP(t *testing.T) {
	lab := netnslab.New(t, 2)
	sim := ollamaSim(t, nil, "llama3.2:1b")
	o := ollamaOpts(t, "front", sim)
	o.gateway, o.listener, o.lanHTTP = sealedAs(t, "front"), lab.Listen(1), true
	n := newNode(t, o)
	place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", Namespace: "team"})

	// openai-go, dialling from host 2.
	hc := &http.Client{Transport: &http.Transport{DialContext: lab.Dial(2)}}
	t.Cleanup(hc.CloseIdleConnections)
	chat := func(t *testing.T, token string) (*openai.ChatCompletion, error) {
		c := openai.NewClient(option.WithBaseURL(n.url+"/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0), option.WithHTTPClient(hc))
		return c.Chat.Completions.New(t.Context(), userChat("llama", "Tell me about the mesh."))
	}
	t.Run("openai-go", func(t *testing.T) {
		got, err := chat(t, nsToken(t, "team"))
		require.NoError(t, err)
		require.Len(t, got.Choices, 1)
		assert.NotEmpty(t, got.Choices[0].Message.Content)
	})
	t.Run("admin token refused", func(t *testing.T) {
		_, err := chat(t, adminToken)
		var apiErr *openai.Error
		require.True(t, errors.As(err, &apiErr), "want an API error, got %v", err)
		assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
		assert.Contains(t, apiErr.Message, "admin token is refused in plain HTTP")
	})
	t.Run("agent routes refused", func(t *testing.T) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, n.url+"/v1/placements", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+nsToken(t, "team"))
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Contains(t, string(body), "served to other hosts over TLS only")
	})
	t.Run("js clients", func(t *testing.T) {
		runJSClients(t, n.url, nsToken(t, "team"), "llama", jsChecks{tools: true, embed: true, responses: true, netns: lab.NS(2)})
	})
}
