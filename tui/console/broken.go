package console

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/llmkube/mesh/agent/api"
)

// BrokenStream is a chat's error in the user's terms when its stream broke off (the host
// died, its engine crashed): it names the host and what the mesh knows of it, rather than a
// bare "unexpected EOF". Other errors are returned as they are; the cause stays wrapped.
func BrokenStream(v api.MeshView, host string, err error, started bool) error {
	msg := err.Error()
	broke := errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(msg, "unexpected EOF") || strings.Contains(msg, "connection reset")
	if !broke || host == "" {
		return err
	}
	what := "the answer broke off"
	if !started {
		what = "the answer never started"
	}
	for _, mb := range v.Members {
		if mb.Name == host && mb.Liveness != api.Alive {
			return fmt.Errorf("%s: %s is %s (%w)", what, host, mb.Liveness, err)
		}
	}
	return fmt.Errorf("%s: the connection to %s closed mid-answer (%w); the host or its engine stopped — the hosts and events say which; ask again to retry", what, host, err)
}
