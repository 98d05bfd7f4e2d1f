package llamaserver

import (
	"errors"
	"fmt"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// projector is m's multimodal projector seen as a model of its own: its file is found, pulled
// and stored exactly as a model's is (LocalPath, pullFile). It carries no digest or length,
// which describe the model's file.
func projector(m engines.Model) engines.Model {
	return engines.Model{ID: m.ID, Source: m.MMProj}
}

// projectorArgs are the arguments that start llama-server with m's projector (--mmproj), none
// when m has none. The projector must have been pulled.
func (d *Driver) projectorArgs(m engines.Model) ([]string, error) {
	if m.MMProj == "" {
		return nil, nil
	}
	path, err := d.LocalPath(projector(m))
	if err != nil {
		return nil, err
	}
	if _, err := readable(path); err != nil {
		return nil, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("projector: %w (pull it first)", err)}
	}
	return []string{"--mmproj", path}, nil
}

// errNoProjector is why llama-server started without a projector cannot read images.
var errNoProjector = errors.New("it was placed without a projector (mmproj), which llama-server needs to read images; place it again with one")

// ReadsImages: llama-server reads images only when started with a projector (--mmproj).
func (d *Driver) ReadsImages(m engines.Model) error {
	if m.MMProj == "" {
		return errNoProjector
	}
	return nil
}
