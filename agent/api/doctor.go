package api

import (
	"cmp"
	"slices"
	"time"
)

// Severities of a Finding, most serious first.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
	SeverityInfo    = "info"
)

// NodeHeader carries an agent's node name on its /healthz answer, so a member checking an
// advertised API address knows who answered: an agent that advertises a loopback address
// sends every peer to the peer's own agent, which answers under its own name.
const NodeHeader = "X-Llmkube-Node"

// Finding is one reason hosts may be invisible or unusable, with what to do about it: the
// doctor's unit, from an agent (GET /v1/doctor), a console's own membership and discovery, or
// both merged.
type Finding struct {
	Severity string `json:"severity"`
	Problem  string `json:"problem"`
	Fix      string `json:"fix"`
	// Detail holds the figures that change from one look to the next ("12 message(s), the last
	// 3s ago"), outside Problem so that members seeing one problem merge into one finding.
	Detail string `json:"detail,omitempty"`
	// Namespace is set on a finding that names a placement: only the admin and that
	// namespace's tokens see it.
	Namespace string `json:"namespace,omitempty"`
	// SeenBy names the members that reported it (a merged report).
	SeenBy []string `json:"seen_by,omitempty"`
}

// DoctorReport is what one member found. GET /v1/doctor.
type DoctorReport struct {
	Mesh     string    `json:"mesh"`
	Node     string    `json:"node"`
	Gossip   string    `json:"gossip_addr,omitempty"`
	Members  int       `json:"members"` // alive, this one included
	At       time.Time `json:"at"`
	Findings []Finding `json:"findings"` // errors first
}

func severityRank(s string) int {
	switch s {
	case SeverityError:
		return 0
	case SeverityWarning:
		return 1
	case SeverityInfo:
		return 2
	}
	return 3
}

// SortFindings orders findings errors first, then warnings, then notes, each by problem.
func SortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(severityRank(a.Severity), severityRank(b.Severity)), cmp.Compare(a.Problem, b.Problem))
	})
}

// ScopeFindings is what p may see of findings: everything for the admin; for a namespace token
// the findings about the host and the mesh, and those naming its own namespace's placements.
func (p Principal) ScopeFindings(fs []Finding) []Finding {
	if p.Admin {
		return fs
	}
	out := make([]Finding, 0, len(fs))
	for _, f := range fs {
		if f.Namespace == "" || p.Allows(f.Namespace) {
			out = append(out, f)
		}
	}
	return out
}

// MergeFindings adds what member `by` found to a merged list: a finding several members made
// (same severity, problem and namespace) appears once, seen by each of them, with the first
// one's detail.
func MergeFindings(into []Finding, by string, fs []Finding) []Finding {
	for _, f := range fs {
		i := slices.IndexFunc(into, func(g Finding) bool {
			return g.Severity == f.Severity && g.Problem == f.Problem && g.Namespace == f.Namespace
		})
		if i < 0 {
			f.SeenBy = slices.Clone(f.SeenBy) // a report merged before keeps who saw it
			into = append(into, f)
			i = len(into) - 1
		}
		if by != "" && !slices.Contains(into[i].SeenBy, by) {
			into[i].SeenBy = append(into[i].SeenBy, by)
		}
	}
	return into
}
