package cli_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// TestRemoteEscapesNeverReachTheTerminal: an agent whose view holds escape sequences in every
// string a member announced (OS, chip, names, reasons) and absurd figures. Nothing the
// commands print, table or log, carries them.
func TestRemoteEscapesNeverReachTheTerminal(t *testing.T) {
	const esc = "\x1b]0;owned\x07\x1b[2J\x1b[31m\u009b1m"
	now := time.Now()
	h := &api.Host{
		Name: "evil", OS: "linux" + esc, Arch: "arm64" + esc, Chip: "chip" + esc, CPUs: 4,
		Memory:       api.Memory{Total: 1, Budget: math.MaxInt64, Committed: math.MaxInt64, Reserved: math.MaxInt64},
		Accelerators: []api.Accelerator{{Kind: "hailo" + esc, Name: "npu" + esc}},
		Engines:      []api.Engine{{Runtime: api.RuntimeOllama, Present: true, Healthy: true, Version: "1" + esc}},
		APIAddr:      "127.0.0.1:1", Version: "9" + esc,
	}
	p := api.Placement{ID: "p-1" + esc, Host: "evil", Model: "model" + esc, Source: "ollama://m" + esc, Runtime: api.RuntimeOllama,
		Namespace: "default", State: api.StateReady, Reason: "why" + esc, Memory: api.SizeEstimate{Bytes: math.MaxInt64}}
	view := api.MeshView{Mesh: "m" + esc, Self: "evil", At: now, Members: []api.Member{
		{Name: "evil", Role: api.RoleAgent, Addr: "127.0.0.1:7946", Liveness: api.Alive, Reason: "r" + esc, Host: h, Placements: []api.Placement{p}, Updated: now},
	}}
	ev := api.Event{Seq: 1, Time: now, Type: api.EventMesh, Host: "evil" + esc, Member: "evil" + esc, Message: "joined" + esc}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/mesh":
			json.NewEncoder(w).Encode(view)
		case "/v1/placements":
			json.NewEncoder(w).Encode(api.PlacementList{Placements: []api.Placement{p}})
		case "/v1/events":
			w.Header().Set("Content-Type", "text/event-stream")
			b, _ := json.Marshal(ev)
			fmt.Fprintf(w, "id: 1\ndata: %s\n\n", b)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	h.APIAddr = srv.Listener.Addr().String() // where watch follows the events
	srv.Start()
	t.Cleanup(srv.Close)
	env := map[string]string{"LLMKUBE_TOKEN": "llmk_admin_00"}
	for _, args := range [][]string{
		{"mesh", "hosts", "--all"},
		{"mesh", "models"},
		{"mesh", "watch", "--timeout", "1s"},
		{"mesh", "hosts", "--all", "--verbose"},
	} {
		r := runCLI(t, t.Context(), env, "", append(args, "--agent", srv.URL)...)
		for _, out := range []string{r.stdout, r.stderr} {
			require.False(t, strings.ContainsAny(out, "\x1b\x07\u009b"), "%v printed an escape sequence: %q", args, out)
		}
		require.NotEmpty(t, r.stdout, "%v printed nothing: %s", args, r.stderr)
	}
}
