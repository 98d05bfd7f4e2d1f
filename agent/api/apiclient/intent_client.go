package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"github.com/llmkube/mesh/agent/api"
)

// Intents lists the intents the token may see, with how each is met (GET /v1/intents).
func (c *Client) Intents(ctx context.Context) ([]api.IntentStatus, error) {
	var out []api.IntentStatus
	return out, c.call(ctx, http.MethodGet, "/v1/intents", nil, &out)
}

// Intend asks the mesh to keep a model running on req.Replicas hosts, wherever they rank best
// (POST /v1/intents); no host is chosen by the caller.
func (c *Client) Intend(ctx context.Context, req api.PlacementRequest) (api.Intent, error) {
	var in api.Intent
	return in, c.call(ctx, http.MethodPost, "/v1/intents", req, &in)
}

// Unintend stops keeping a model: its intent is deleted and every replica removed.
func (c *Client) Unintend(ctx context.Context, namespace, name string) (api.Intent, error) {
	var in api.Intent
	return in, c.call(ctx, http.MethodDelete, "/v1/intents/"+url.PathEscape(namespace)+"/"+url.PathEscape(name), nil, &in)
}

// SetAlias makes name a mesh-wide name for source: the first request that names it places it.
func (c *Client) SetAlias(ctx context.Context, name string, req api.AliasRequest) (api.Intent, error) {
	var in api.Intent
	return in, c.call(ctx, http.MethodPut, "/v1/aliases/"+url.PathEscape(name), req, &in)
}
