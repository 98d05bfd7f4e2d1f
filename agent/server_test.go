package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
)

func do(t *testing.T, method, url, token, body string) (*http.Response, api.ErrorBody) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	_ = json.Unmarshal(buf.Bytes(), &eb)
	return resp, eb
}

func TestAuthentication(t *testing.T) {
	s := serve(t, newBareAgent(t, "x86-nvidia", nil), nil)
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, _ := do(t, "GET", s.url+path, "", ""); resp.StatusCode != http.StatusOK {
			t.Errorf("%s without a token: %d, want 200", path, resp.StatusCode)
		}
	}
	if resp, _ := do(t, "GET", s.url+"/healthz", "", ""); resp.Header.Get(api.NodeHeader) != s.a.Name() {
		t.Errorf("/healthz names %q, want the agent %q: a dial-back must know who answered", resp.Header.Get(api.NodeHeader), s.a.Name())
	}
	for _, path := range []string{"/v1/host", "/v1/placements", "/v1/mesh", "/v1/events", "/metrics"} {
		resp, eb := do(t, "GET", s.url+path, "", "")
		if resp.StatusCode != http.StatusUnauthorized || eb.Error == nil || eb.Error.Code != api.CodeUnauthorized {
			t.Errorf("%s without a token: %d %+v", path, resp.StatusCode, eb.Error)
		}
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate header", path)
		}
	}
	other, _ := api.NewSecret()
	for _, tok := range []string{"nonsense", api.AdminToken(other), "llmk_ns_team-a_00"} {
		if resp, eb := do(t, "GET", s.url+"/v1/host", tok, ""); resp.StatusCode != http.StatusUnauthorized || eb.Error.Code != api.CodeUnauthorized {
			t.Errorf("token %.12s…: %d", tok, resp.StatusCode)
		}
	}
	h, err := s.admin.Host(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h.Name == "" || h.Memory.Budget == 0 || h.OS != "linux" || h.CPUs == 0 {
		t.Fatalf("host = %+v", h)
	}
	if _, err := s.nsClient(t, "team-a").Host(context.Background()); err != nil {
		t.Fatalf("namespace token on /v1/host: %v", err)
	}
	// The metrics are the whole host's, every namespace's models in their labels.
	nsTok, err := api.NamespaceToken(api.AdminToken(s.secret), "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if resp, eb := do(t, "GET", s.url+"/metrics", nsTok, ""); resp.StatusCode != http.StatusForbidden || eb.Error == nil || eb.Error.Code != api.CodeNamespaceNotAllow {
		t.Errorf("/metrics with a namespace token: %d %+v", resp.StatusCode, eb.Error)
	}
	if resp, _ := do(t, "GET", s.url+"/metrics", api.AdminToken(s.secret), ""); resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics with the admin token: %d", resp.StatusCode)
	}
	if resp, eb := do(t, "GET", s.url+"/v1/nothing", api.AdminToken(s.secret), ""); resp.StatusCode != 404 || eb.Error.Code != api.CodeNotFound {
		t.Fatalf("unknown route: %d %+v", resp.StatusCode, eb.Error)
	}
}

