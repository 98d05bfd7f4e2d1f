package sizing

import (
	"context"
	"net/http"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/download"
)

// peerKey keys, in a request's context, the peer its header reads go to instead of the origin.
type peerKey struct{}

// viaPeer sends req to the peer in its context, if there is one: over the caller's transport to
// that peer (the sealed channel), not through the guard, which is for sources named by users.
func viaPeer(req *http.Request) (*http.Response, bool, error) {
	p, ok := req.Context().Value(peerKey{}).(download.Peer)
	if !ok {
		return nil, false, nil
	}
	resp, err := p.Client.Do(req)
	return resp, true, err
}

// peerGGUF sizes the GGUF file with digest sum from the header of a peer's copy, so a host with
// no route to the origin sizes a model its peers hold as it would from the origin. false when no
// peer could answer: the origin is asked then. The header read from a peer is not verified by
// the digest (only the whole file is); a lying peer can only make the download that follows
// fail its check, or its re-sizing from the finished file (Agent.resized).
func (s *Sizer) peerGGUF(ctx context.Context, sum string, contextSize int, run Run) (api.SizeEstimate, bool) {
	for _, p := range s.Guard.Peers.Holders(sum) {
		pctx := context.WithValue(ctx, peerKey{}, p)
		est, err := s.remoteGGUF(pctx, p.URL, contextSize, run)
		if err != nil {
			s.log().Info("a peer could not be sized from; trying the next", "peer", p.Name, "sha256", sum, "err", err)
			continue
		}
		est.Detail += " from peer " + p.Name
		return est, true
	}
	return api.SizeEstimate{}, false
}
