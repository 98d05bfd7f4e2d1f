package cli

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/console"
)

func TestClassify(t *testing.T) {
	unreachable := &apiclient.UnreachableError{URL: "http://127.0.0.1:1", Err: errors.New("connection refused")}
	cases := []struct {
		name        string
		err         error
		interrupted bool
		exit        int
		code        api.Code
	}{
		{"usage", usagef("bad flag"), false, ExitUsage, CodeUsage},
		{"wrapped usage", fmt.Errorf("ctx: %w", usagef("bad")), false, ExitUsage, CodeUsage},
		{"bad request", api.Errorf(api.CodeBadRequest, "ambiguous"), false, ExitUsage, api.CodeBadRequest},
		{"not found", api.Errorf(api.CodeNotFound, "no placement"), false, ExitNotFound, api.CodeNotFound},
		{"unauthorized", api.Errorf(api.CodeUnauthorized, "token refused"), false, ExitFailed, api.CodeUnauthorized},
		{"engine error", api.Errorf(api.CodeEngineError, "crashed"), false, ExitFailed, api.CodeEngineError},
		{"pull failed", api.Errorf(api.CodePullFailed, "404"), false, ExitFailed, api.CodePullFailed},
		{"api unreachable", api.Errorf(api.CodeUnreachable, "owner down"), false, ExitUnreachable, api.CodeUnreachable},
		{"transport", unreachable, false, ExitUnreachable, api.CodeUnreachable},
		{"wrapped transport", fmt.Errorf("reading the mesh: %w", unreachable), false, ExitUnreachable, api.CodeUnreachable},
		{"deadline", fmt.Errorf("waiting: %w", context.DeadlineExceeded), false, ExitUnreachable, CodeTimeout},
		{"transport deadline", &apiclient.UnreachableError{URL: "x", Err: context.DeadlineExceeded}, false, ExitUnreachable, CodeTimeout},
		{"no agents", console.ErrNoAgents, false, ExitUnreachable, api.CodeUnreachable},
		{"no agent seen", &errUnreachable{msg: "no agent", fix: "doctor"}, false, ExitUnreachable, api.CodeUnreachable},
		{"other", errors.New("disk full"), false, ExitFailed, CodeFailed},
		{"interrupt wins", unreachable, true, ExitInterrupted, CodeInterrupted},
	}
	for _, code := range []api.Code{api.CodeInvalidSource, api.CodeRuntimeMismatch, api.CodeAcceleratorMissing,
		api.CodeInsufficientMemory, api.CodeMemoryCheckFailed, api.CodeNamespaceNotAllow, api.CodeEngineUnavailable} {
		cases = append(cases, struct {
			name        string
			err         error
			interrupted bool
			exit        int
			code        api.Code
		}{"refused " + string(code), fmt.Errorf("placing: %w", &api.Error{Code: code, Message: "no", Fix: "do x"}), false, ExitRefused, code})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := classify(c.err, c.interrupted)
			assert.Equal(t, c.exit, f.exit)
			assert.Equal(t, c.code, f.err.Code)
			assert.NotEmpty(t, f.err.Message)
		})
	}
	f := classify(&api.Error{Code: api.CodeInsufficientMemory, Message: "needs 5 GiB", Fix: "delete qwen"}, false)
	assert.Equal(t, "delete qwen", f.err.Fix, "the agent's fix reaches the user")
}

func TestRedactor(t *testing.T) {
	r := &redactor{}
	r.add("short", "llmk_admin_0123456789abcdef", "")
	assert.Equal(t, "token [redacted] refused", r.string("token llmk_admin_0123456789abcdef refused"))
	assert.Equal(t, "short stays", r.string("short stays"), "strings under 8 bytes are not secrets worth hiding")
	assert.Equal(t, "secretpart", joinSecretText("llmk1:mesh-a:secretpart@10.0.0.1:7946"))
	assert.Equal(t, "secretpart", joinSecretText("  llmk1:mesh-a:secretpart\n"))
}