func TestRefusalsBeforeSizing(t *testing.T) {
	a := newBareAgent(t, "x86-nvidia", func(c *Config) { c.Namespaces = []string{"team-a", "default"} })
	s := serve(t, a, nil)
	ctx := context.Background()
	cases := []struct {
		name   string
		client *apiclient.Client
		req    api.PlacementRequest
		code   api.Code
		status int
	}{
		{"malformed source", s.admin, api.PlacementRequest{Source: "ftp://x/model.gguf"}, api.CodeInvalidSource, 400},
		{"relative path", s.admin, api.PlacementRequest{Source: "models/x.gguf"}, api.CodeInvalidSource, 400},
		{"plain http", s.admin, api.PlacementRequest{Source: "http://10.0.0.2/x.gguf"}, api.CodeInvalidSource, 400},
		{"hailo on llama-server", s.admin, api.PlacementRequest{Source: "hailo://qwen2:1.5b", Runtime: api.RuntimeLlamaServer}, api.CodeRuntimeMismatch, 400},
		{"gguf on ollama", s.admin, api.PlacementRequest{Source: "/m/x.gguf", Runtime: api.RuntimeOllama}, api.CodeRuntimeMismatch, 400},
		{"hailo without a device", s.admin, api.PlacementRequest{Source: "hailo://qwen2:1.5b"}, api.CodeAcceleratorMissing, 422},
		{"namespace not allowed", s.admin, api.PlacementRequest{Source: "/m/x.gguf", Namespace: "team-b"}, api.CodeNamespaceNotAllow, 403},
		{"runtime not enabled", s.admin, api.PlacementRequest{Source: "/m/x.gguf"}, api.CodeEngineUnavailable, 503},
		{"other namespace's token", s.nsClient(t, "team-a"), api.PlacementRequest{Source: "/m/x.gguf", Namespace: "default"}, api.CodeForbidden, 403},
		{"file outside the GGUF folders", s.nsClient(t, "team-a"), api.PlacementRequest{Source: "/m/x.gguf"}, api.CodeInvalidSource, 400},
		{"warn needs admin", s.nsClient(t, "team-a"), api.PlacementRequest{Source: "ollama://qwen2:1.5b", MemoryCheck: "warn"}, api.CodeForbidden, 403},
		{"protected needs admin", s.nsClient(t, "team-a"), api.PlacementRequest{Source: "ollama://qwen2:1.5b", Protected: true}, api.CodeForbidden, 403},
		{"bad priority", s.admin, api.PlacementRequest{Source: "/m/x.gguf", Priority: "urgent"}, api.CodeBadRequest, 400},
		{"bad namespace", s.admin, api.PlacementRequest{Source: "/m/x.gguf", Namespace: "Team_A"}, api.CodeBadRequest, 400},
		{"split's round-trip bound over 1 s", s.admin, api.PlacementRequest{Source: "/m/x.gguf", Split: &api.SplitAsk{MaxRTTMillis: 5000}}, api.CodeBadRequest, 400},
		{"negative round-trip bound", s.admin, api.PlacementRequest{Source: "/m/x.gguf", Split: &api.SplitAsk{MaxRTTMillis: -1}}, api.CodeBadRequest, 400},
		{"projector on ollama", s.admin, api.PlacementRequest{Source: "ollama://qwen2:1.5b", MMProj: "/m/p.gguf"}, api.CodeBadRequest, 400},
		{"projector not a GGUF", s.admin, api.PlacementRequest{Source: "/m/x.gguf", MMProj: "ollama://llava:7b"}, api.CodeInvalidSource, 400},
		{"malformed projector", s.admin, api.PlacementRequest{Source: "/m/x.gguf", MMProj: "ftp://x/p.gguf"}, api.CodeInvalidSource, 400},
		{"projector over plain http", s.admin, api.PlacementRequest{Source: "/m/x.gguf", MMProj: "http://10.0.0.2/p.gguf"}, api.CodeInvalidSource, 400},
		{"projector outside the GGUF folders", s.nsClient(t, "team-a"), api.PlacementRequest{Source: "https://example.com/x.gguf", MMProj: "/m/p.gguf"}, api.CodeInvalidSource, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.client.Place(ctx, c.req)
			if got := codeOfErr(err); got != c.code {
				t.Fatalf("code %q (%v), want %s", got, err, c.code)
			}
			body, _ := json.Marshal(c.req)
			if resp, _ := do(t, "POST", s.url+"/v1/placements", c.client.Token, string(body)); resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
		})
	}
	if ps, err := s.admin.Placements(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("refusals left placements behind: %v %v", ps, err)
	}
	// Unknown fields and junk bodies are refused, not ignored.
	for _, body := range []string{`{"source":"/m/x.gguf","contxt":4096}`, `{"source":`, `{"source":"/m/x.gguf"} {}`} {
		resp, eb := do(t, "POST", s.url+"/v1/placements", api.AdminToken(s.secret), body)
		if resp.StatusCode != 400 || eb.Error.Code != api.CodeBadRequest {
			t.Errorf("body %s: %d %+v", body, resp.StatusCode, eb.Error)
		}
	}
	big := `{"source":"` + strings.Repeat("a", maxBody) + `"}`
	if resp, _ := do(t, "POST", s.url+"/v1/placements", api.AdminToken(s.secret), big); resp.StatusCode != 400 {
		t.Errorf("oversized body: %d", resp.StatusCode)
	}
	// The estimate endpoint answers the same refusals as verdicts, reserving nothing.
	e, err := s.admin.Estimate(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
	if err != nil || e.Verdict != api.VerdictRefused || e.Code != api.CodeAcceleratorMissing {
		t.Fatalf("estimate: %+v %v", e, err)
	}
	// NotFound for a placement that does not exist, on get and delete.
	if _, err := s.admin.Placement(ctx, "p-nope"); codeOfErr(err) != api.CodeNotFound {
		t.Fatalf("get missing: %v", err)
	}
	if err := s.admin.Delete(ctx, "p-nope"); codeOfErr(err) != api.CodeNotFound {
		t.Fatalf("delete missing: %v", err)
	}
	// Each refusal was counted by code.
	fams := scrape(t, s.url, api.AdminToken(s.secret))
	counts := map[string]float64{}
	for _, m := range fams["llmkube_admissions_refused_total"].GetMetric() {
		counts[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	for code, want := range map[string]float64{"InvalidSource": 16, "RuntimeMismatch": 4, "AcceleratorMissing": 2, "NamespaceNotAllowed": 2, "EngineUnavailable": 2} {
		if counts[code] != want {
			t.Errorf("refused{code=%s} = %v, want %v (all: %v)", code, counts[code], want, counts)
		}
	}
}

// scrape reads /metrics and parses it as the Prometheus text format.
func scrape(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse as Prometheus text: %v", err)
	}
	return fams
}

func TestOpenMetrics(t *testing.T) {
	s := serve(t, newBareAgent(t, "pi5-hailo", nil), func(c *ServerConfig) { c.OpenMetrics = true })
	fams := scrape(t, s.url, "")
	if got := fams["llmkube_memory_budget_bytes"].GetMetric()[0].GetGauge().GetValue(); got != float64(s.a.Budget()) {
		t.Fatalf("budget gauge %v, want %d", got, s.a.Budget())
	}
	if !strings.Contains(fams["llmkube_memory_budget_bytes"].GetHelp(), "host-wide") {
		t.Fatal("the budget's help text does not say it is host-wide")
	}
}

func TestEventsStreamReplayAndNamespaces(t *testing.T) {
	a := newBareAgent(t, "x86-nvidia", nil)
	s := serve(t, a, func(c *ServerConfig) { c.Heartbeat = 20 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	stream := func(c *apiclient.Client, after uint64) <-chan api.Event {
		ch := make(chan api.Event, 16)
		go func() {
			_ = c.Events(ctx, after, nil, func(ev api.Event) error {
				ch <- ev
				return nil
			})
		}()
		return ch
	}
	// Subscribe before anything happens; a's stream must not see b's refusals.
	allCh := stream(s.admin, 0)
	aCh := stream(s.nsClient(t, "team-a"), 0)
	waitFor(t, func() bool { return s.srv.subs.open() == 2 }, "both event streams open")
	_, _ = s.nsClient(t, "team-b").Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
	_, _ = s.nsClient(t, "team-a").Place(ctx, api.PlacementRequest{Source: "nope"})

	first := <-allCh
	if first.Type != api.EventRefused || first.Code != api.CodeAcceleratorMissing || first.Placement.Namespace != "team-b" {
		t.Fatalf("first event = %+v", first)
	}
	second := <-allCh
	if second.Code != api.CodeInvalidSource || second.Seq <= first.Seq {
		t.Fatalf("second event = %+v", second)
	}
	if ev := <-aCh; ev.Seq != second.Seq {
		t.Fatalf("team-a saw %+v, want only its own refusal", ev)
	}
	// Replay from the first event's id gives the second again.
	replay := stream(s.admin, first.Seq)
	if ev := <-replay; ev.Seq != second.Seq {
		t.Fatalf("replay after %d gave %d", first.Seq, ev.Seq)
	}
	// ?since= works like Last-Event-ID; a bad id is refused.
	sinceReq, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/v1/events?since="+strconv.FormatUint(first.Seq, 10), nil)
	sinceReq.Header.Set("Authorization", "Bearer "+api.AdminToken(s.secret))
	resp, err := http.DefaultClient.Do(sinceReq)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events?since: %v %v", resp, err)
	}
	sc := bufio.NewScanner(resp.Body)
	var sawID bool
	for sc.Scan() {
		if sc.Text() == "id: "+strconv.FormatUint(second.Seq, 10) {
			sawID = true
			break
		}
	}
	resp.Body.Close()
	if !sawID {
		t.Fatal("?since= did not replay the second event")
	}
	req, _ := http.NewRequest("GET", s.url+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+api.AdminToken(s.secret))
	req.Header.Set("Last-Event-ID", "x")
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("bad Last-Event-ID: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
}

func TestMeshViewWithoutMesh(t *testing.T) {
	s := serve(t, newBareAgent(t, "pi5-hailo", nil), nil)
	v, err := s.admin.Mesh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Mesh != "test" || len(v.Members) != 1 || v.Members[0].Name != s.a.Name() || v.Members[0].Liveness != api.Alive || v.Members[0].Host == nil {
		t.Fatalf("view = %+v", v)
	}
}

// Without a mesh, GET /v1/doctor is the host's own report, to any valid token, never to none.
func TestDoctorWithoutMesh(t *testing.T) {
	s := serve(t, newBareAgent(t, "pi5-hailo", nil), nil)
	r, err := s.admin.Doctor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Node != s.a.Name() || r.Mesh != "test" || r.Findings == nil {
		t.Fatalf("report = %+v", r)
	}
	if _, err := s.nsClient(t, "team-a").Doctor(context.Background()); err != nil {
		t.Fatalf("namespace token: %v", err)
	}
	if resp, _ := do(t, "GET", s.url+"/v1/doctor", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", resp.StatusCode)
	}
}

func TestStalledAgentFailsLoudly(t *testing.T) {
	a := newBareAgent(t, "pi5-hailo", func(c *Config) { c.StallTimeout = 60 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitReady(t, a)
	a.mu.Lock() // a deadlock, as far as the rest of the agent can tell
	select {
	case err := <-done:
		a.mu.Unlock()
		if err == nil || !strings.Contains(err.Error(), "locked") {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		a.mu.Unlock()
		t.Fatal("a stalled agent kept running")
	}
}

// Anonymous access is opt-in and plainly shown: the doctor names it to the admin and to the
// namespace it serves, and to no other namespace (which would learn that namespace's name).
func TestDoctorShowsAnonymousAccess(t *testing.T) {
	s := serve(t, newBareAgent(t, "pi5-hailo", func(c *Config) { c.AnonymousNamespace = "home" }), nil)
	has := func(r api.DoctorReport) bool {
		for _, f := range r.Findings {
			if strings.Contains(f.Problem, "anonymous access is on") && strings.Contains(f.Problem, "namespace home") {
				return true
			}
		}
		return false
	}
	for name, c := range map[string]*apiclient.Client{"admin": s.admin, "home": s.nsClient(t, "home"), "team-a": s.nsClient(t, "team-a")} {
		r, err := c.Doctor(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := name != "team-a"; has(r) != want {
			t.Errorf("%s token: anonymous-access finding shown = %v, want %v (%+v)", name, has(r), want, r.Findings)
		}
	}
	off := serve(t, newBareAgent(t, "pi5-hailo", nil), nil)
	if r, err := off.admin.Doctor(context.Background()); err != nil || has(r) {
		t.Fatalf("anonymous access off: %v %+v", err, r.Findings)
	}
}
