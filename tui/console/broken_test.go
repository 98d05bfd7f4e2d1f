package console

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/agent/api"
)

// A chat whose host died says so, not a bare "unexpected EOF".
func TestBrokenStreamNamesTheHost(t *testing.T) {
	v := func(l api.Liveness) api.MeshView {
		return api.MeshView{Members: []api.Member{{Name: "pi5", Role: api.RoleAgent, Liveness: l}}}
	}
	err := BrokenStream(v(api.Dead), "pi5", io.ErrUnexpectedEOF, true)
	assert.EqualError(t, err, "the answer broke off: pi5 is dead (unexpected EOF)")
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "the cause stays wrapped")

	err = BrokenStream(v(api.Alive), "pi5", io.ErrUnexpectedEOF, false)
	assert.ErrorContains(t, err, "the answer never started: the connection to pi5 closed mid-answer (unexpected EOF); the host or its engine stopped")

	other := &api.Error{Code: api.CodeNotFound, Message: "no such model"}
	assert.Same(t, other, BrokenStream(v(api.Dead), "pi5", other, true), "other errors are left alone")
	assert.True(t, errors.Is(BrokenStream(v(api.Alive), "pi5", context.Canceled, true), context.Canceled))
}
