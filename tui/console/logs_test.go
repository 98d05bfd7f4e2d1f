package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/console"
)

// The host detail's log tail goes through the connection like every other action: asked of
// the placement's host with the connection's token, and a host not in the view is an error.
func TestPlacementLog(t *testing.T) {
	tower := api.Member{Name: "tower", Role: api.RoleAgent, Liveness: api.Alive, Host: &api.Host{Name: "tower"}}
	view := api.MeshView{Members: []api.Member{tower}}
	var auth, asked string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/mesh", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(view) })
	mux.HandleFunc("GET /v1/placements/{id}/log", func(w http.ResponseWriter, r *http.Request) {
		auth, asked = r.Header.Get("Authorization"), r.URL.RequestURI()
		_, _ = w.Write([]byte("main: model loaded\n"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	view.Members[0].Host.APIAddr = srv.Listener.Addr().String()

	c, err := console.Connect(t.Context(), console.Options{AgentURL: srv.URL, Token: "tok", Poll: time.Hour, Timeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	tail, err := c.PlacementLog(t.Context(), "tower", "p-5e", 4096)
	require.NoError(t, err)
	assert.Equal(t, "main: model loaded\n", tail)
	assert.Equal(t, "/v1/placements/p-5e/log?bytes=4096", asked)
	assert.Equal(t, "Bearer tok", auth)

	_, err = c.PlacementLog(t.Context(), "nosuch", "p-5e", 4096)
	assert.Error(t, err, "a host not in the view")
}
