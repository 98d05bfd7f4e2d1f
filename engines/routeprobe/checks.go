package routeprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/llmkube/mesh/agent/api"
)

// maxBody bounds what the probe reads of an answer.
const maxBody = 1 << 20

// answer is one HTTP exchange.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// summary is a one-line, bounded rendering of the answer for a table cell.
func (a answer) summary() string {
	if a.err != nil {
		return "request failed: " + a.err.Error()
	}
	s := strings.Join(strings.Fields(string(a.body)), " ")
	if s == "" {
		s = "(empty body)"
	}
	const width = 90
	if len(s) > width {
		s = s[:width] + "…"
	}
	return s
}

type prober struct {
	ctx    context.Context
	base   string
	client *http.Client
	seen   map[string]answer // bodiless GETs, asked once
	served string            // the model llama-server serves, once /v1/models told it
}

func (p *prober) get(path string) answer { return p.do(http.MethodGet, path, "", "") }

func (p *prober) do(method, path, contentType, body string) answer {
	key := method + " " + path
	cacheable := method == http.MethodGet && body == ""
	if a, ok := p.seen[key]; ok && cacheable {
		return a
	}
	a := p.exchange(method, path, contentType, body)
	if cacheable {
		p.seen[key] = a
	}
	return a
}

func (p *prober) exchange(method, path, contentType, body string) answer {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(p.ctx, method, p.base+path, rd)
	if err != nil {
		return answer{err: err}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return answer{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// check is one request and what the drivers expect of its answer.
type check struct {
	method, path, note string
	contentType        string // defaults to application/json when there is a body
	// body: "%MODEL%" stands for ProbeModel, "%SERVED%" for the model the engine says it serves
	// (only ever used with llama-server, which serves one model whatever the name).
	body     string
	expected string
	verify   func(a answer, p *prober, rep *Report) (observation string, ok bool)
}

func (p *prober) run(c check, rep *Report) RouteResult {
	served := ProbeModel
	if p.served != "" {
		served = p.served
	}
	body := strings.NewReplacer("%MODEL%", ProbeModel, "%SERVED%", served).Replace(c.body)
	ct := c.contentType
	if ct == "" && body != "" {
		ct = "application/json"
	}
	a := p.do(c.method, c.path, ct, body)
	rr := RouteResult{Method: c.method, Path: c.path, Note: c.note, Status: a.status, Expected: c.expected}
	if a.err != nil {
		rr.Observation, rr.Verdict = a.summary(), Differs
		return rr
	}
	obs, ok := c.verify(a, p, rep)
	rr.Observation, rr.Verdict = obs, Differs
	if ok {
		rr.Verdict = OK
	}
	return rr
}

// statusIs expects a status, whatever the body.
func statusIs(code int) func(answer, *prober, *Report) (string, bool) {
	return func(a answer, _ *prober, _ *Report) (string, bool) {
		return a.summary(), a.status == code
	}
}

// textIs expects a 200 whose body contains want.
func textIs(want string) func(answer, *prober, *Report) (string, bool) {
	return func(a answer, _ *prober, _ *Report) (string, bool) {
		return a.summary(), a.status == http.StatusOK && strings.Contains(string(a.body), want)
	}
}

// errorAt expects status with a JSON body carrying "error" (a string or an object), containing
// want when it is not empty.
func errorAt(code int, want string) func(answer, *prober, *Report) (string, bool) {
	return func(a answer, _ *prober, _ *Report) (string, bool) {
		var m map[string]json.RawMessage
		if json.Unmarshal(a.body, &m) != nil || m["error"] == nil {
			return a.summary(), false
		}
		return a.summary(), a.status == code && strings.Contains(string(m["error"]), want)
	}
}

func hasJSONArray(body []byte, field string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return false
	}
	var arr []json.RawMessage
	return json.Unmarshal(m[field], &arr) == nil && m[field] != nil && string(m[field]) != "null"
}

func version(a answer, _ *prober, rep *Report) (string, bool) {
	var v struct{ Version string }
	if a.status != http.StatusOK || json.Unmarshal(a.body, &v) != nil || v.Version == "" {
		return a.summary(), false
	}
	rep.Version = v.Version
	return "version " + v.Version, true
}

type listedModel struct {
	Name      string `json:"name"`
	Size      int64  `json:"size"`
	SizeVRAM  *int64 `json:"size_vram"`
	ExpiresAt string `json:"expires_at"`
}

// modelList reads {"models":[…]} of Ollama's shape; at most max entries when max > 0; with
// needExpiry each needs expires_at.
func modelList(max int, needExpiry bool) func(answer, *prober, *Report) (string, bool) {
	return func(a answer, _ *prober, _ *Report) (string, bool) {
		var l struct {
			Models *[]listedModel `json:"models"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &l) != nil || l.Models == nil {
			return a.summary(), false
		}
		if len(*l.Models) == 0 {
			return "no models", true
		}
		var parts []string
		ok := max <= 0 || len(*l.Models) <= max
		for _, m := range *l.Models {
			parts = append(parts, fmt.Sprintf("%s (%d bytes)", m.Name, m.Size))
			if needExpiry && m.ExpiresAt == "" {
				ok = false
			}
		}
		return fmt.Sprintf("%d: %s", len(parts), strings.Join(parts, ", ")), ok
	}
}

func nameList(a answer, _ *prober, _ *Report) (string, bool) {
	var l struct {
		Models *[]string `json:"models"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &l) != nil || l.Models == nil {
		return a.summary(), false
	}
	return fmt.Sprintf("%d manifests: %s", len(*l.Models), strings.Join(*l.Models, ", ")), true
}

// openAIModels reads an OpenAI model list and remembers its first id for later requests.
func openAIModels(a answer, p *prober, _ *Report) (string, bool) {
	var l struct {
		Object string
		Data   []struct{ ID string }
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &l) != nil || l.Object != "list" {
		return a.summary(), false
	}
	var ids []string
	for _, d := range l.Data {
		ids = append(ids, d.ID)
	}
	if len(ids) > 0 && p.served == "" {
		p.served = ids[0]
	}
	return fmt.Sprintf("%d models: %s", len(ids), strings.Join(ids, ", ")), true
}

func jsonValid(a answer, _ *prober, _ *Report) (string, bool) {
	return a.summary(), a.status == http.StatusOK && json.Valid(a.body)
}

var (
	unknownChat     = `{"model":"%MODEL%","messages":[{"role":"user","content":"hi"}],"stream":false}`
	unknownModel    = `{"model":"%MODEL%"}`
	no404Note       = "404: hailo-ollama 5.1.1 has no such route; the gateway must not forward it"
	unknownHailo    = `200 with {"error":"model '…' not found"} for an unknown model (5.1.x; 5.4 answers 404)`
	unknownOllama   = `404 with {"error":…} for an unknown model`
	ollamaVersionOK = `200 {"version":…}`
)

// hailoChecks is what the hailo-ollama driver and the gateway rely on: 5.1.1 as documented in
// shared/reference/engines.md, its quirks included.
var hailoChecks = []check{
	{method: "GET", path: "/", expected: `200 "hailo-ollama is running" (the health check)`, verify: textIs("hailo-ollama is running")},
	{method: "GET", path: "/api/version", expected: ollamaVersionOK, verify: version},
	{method: "GET", path: "/hailo/v1/list", expected: `200 {"models":["name:tag",…]}, every manifest (detection)`, verify: nameList},
	{method: "GET", path: "/api/tags", expected: `200 {"models":[…]}: the downloaded models with their HEF size`, verify: modelList(0, false)},
	{method: "GET", path: "/api/ps", expected: `200 {"models":[…]}: at most one model (one device), with expires_at`, verify: modelList(1, true)},
	{method: "POST", path: "/api/show", body: unknownModel, expected: unknownHailo, verify: errorAt(200, "not found")},
	{method: "POST", path: "/api/generate", body: `{"model":"%MODEL%","prompt":"","stream":false}`, expected: unknownHailo, verify: errorAt(200, "not found")},
	{method: "POST", path: "/api/chat", body: unknownChat, expected: unknownHailo, verify: errorAt(200, "not found")},
	{method: "POST", path: "/api/pull", body: `{"model":"%MODEL%","stream":false}`, expected: unknownHailo, verify: errorAt(200, "not found")},
	{method: "POST", path: "/v1/chat/completions", body: unknownChat, expected: `200 with {"error":…} for an unknown model (errors are HTTP 200 on /v1 in 5.1.x)`, verify: errorAt(200, "not found")},
	{method: "POST", path: "/v1/chat/completions", note: "stream:true", body: `{"model":"%MODEL%","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		expected: `200 with {"error":"streaming not supported…"}: the gateway streams through /api/chat`, verify: errorAt(200, "stream")},
	{method: "DELETE", path: "/api/delete", body: unknownModel, expected: "404 for an unknown model", verify: statusIs(http.StatusNotFound)},
	{method: "POST", path: "/api/chat", note: "form content type", contentType: "application/x-www-form-urlencoded", body: unknownChat,
		expected: "500: a body without a JSON Content-Type has no parser (always send application/json)", verify: statusIs(http.StatusInternalServerError)},
	{method: "GET", path: "/v1/models", expected: no404Note, verify: statusIs(http.StatusNotFound)},
	{method: "POST", path: "/v1/completions", body: `{"model":"%MODEL%","prompt":"hi"}`, expected: no404Note, verify: statusIs(http.StatusNotFound)},
	{method: "POST", path: "/v1/responses", body: `{"model":"%MODEL%","input":"hi"}`, expected: no404Note, verify: statusIs(http.StatusNotFound)},
	{method: "POST", path: "/api/embed", body: `{"model":"%MODEL%","input":"hi"}`, expected: no404Note, verify: statusIs(http.StatusNotFound)},
	{method: "POST", path: "/api/embeddings", body: `{"model":"%MODEL%","prompt":"hi"}`, expected: no404Note, verify: statusIs(http.StatusNotFound)},
	{method: "GET", path: "/health", expected: "404: no /health (the health check is GET /)", verify: statusIs(http.StatusNotFound)},
	{method: "GET", path: "/metrics", expected: no404Note, verify: statusIs(http.StatusNotFound)},
}

// ollamaChecks is what the Ollama driver and the gateway rely on.
var ollamaChecks = []check{
	{method: "GET", path: "/", expected: `200 "Ollama is running" (the health check)`, verify: textIs("Ollama is running")},
	{method: "GET", path: "/api/version", expected: ollamaVersionOK, verify: version},
	{method: "GET", path: "/hailo/v1/list", expected: "404: plain Ollama has no hailo list (detection)", verify: statusIs(http.StatusNotFound)},
	{method: "GET", path: "/api/tags", expected: `200 {"models":[…]} with sizes`, verify: modelList(0, false)},
	{method: "GET", path: "/api/ps", expected: `200 {"models":[…]} with size, size_vram and expires_at`, verify: modelList(0, true)},
	{method: "POST", path: "/api/show", body: unknownModel, expected: unknownOllama, verify: errorAt(http.StatusNotFound, "")},
	{method: "POST", path: "/api/generate", body: `{"model":"%MODEL%","prompt":"hi","stream":false}`, expected: unknownOllama, verify: errorAt(http.StatusNotFound, "")},
	{method: "POST", path: "/api/chat", body: unknownChat, expected: unknownOllama, verify: errorAt(http.StatusNotFound, "")},
	{method: "POST", path: "/v1/chat/completions", body: unknownChat, expected: "404 with an OpenAI error for an unknown model", verify: errorAt(http.StatusNotFound, "")},
	{method: "GET", path: "/v1/models", expected: `200 OpenAI list {"object":"list","data":[…]}`, verify: openAIModels},
	{method: "DELETE", path: "/api/delete", body: unknownModel, expected: "404 for an unknown model", verify: statusIs(http.StatusNotFound)},
	{method: "GET", path: "/health", expected: "404: Ollama has no /health (the health check is GET /)", verify: statusIs(http.StatusNotFound)},
}

// llamaChecks is what the llama-server driver and the gateway rely on.
var llamaChecks = []check{
	{method: "GET", path: "/health", expected: `200 {"status":"ok"}, or 503 "Loading model" while loading`, verify: llamaHealth},
	{method: "GET", path: "/v1/models", expected: `200 OpenAI list naming the model (its --alias)`, verify: openAIModels},
	{method: "GET", path: "/props", expected: "200 JSON with default_generation_settings.n_ctx", verify: llamaProps},
	{method: "GET", path: "/slots", expected: "200 JSON array of slots", verify: jsonValid},
	{method: "GET", path: "/metrics", expected: "200 Prometheus text with llamacpp:* series (the driver starts llama-server with --metrics)", verify: llamaMetrics},
	{method: "POST", path: "/v1/chat/completions", note: "stream:true, 1 token",
		body:     `{"model":"%SERVED%","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":1}`,
		expected: "200 text/event-stream: data: {chunk} lines ending with data: [DONE]", verify: sse},
}

func llamaHealth(a answer, _ *prober, _ *Report) (string, bool) {
	var h struct {
		Status string
		Error  struct{ Message string }
	}
	if json.Unmarshal(a.body, &h) != nil {
		return a.summary(), false
	}
	switch {
	case a.status == http.StatusOK && h.Status == "ok":
		return "ok", true
	case a.status == http.StatusServiceUnavailable:
		return "loading: " + h.Error.Message, true
	}
	return a.summary(), false
}

func llamaProps(a answer, _ *prober, rep *Report) (string, bool) {
	var p struct {
		Default struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
		BuildInfo string `json:"build_info"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &p) != nil || p.Default.NCtx == 0 {
		return a.summary(), false
	}
	if p.BuildInfo != "" {
		rep.Version = p.BuildInfo
	}
	return fmt.Sprintf("n_ctx %d, build %s", p.Default.NCtx, p.BuildInfo), true
}

func llamaMetrics(a answer, _ *prober, _ *Report) (string, bool) {
	if a.status != http.StatusOK {
		return a.summary(), false
	}
	n := 0
	for _, line := range strings.Split(string(a.body), "\n") {
		if strings.HasPrefix(line, "llamacpp:") {
			n++
		}
	}
	return fmt.Sprintf("%d llamacpp:* samples", n), n > 0
}

func sse(a answer, _ *prober, _ *Report) (string, bool) {
	if a.status != http.StatusOK || !strings.HasPrefix(a.header.Get("Content-Type"), "text/event-stream") {
		return fmt.Sprintf("%s; %s", a.header.Get("Content-Type"), a.summary()), false
	}
	chunks, done := 0, false
	err := api.ReadSSE(bytes.NewReader(a.body), func(data []byte) error {
		switch {
		case string(data) == "[DONE]":
			done = true
		case json.Valid(data):
			chunks++
		}
		return nil
	})
	if err != nil {
		return fmt.Sprintf("%d chunks, then %v", chunks, err), false
	}
	return fmt.Sprintf("%d chunks, [DONE] %v", chunks, done), chunks > 0 && done
}
