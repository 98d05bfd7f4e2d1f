package agent

import (
	"fmt"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/hwprobe"
)

// runtimeFindings names what cannot run on this host although the doctor would otherwise find
// nothing wrong: no engine answers at all (a Pi whose hailo-ollama is not running saw "no
// problems found"), a runtime the operator chose (chosen: --runtimes) does not run, or the
// host has a Hailo-10H while hailo-ollama does not. Engines that placements wait for are
// already findings of their own (waiting).
func runtimeFindings(h api.Host, waiting map[api.Runtime]int, chosen bool) []api.Finding {
	hailo := false
	for _, acc := range h.Accelerators {
		hailo = hailo || acc.Kind == hwprobe.KindHailo
	}
	var present []api.Runtime
	absent := map[api.Runtime]api.Engine{}
	for _, e := range h.Engines {
		if e.Present {
			present = append(present, e.Runtime)
		} else {
			absent[e.Runtime] = e
		}
	}
	if len(present) == 0 {
		var why, fixes []string
		// The runtime the hardware calls for first: on a Pi with a Hailo, hailo-ollama.
		order := api.Runtimes
		if hailo {
			order = append([]api.Runtime{api.RuntimeHailoOllama}, order...)
		}
		seen := map[api.Runtime]bool{}
		for _, r := range order {
			e, ok := absent[r]
			if !ok || seen[r] {
				continue
			}
			seen[r] = true
			why = append(why, fmt.Sprintf("%s: %s", r, e.Detail))
			fixes = append(fixes, startFix(r, h.Name))
		}
		problem := fmt.Sprintf("no engine runs on %s, so no model can be placed there", h.Name)
		fix := "run the agent with the engines it should use (--runtimes) once one is installed"
		if len(why) > 0 {
			problem += " (" + strings.Join(why, "; ") + ")"
			fix = strings.Join(fixes, "; or ")
		}
		// An error where an engine was asked for (--runtimes) or the hardware calls for one (a
		// Hailo-10H without hailo-ollama); otherwise a warning: a host without engines still
		// serves the gateway, routing every chat to the hosts that run the models.
		sev := api.SeverityWarning
		if chosen || hailo {
			sev = api.SeverityError
		}
		return []api.Finding{{Severity: sev, Problem: problem, Fix: fix}}
	}
	var out []api.Finding
	for _, r := range api.Runtimes {
		e, ok := absent[r]
		if !ok || waiting[r] > 0 {
			continue
		}
		switch {
		case chosen:
			out = append(out, api.Finding{Severity: api.SeverityWarning,
				Problem: fmt.Sprintf("%s does not run on %s (%s), although the agent was started to use it (--runtimes)", r, h.Name, e.Detail),
				Fix:     startFix(r, h.Name) + "; or leave it out of --runtimes"})
		case r == api.RuntimeHailoOllama && hailo:
			out = append(out, api.Finding{Severity: api.SeverityWarning,
				Problem: fmt.Sprintf("%s has a Hailo-10H, but hailo-ollama does not run there (%s): hailo:// models cannot be placed on it", h.Name, e.Detail),
				Fix:     startFix(r, h.Name)})
		}
	}
	return out
}

// startFix is how to make runtime r run on host.
func startFix(r api.Runtime, host string) string {
	switch r {
	case api.RuntimeHailoOllama:
		return fmt.Sprintf("start hailo-ollama on %s (systemctl status hailo-ollama); the agent uses it once it answers", host)
	case api.RuntimeOllama:
		return fmt.Sprintf("install and start Ollama on %s (ollama serve); the agent uses it once it answers", host)
	}
	return fmt.Sprintf("install llama.cpp's llama-server on %s, or give the agent --llama-server PATH", host)
}
