package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// checkNamespaces uses a team-a token on every route of every agent and finds nothing of the
// default namespace in any answer, events included; the team's own model is there (the check can
// fail both ways).
func checkNamespaces(ctx context.Context, t *testing.T, e *env, n note) {
	var tok struct{ Token string }
	if r, err := e.meshJSON(ctx, &tok, "token", "--namespace", teamNS); err != nil || r.code != 0 || tok.Token == "" {
		t.Fatalf("mesh token: %v %s", err, r)
	}
	team := tok.Token
	hidden := defaultPlacements(ctx, t, e)

	// Events, streamed with the team token while both namespaces change.
	events := watchEvents(ctx, t, e, team)
	tc := e.client(e.laptop, e.x86, team)
	tp, err := tc.Place(ctx, api.PlacementRequest{Source: "ollama://" + teamModel, Namespace: teamNS})
	if err != nil {
		t.Fatalf("placing %s in %s: %v", teamModel, teamNS, err)
	}
	if tp, err = tc.WaitPlacement(ctx, tp.ID, 100*time.Millisecond, nil); err != nil || tp.State != api.StateReady {
		t.Fatalf("%s in %s: %v %+v", teamModel, teamNS, err, tp)
	}
	// A default-namespace placement made and deleted meanwhile.
	ac := e.client(e.laptop, e.x86, e.admin)
	other, err := ac.Place(ctx, api.PlacementRequest{Source: "ollama://gemma3:1b"})
	if err != nil {
		t.Fatal(err)
	}
	hidden.add(`"gemma3:1b"`, other.ID)
	if other, err = ac.WaitPlacement(ctx, other.ID, 100*time.Millisecond, nil); err != nil || other.State != api.StateReady {
		t.Fatalf("gemma3:1b: %v %+v", err, other)
	}
	if err := ac.Delete(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	n("%s ready in %s; gemma3:1b placed and deleted in default", teamModel, teamNS)

	for _, a := range e.agents() {
		checkTeamReads(ctx, t, e, a, team, hidden)
		checkOtherPlacements(ctx, t, e, a, team, hidden)
		checkOtherModels(ctx, t, e, a, team, hidden)
		code, body, err := e.laptop.do(ctx, http.MethodPost, a.apiURL()+"/v1/placements", team, api.PlacementRequest{Source: "ollama://gemma3:1b", Namespace: api.DefaultNamespace})
		if err != nil || code < 400 {
			t.Errorf("placing in default with the %s token on %s: %d %v %s", teamNS, a.Name, code, err, body)
		}
	}
	// Every default placement is still there.
	for _, id := range hidden.ids() {
		if id == other.ID {
			continue
		}
		found := false
		for _, a := range e.agents() {
			if _, err := e.client(e.laptop, a, e.admin).Placement(ctx, id); err == nil {
				found = true
			}
		}
		if !found {
			t.Errorf("placement %s is gone after the %s token tried to delete it", id, teamNS)
		}
	}
	checkTeamEvents(t, e, events(), hidden, n)
}

// secrets is what the team must never see: the default namespace's placements, by name
// (quoted, as JSON has it) and id.
type secrets []string

// defaultPlacements are the default namespace's placements on every agent.
func defaultPlacements(ctx context.Context, t *testing.T, e *env) *secrets {
	var s secrets
	for _, a := range e.agents() {
		ps, err := e.client(e.laptop, a, e.admin).Placements(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Namespace == api.DefaultNamespace {
				s.add(`"`+p.Model+`"`, p.ID)
			}
		}
	}
	if len(s) == 0 {
		t.Fatal("no default-namespace placement to hide: the placements above failed")
	}
	return &s
}

func (s *secrets) add(name, id string) { *s = append(*s, name, id) }

// leaks are the secrets body shows.
func (s *secrets) leaks(body []byte) []string {
	var out []string
	for _, v := range *s {
		if strings.Contains(string(body), v) {
			out = append(out, v)
		}
	}
	return out
}

// ids picks the placement ids out of the secrets (names are quoted).
func (s *secrets) ids() []string {
	var out []string
	for _, v := range *s {
		if !strings.HasPrefix(v, `"`) {
			out = append(out, v)
		}
	}
	return out
}

// watchEvents follows every agent's events with token; the function it returns stops them and
// gives what each agent sent.
func watchEvents(ctx context.Context, t *testing.T, e *env, token string) func() map[string][]api.Event {
	var mu sync.Mutex
	seen := map[string][]api.Event{}
	ectx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, a := range e.agents() {
		wg.Add(1)
		connected := make(chan error, 1)
		go func() {
			defer wg.Done()
			_ = e.laptop.events(ectx, a.apiURL(), token, 0, connected, func(ev api.Event) {
				mu.Lock()
				seen[a.Name] = append(seen[a.Name], ev)
				mu.Unlock()
			})
		}()
		if err := <-connected; err != nil {
			stop()
			t.Fatalf("%s's events with the %s token: %v", a.Name, teamNS, err)
		}
	}
	return func() map[string][]api.Event {
		stop()
		wg.Wait()
		return seen
	}
}

// checkTeamReads reads every route of a with the team's token: none shows a secret, and the
// team's own model is listed once gossip has carried it.
func checkTeamReads(ctx context.Context, t *testing.T, e *env, a *agentHost, team string, hidden *secrets) {
	for _, path := range []string{"/v1/host", "/v1/mesh", "/v1/doctor", "/v1/placements", "/v1/models", "/api/tags", "/api/ps", "/api/version", "/metrics"} {
		code, body, err := e.laptop.get(ctx, a.apiURL()+path, team)
		if err != nil {
			t.Errorf("%s %s: %v", a.Name, path, err)
			continue
		}
		if code == http.StatusOK && (path == "/v1/host" || path == "/v1/mesh") {
			body = withoutCatalogue(body)
		}
		if l := hidden.leaks(body); len(l) > 0 {
			t.Errorf("GET %s on %s with the %s token (HTTP %d) shows the default namespace's %s: %s", path, a.Name, teamNS, code, strings.Join(l, ", "), around(body, l[0]))
		}
	}
	if _, err := eventually(ctx, 10*time.Second, func(ctx context.Context) (bool, string) {
		code, body, err := e.laptop.get(ctx, a.apiURL()+"/v1/models", team)
		return err == nil && code == http.StatusOK && strings.Contains(string(body), `"`+teamModel+`"`),
			fmt.Sprintf("%s's /v1/models with the %s token lacks %s: %d %v %s", a.Name, teamNS, teamModel, code, err, body)
	}); err != nil {
		t.Error(err)
	}
}

// checkOtherPlacements: another namespace's placement is not found on a, cannot be deleted,
// and its log is not read. The answer may name the id asked about, nothing else.
func checkOtherPlacements(ctx context.Context, t *testing.T, e *env, a *agentHost, team string, hidden *secrets) {
	for _, id := range hidden.ids() {
		for _, r := range []struct{ method, path string }{
			{http.MethodGet, "/v1/placements/" + id},
			{http.MethodGet, "/v1/placements/" + id + "/log"},
			{http.MethodDelete, "/v1/placements/" + id},
		} {
			code, body, err := e.laptop.do(ctx, r.method, a.apiURL()+r.path, team, nil)
			if err != nil || code != http.StatusNotFound || len(hidden.leaks([]byte(strings.ReplaceAll(string(body), id, "")))) > 0 {
				t.Errorf("%s %s on %s with the %s token: %d %v %s", r.method, r.path, a.Name, teamNS, code, err, body)
			}
		}
	}
}

// checkOtherModels: the default namespace's models are not chatted with on a. Every gateway
// route that names a model answers not found, naming no more than the model asked for;
// pulling through the data plane is refused outright.
func checkOtherModels(ctx context.Context, t *testing.T, e *env, a *agentHost, team string, hidden *secrets) {
	for _, m := range []string{llamaModel, ollamaModel} {
		c := e.chat(ctx, a, team, m, false, 4, nil)
		if c.status != http.StatusNotFound {
			t.Errorf("chat with default's %s on %s with the %s token: %s", m, a.Name, teamNS, c)
		}
		req := map[string]any{"model": m, "stream": false, "prompt": "hi", "input": "hi", "name": m,
			"messages": []map[string]string{{"role": "user", "content": "hi"}}}
		for _, path := range []string{"/api/chat", "/api/generate", "/api/show", "/api/embed", "/api/embeddings",
			"/v1/completions", "/v1/embeddings", "/v1/responses", "GET /v1/models/" + m, "/api/pull"} {
			method, url := http.MethodPost, path
			if u, ok := strings.CutPrefix(path, "GET "); ok {
				method, url = http.MethodGet, u
			}
			code, body, err := e.laptop.do(ctx, method, a.apiURL()+url, team, req)
			want := code == http.StatusNotFound
			if path == "/api/pull" {
				want = code >= 400
			}
			if err != nil || !want || len(hidden.leaks([]byte(strings.ReplaceAll(string(body), `"`+m+`"`, "")))) > 0 {
				t.Errorf("%s %s for default's %s on %s with the %s token: %d %v %s", method, url, m, a.Name, teamNS, code, err, body)
			}
		}
	}
}

// checkTeamEvents: no event the team saw shows a secret, and x86's showed the team's model.
func checkTeamEvents(t *testing.T, e *env, seen map[string][]api.Event, hidden *secrets, n note) {
	for _, a := range e.agents() {
		var sawTeam bool
		for _, ev := range seen[a.Name] {
			b, _ := json.Marshal(ev)
			if l := hidden.leaks(b); len(l) > 0 {
				t.Errorf("%s's events with the %s token show the default namespace's %s: %s", a.Name, teamNS, strings.Join(l, ", "), b)
			}
			if ev.Placement != nil && ev.Placement.Model == teamModel {
				sawTeam = true
			}
		}
		if a == e.x86 && !sawTeam {
			t.Errorf("x86's events with the %s token never showed %s: %d events", teamNS, teamModel, len(seen[a.Name]))
		}
		n("%s: %d events with the %s token", a.Name, len(seen[a.Name]), teamNS)
	}
}

// around is the text around the first s in body, to say where a leak is.
func around(body []byte, s string) string {
	i := strings.Index(string(body), s)
	if i < 0 {
		return ""
	}
	return "…" + string(body[max(0, i-120):min(len(body), i+len(s)+40)]) + "…"
}

// withoutCatalogue is a /v1/host or /v1/mesh answer without hailo-ollama's model lists: those
// are the zoo's catalogue, the same whoever asks and whatever anyone placed, so a name there
// tells nothing of another namespace. Any other answer comes back as it is.
func withoutCatalogue(body []byte) []byte {
	clear := func(h *api.Host) {
		if h == nil {
			return
		}
		for i := range h.Engines {
			if h.Engines[i].Runtime == api.RuntimeHailoOllama {
				h.Engines[i].Models = nil
			}
		}
	}
	var v api.MeshView
	var h api.Host
	var out []byte
	switch {
	case json.Unmarshal(body, &v) == nil && len(v.Members) > 0:
		for i := range v.Members {
			clear(v.Members[i].Host)
		}
		out, _ = json.Marshal(v)
	case json.Unmarshal(body, &h) == nil && h.Name != "":
		clear(&h)
		out, _ = json.Marshal(h)
	default:
		return body
	}
	return out
}

// checkAdmission: a model that does not fit is refused from its size, before any byte is
// pulled; a Hailo model on a host without one is refused.
func checkAdmission(ctx context.Context, t *testing.T, e *env, n note) {
	// llama3.2:3b with a 128k context needs ~17 GiB; x86's budget is 8 GiB.
	r := e.mesh(ctx, "place", "ollama://llama3.2:3b", "--host", e.x86.Name, "--context", "131072", "--json")
	if r.code != 3 || !strings.Contains(r.stdout, string(api.CodeInsufficientMemory)) {
		t.Errorf("a model too big for x86: %s", r)
	}
	n("llama3.2:3b at 128k context refused in %.2fs: %s", r.took.Seconds(), firstLine(r.stderr))
	code, body, err := e.x86.get(ctx, ollamaURL+"/api/tags", "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("x86's Ollama: %d %v", code, err)
	}
	if strings.Contains(string(body), "llama3.2:3b") {
		t.Errorf("the refused model was pulled anyway: %s", body)
	}
	r = e.mesh(ctx, "place", "hailo://qwen2:1.5b", "--host", e.x86.Name, "--json")
	if r.code != 3 {
		t.Errorf("a Hailo model on x86: %s", r)
	}
	n("hailo://qwen2:1.5b on x86 refused in %.2fs: %s", r.took.Seconds(), firstLine(r.stderr))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
