package console

import (
	"strings"

	"github.com/llmkube/mesh/agent/api"
)

// Refusal is what a ranking with no host that fits amounts to: the refusal Place answers with
// when it has to pick a host itself (the first host's code, every host's reason), or nil when
// a host fits. A front end that ranks before placing (a preview, --auto with --spread) uses it
// to refuse in the same words.
func (r Ranking) Refusal() error {
	if _, ok := r.Best(); ok {
		return nil
	}
	if len(r.Hosts) == 0 {
		return ErrNoAgents
	}
	reasons := make([]string, len(r.Hosts))
	for i, h := range r.Hosts {
		reasons[i] = h.Host + ": " + h.Reason
	}
	return &api.Error{Code: r.Hosts[0].Code, Message: "no host can take it — " + strings.Join(reasons, "; ")}
}
