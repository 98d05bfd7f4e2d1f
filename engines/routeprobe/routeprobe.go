// Package routeprobe calls every route the agent's drivers and gateway rely on against a running
// engine — hailo-ollama, Ollama or llama-server, real or simulated — and says, route by route,
// whether it answers as the driver expects. It is the first thing to run on a real host to see
// where the real server differs from the simulator the drivers were tested against.
//
// The probe never changes the engine: it never pulls, deletes, loads or unloads a real model.
// Where a route needs a model it names ProbeModel, which no engine has; the answer to an unknown
// model is itself one of the things checked. The one generation it asks for is a one-token
// completion from llama-server, whose model is loaded by definition. It does not ask Ollama to
// pull (that would reach the internet); it never calls a simulator's /_sim/ routes.
package routeprobe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// ProbeModel is the model name the probe uses where a route needs one; no engine has it.
const ProbeModel = "llmkube-probe-nonexistent"

// Verdict says whether a route answered as the driver expects.
type Verdict string

const (
	OK      Verdict = "ok"      // as the driver expects
	Differs Verdict = "differs" // not what the driver expects; see Expected
)

// RouteResult is one route's answer.
type RouteResult struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	// Note names what sets this request apart from another to the same route
	// ("stream:true", "form content type"); empty for most.
	Note string `json:"note,omitempty"`
	// Status is the HTTP status, 0 when the request failed.
	Status      int     `json:"status"`
	Observation string  `json:"observation"`
	Verdict     Verdict `json:"verdict"`
	// Expected is what the drivers rely on.
	Expected string `json:"expected"`
}

// Report is a probe's result.
type Report struct {
	URL string `json:"url"`
	// Kind is the engine found; empty when the probe could not tell.
	Kind api.Runtime `json:"kind"`
	// Version is what the engine says of itself (hailo-ollama always says 0.5.1).
	Version string        `json:"version,omitempty"`
	Routes  []RouteResult `json:"routes"`
}

// Differs counts the routes that did not answer as expected.
func (r Report) Differs() int {
	n := 0
	for _, rr := range r.Routes {
		if rr.Verdict != OK {
			n++
		}
	}
	return n
}

// ErrUnknownEngine is returned (with the detection results in the report) when the server is
// none of the engines the agent drives.
var ErrUnknownEngine = errors.New("not hailo-ollama, Ollama or llama-server")

// Run probes the engine at baseURL ("http://pi.local:8000"; a bare "host:port" means http).
// client may be nil for one with a 30 s timeout per request (hailo-ollama answers /api/ps
// only once the device is free). The error is for a server that cannot be reached or not
// recognised; routes that answer unexpectedly are in the report, not errors.
func Run(ctx context.Context, baseURL string, client *http.Client) (Report, error) {
	base, err := normalize(baseURL)
	if err != nil {
		return Report{URL: baseURL}, err
	}
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	p := &prober{ctx: ctx, base: base, client: client, seen: map[string]answer{}}
	rep := Report{URL: base}

	// Detection, as the drivers do it: hailo-ollama has /hailo/v1/list, Ollama says so at /,
	// llama-server has /health.
	list := p.get("/hailo/v1/list")
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if list.err != nil && isUnreachable(list.err) {
		return rep, fmt.Errorf("cannot reach %s: %w", base, list.err)
	}
	var plan []check
	switch {
	case list.status == http.StatusOK && hasJSONArray(list.body, "models"):
		rep.Kind, plan = api.RuntimeHailoOllama, hailoChecks
	case p.get("/").status == http.StatusOK && strings.Contains(string(p.get("/").body), "Ollama is running"):
		rep.Kind, plan = api.RuntimeOllama, ollamaChecks
	default:
		h := p.get("/health")
		if (h.status == http.StatusOK || h.status == http.StatusServiceUnavailable) && json.Valid(h.body) {
			rep.Kind, plan = api.RuntimeLlamaServer, llamaChecks
		}
	}
	if rep.Kind == "" {
		for _, key := range []string{"GET /hailo/v1/list", "GET /", "GET /health"} {
			if a, ok := p.seen[key]; ok {
				method, path, _ := strings.Cut(key, " ")
				rep.Routes = append(rep.Routes, RouteResult{Method: method, Path: path, Status: a.status,
					Observation: a.summary(), Verdict: Differs,
					Expected: "one of: hailo-ollama's 200 list, Ollama's \"Ollama is running\", llama-server's /health JSON"})
			}
		}
		return rep, fmt.Errorf("%s: %w", base, ErrUnknownEngine)
	}
	for _, c := range plan {
		rep.Routes = append(rep.Routes, p.run(c, &rep))
	}
	return rep, nil
}

func normalize(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("engine URL %q: want http://host:port", raw)
	}
	return strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/"), nil
}

func isUnreachable(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) && !ue.Timeout()
}

// WriteTable prints the report for a person: a header, one row per route, and under each route
// that differs what was expected.
func (r Report) WriteTable(w io.Writer) error {
	kind := string(r.Kind)
	if kind == "" {
		kind = "unknown"
	}
	if r.Version != "" {
		kind += " (says version " + r.Version + ")"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "engine\t%s\n", r.URL)
	fmt.Fprintf(tw, "kind\t%s\n\n", kind)
	fmt.Fprintln(tw, "VERDICT\tMETHOD\tPATH\tSTATUS\tOBSERVATION")
	for _, rr := range r.Routes {
		status := "-"
		if rr.Status != 0 {
			status = fmt.Sprint(rr.Status)
		}
		path := rr.Path
		if rr.Note != "" {
			path += " (" + rr.Note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", rr.Verdict, rr.Method, path, status, rr.Observation)
		if rr.Verdict != OK {
			fmt.Fprintf(tw, "\t\t\t\texpected: %s\n", rr.Expected)
		}
	}
	fmt.Fprintf(tw, "\n%d routes, %d as the driver expects, %d differ\n", len(r.Routes), len(r.Routes)-r.Differs(), r.Differs())
	return tw.Flush()
}
