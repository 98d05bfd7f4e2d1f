package agent

import (
	"context"
	"fmt"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
)

// ProjectorSizer is a Sizer that can size a multimodal projector GGUF by its tensors
// (engines/sizing.Sizer does); a placement naming a projector needs one.
type ProjectorSizer interface {
	Projector(ctx context.Context, src source.Source) (weights int64, err error)
}

// checkProjector checks the projector a request names (api.PlacementRequest.MMProj) as the
// model's source is checked — a file in the GGUF folders unless the admin asks, TLS unless
// plain HTTP is allowed — and writes it in its canonical form. Only llama-server runs one.
func (a *Agent) checkProjector(who api.Principal, req *api.PlacementRequest, rt api.Runtime) error {
	if req.MMProj == "" {
		return nil
	}
	if rt != api.RuntimeLlamaServer {
		return api.Errorf(api.CodeBadRequest, "mmproj: a projector runs beside a GGUF model on llama-server; %s reads images without one, or not at all", rt)
	}
	if req.Split != nil {
		return api.Errorf(api.CodeBadRequest, "mmproj: a model split across hosts runs without a projector")
	}
	src, err := source.Parse(req.MMProj)
	switch {
	case err != nil:
	case !src.IsGGUF():
		err = fmt.Errorf("a projector is a GGUF file (a path, https:// or hf://), not %s", src.String())
	case src.Kind == source.KindFile && !who.Admin:
		err = a.checkFileSource(src.Path)
	case src.Insecure && !a.cfg.AllowHTTP:
		err = src.RequireTLS()
	}
	if err != nil {
		return mmprojError(err, api.CodeInvalidSource)
	}
	req.MMProj = src.String()
	return nil
}

// mmprojError is err as an *api.Error (code def unless it has one) that says it is about the
// projector.
func mmprojError(err error, def api.Code) *api.Error {
	e := *asAPIError(err, def)
	e.Message = "mmproj: " + e.Message
	return &e
}

// withProjector is est with the projector's weights added: llama-server holds them beside the
// model's, so one reservation covers both, and the breakdown says so.
func (a *Agent) withProjector(ctx context.Context, est api.SizeEstimate, mmproj string) (api.SizeEstimate, error) {
	ps, ok := a.cfg.Sizer.(ProjectorSizer)
	if !ok {
		return est, api.Errorf(api.CodeMemoryCheckFailed, "mmproj: this agent cannot size a projector")
	}
	src, err := source.Parse(mmproj)
	if err != nil {
		return est, mmprojError(err, api.CodeInvalidSource)
	}
	weights, err := ps.Projector(ctx, src)
	if err != nil {
		return est, mmprojError(err, api.CodeMemoryCheckFailed)
	}
	est.Weights += weights
	est.Bytes += weights
	est.Detail = fmt.Sprintf("%s; projector %s (%s)", est.Detail, api.FormatBytes(weights), src.String())
	return est, nil
}
