package console

import (
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/rank"
)

// Request is what rank.Rank needs to rank hosts against this ranking's estimate (the place
// form re-ranks with it on every mesh change).
func (r Ranking) Request(req api.PlacementRequest, spread bool) rank.Request {
	rr := rank.Request{PlacementRequest: req, Estimate: r.Estimate, Spread: spread}
	if r.SizeError != "" {
		rr.SizeErr = &api.Error{Code: r.SizeCode, Message: r.SizeError}
	}
	return rr
}

// Split plans req across the hosts of members from this ranking's estimate, with the measured
// round trips: the plan `mesh rank --split`, `mesh place --split` and the Place view show. Hosts
// and main bound it when given; empty lets the plan choose. req.Split's round-trip bound, when
// it asks one, is the plan's.
func (r Ranking) Split(members []api.Member, req api.PlacementRequest, hosts []string, main string) api.SplitPlan {
	return rank.Split(members, rank.SplitRequest{Request: r.Request(req, false), Hosts: hosts, Main: main,
		RTT: rank.RTTs(members), MaxRTT: req.Split.RTTBound()})
}

// closeness is how far a refused host got toward running a request: a host without the
// accelerator or the runtime says nothing about the request when another has them, so the
// refusal of the nearest host is the cause a user can act on (too big, no such model).
var closeness = map[api.Code]int{
	api.CodeUnreachable:        0,
	api.CodeAcceleratorMissing: 1,
	api.CodeEngineUnavailable:  2,
	api.CodeNamespaceNotAllow:  3,
}

// Nearest is the refused host that came nearest to taking the request (the first of them in
// the ranking's order), and false when a host fits or swaps.
func Nearest(hosts []api.Ranked) (api.Ranked, bool) {
	best, far := api.Ranked{}, -1
	for _, h := range hosts {
		if h.Verdict != api.VerdictRefused {
			return api.Ranked{}, false
		}
		c, ok := closeness[h.Code]
		if !ok {
			c = len(closeness) // memory, size, a missing model: the request itself
		}
		if c > far {
			best, far = h, c
		}
	}
	return best, far >= 0
}

// Refusal is what a ranking with no host that fits amounts to: the refusal Place answers with
// when it has to pick a host itself (the nearest host's code, every host's reason, the nearest
// first), or nil when
// a host fits. A front end that ranks before placing (a preview, --auto with --spread) uses it
// to refuse in the same words.
func (r Ranking) Refusal() error {
	if _, ok := r.Best(); ok {
		return nil
	}
	if len(r.Hosts) == 0 {
		return ErrNoAgents
	}
	near, _ := Nearest(r.Hosts)
	reasons := []string{near.Host + ": " + near.Reason}
	for _, h := range r.Hosts {
		if h.Host != near.Host {
			reasons = append(reasons, h.Host+": "+h.Reason)
		}
	}
	return &api.Error{Code: near.Code, Message: "no host can take it — " + strings.Join(reasons, "; ")}
}
