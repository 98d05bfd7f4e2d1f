package sizing

import (
	"context"

	parser "github.com/gpustack/gguf-parser-go"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
)

// Projector sizes a multimodal projector GGUF (llama-server's --mmproj) from its header: the
// bytes of its tensors, which the engine holds beside the model's (it loads them whole, on the
// host). A header that cannot be parsed counts the whole file. A GGUF that is not a
// projector, or a source that is no GGUF, is refused with InvalidSource.
func (s *Sizer) Projector(ctx context.Context, src source.Source) (int64, error) {
	var gf *parser.GGUFFile
	var fileBytes int64
	var err error
	switch src.Kind {
	case source.KindFile:
		gf, fileBytes, _, err = openGGUF(ctx, src.Path)
	case source.KindHTTPS, source.KindHF:
		gf, fileBytes, _, err = s.remoteHeader(ctx, src.DownloadURL(s.HFBase))
	default:
		return 0, api.Errorf(api.CodeInvalidSource, "a projector is a GGUF file (a path, https:// or hf://), not %s", src.String())
	}
	if err != nil {
		return 0, err
	}
	if gf == nil {
		return fileBytes, nil
	}
	if a := gf.Architecture(); a.Type != "projector" {
		return 0, api.Errorf(api.CodeInvalidSource, "%s is a GGUF of type %q (%s), not a multimodal projector", src.String(), a.Type, a.Architecture)
	}
	return int64(gf.ModelSize), nil
}
