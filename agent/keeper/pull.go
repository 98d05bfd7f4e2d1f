package keeper

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
)

// pullRequest is what Ollama clients send to POST /api/pull ("name" in older clients).
type pullRequest struct {
	Model  string `json:"model"`
	Name   string `json:"name"`
	Stream *bool  `json:"stream"`
}

// pull is Ollama's POST /api/pull on the mesh: the model is placed where it ranks best, as a
// request placed on demand is (in the namespaces where that is on, or for a model the mesh
// keeps an intent or an alias for), and the answer ends once it serves. Streamed (the default), it says each step as Ollama's progress lines do
// ({"status":…, "total":…, "completed":…}); otherwise one {"status":"success"}. An error is
// {"error":…}: the status says it before the stream begins, a last line after.
func (k *Keeper) pull(w http.ResponseWriter, r *http.Request) {
	var req pullRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		pullError(w, http.StatusBadRequest, "body is not a pull request: "+err.Error())
		return
	}
	model := strings.TrimSpace(cmp.Or(req.Model, req.Name))
	if model == "" {
		pullError(w, http.StatusBadRequest, "model is required")
		return
	}
	who := principal(r)
	ns := cmp.Or(who.Namespace, api.DefaultNamespace)
	if rest, ok := strings.CutPrefix(model, ns+"/"); ok {
		model = rest
	}
	err := k.mayDemand(ns, model)
	var in api.Intent
	if err == nil {
		in, err = k.demanded(r.Context(), api.Principal{Namespace: ns, Admin: who.Admin}, ns, model)
	}
	if err != nil {
		e := asError(err)
		pullError(w, agent.HTTPStatus(e.Code), e.Message)
		return
	}
	stream := req.Stream == nil || *req.Stream
	enc := json.NewEncoder(w)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	var look func([]api.Placement)
	if stream {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		last := ""
		say := func(line map[string]any) {
			b, _ := json.Marshal(line)
			if string(b) != last {
				last = string(b)
				_ = enc.Encode(line)
				flush()
			}
		}
		say(map[string]any{"status": "pulling manifest"})
		look = func(ps []api.Placement) {
			for _, p := range ps {
				switch p.State {
				case api.StatePulling:
					say(map[string]any{"status": "pulling " + in.Name + " on " + p.Host, "total": p.TotalBytes, "completed": p.PulledBytes})
				default:
					say(map[string]any{"status": fmt.Sprintf("%s %s on %s", p.State, in.Name, p.Host)})
				}
			}
		}
	}
	err = k.waitServing(r.Context(), in, look)
	switch {
	case err != nil && stream:
		_ = enc.Encode(map[string]string{"error": asError(err).Message})
	case err != nil:
		e := asError(err)
		pullError(w, agent.HTTPStatus(e.Code), e.Message)
	case stream:
		_ = enc.Encode(map[string]string{"status": "success"})
	default:
		agent.WriteJSON(w, http.StatusOK, map[string]string{"status": "success"})
	}
	flush()
}

// pullError answers an error as Ollama does: {"error": "…"}.
func pullError(w http.ResponseWriter, status int, msg string) {
	agent.WriteJSON(w, status, map[string]string{"error": msg})
}

func asError(err error) *api.Error {
	if e, ok := err.(*api.Error); ok {
		return e
	}
	return &api.Error{Code: api.CodeEngineUnavailable, Message: err.Error()}
}
