package agent

import (
	"context"
	"fmt"

	"github.com/llmkube/mesh/agent/api"
)

// Findings is what this agent finds wrong on its own host, for the doctor (GET /v1/doctor):
// engines that are unhealthy, or absent while placements need them, and placements that are
// restarting or failed (those findings carry the placement's namespace). The engines are looked
// for again first (within ctx), so an engine that died since the last periodic look is named
// now. What the agent sees of the rest of the mesh comes from its membership (mesh.Mesh.Doctor).
func (a *Agent) Findings(ctx context.Context) []api.Finding {
	a.detectAll(ctx)
	h := a.Host()
	ps := a.Placements()
	var out []api.Finding
	add := func(ns, sev, problem, fix string) {
		out = append(out, api.Finding{Severity: sev, Problem: problem, Fix: fix, Namespace: ns})
	}
	if ns := h.Anonymous; ns != "" {
		// Opt-in, and plainly shown: whoever reaches this host's API may list and use the
		// namespace's models without a token. Only the admin and that namespace see the finding.
		add(ns, api.SeverityWarning,
			fmt.Sprintf("anonymous access is on on %s: its listing and inference routes answer requests without a token, as namespace %s", h.Name, ns),
			fmt.Sprintf("meant for clients that cannot send a token (Home Assistant's hailo-ollama integration); to turn it off, run the agent on %s without --anonymous-namespace", h.Name))
	}
	if h.LANHTTP {
		// Opt-in, and plainly shown: the LAN can read what crosses the plain listener.
		add("", api.SeverityWarning,
			fmt.Sprintf("plain HTTP is served to the LAN on %s (%s): the gateway's routes answer there in the clear, so anyone on the LAN reads those prompts, answers and the tokens sent with them (the admin token is refused there)", h.Name, h.APIAddr),
			fmt.Sprintf("meant for clients that cannot speak TLS; others use https:// with the mesh's CA (llmkube-agent ca). To turn it off, run the agent on %s without --lan-http", h.Name))
	}
	waiting := map[api.Runtime]int{} // placements that need the runtime
	for _, p := range ps {
		if !p.State.Terminal() {
			waiting[p.Runtime]++
		}
	}
	for _, e := range h.Engines {
		switch {
		case e.Present && !e.Healthy:
			add("", api.SeverityError,
				fmt.Sprintf("engine %s on %s (%s) is unhealthy: %s", e.Runtime, h.Name, e.Address, e.Detail),
				fmt.Sprintf("check the %s daemon on %s and its log; the agent routes to it again once it answers", e.Runtime, h.Name))
		case !e.Present && waiting[e.Runtime] > 0:
			add("", api.SeverityError,
				fmt.Sprintf("engine %s on %s is down (%s): %d placement(s) wait for it", e.Runtime, h.Name, e.Detail, waiting[e.Runtime]),
				fmt.Sprintf("start %s on %s (for a daemon, e.g. systemctl status %s); the agent restarts the placements once it answers", e.Runtime, h.Name, e.Runtime))
		}
	}
	out = append(out, exposureFindings(h, ps)...)
	out = append(out, a.skewFindings(h.Name)...)
	out = append(out, runtimeFindings(h, waiting, a.cfg.Chosen)...)
	out = append(out, a.splitFindings(ps)...)
	for _, p := range ps {
		switch p.State {
		case api.StateRestarting:
			add(p.Namespace, api.SeverityError,
				fmt.Sprintf("model %q (namespace %s, %s) on %s is not serving: restarting after %d restart(s): %s", p.Model, p.Namespace, p.Runtime, h.Name, p.Restarts, p.Reason),
				fmt.Sprintf("read its engine log (GET /v1/placements/%s/log, or the host detail in the console); fix the engine and the agent brings it back", p.ID))
		case api.StateFailed:
			add(p.Namespace, api.SeverityWarning,
				fmt.Sprintf("model %q (namespace %s, %s) on %s failed (%s): %s", p.Model, p.Namespace, p.Runtime, h.Name, p.Code, p.Reason),
				fmt.Sprintf("delete placement %s and place the model again once the cause is fixed", p.ID))
		}
	}
	return out
}
