package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/console"
)

// Exit codes of `llmkube-tui` (documented in the README's Scripting section, tested in exit_test.go):
//
//	code  meaning
//	0     done
//	1     failed (an error that is none of the below, a refused token, an error finding of the doctor)
//	2     usage: bad flags, arguments or configuration (join string, token file), an ambiguous reference
//	3     refused: admission said no (InvalidSource, RuntimeMismatch, AcceleratorMissing,
//	      InsufficientMemory, MemoryCheckFailed, NamespaceNotAllowed, EngineUnavailable), or no host fits
//	4     not found: no such placement, host or model
//	5     the mesh or the agent is unreachable, or the command timed out
//	130   interrupted (Ctrl-C, SIGTERM); `mesh watch` ends with 0 instead, that is how it is stopped
const (
	ExitOK          = 0
	ExitFailed      = 1
	ExitUsage       = 2
	ExitRefused     = 3
	ExitNotFound    = 4
	ExitUnreachable = 5
	ExitInterrupted = 130
)

// Codes the CLI puts in JSON errors when the failure has no API code of its own.
const (
	CodeUsage       api.Code = "Usage"
	CodeTimeout     api.Code = "Timeout"
	CodeInterrupted api.Code = "Interrupted"
	CodeFailed      api.Code = "Failed"
)

// usageError is a mistake on the command line or in the configuration: exit 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// errUnreachable marks a mesh nobody answers for: exit 5 with the fix.
type errUnreachable struct {
	msg, fix string
}

func (e *errUnreachable) Error() string { return e.msg }

// refusals are the admission codes that exit 3.
var refusals = map[api.Code]bool{
	api.CodeInvalidSource:      true,
	api.CodeRuntimeMismatch:    true,
	api.CodeAcceleratorMissing: true,
	api.CodeInsufficientMemory: true,
	api.CodeMemoryCheckFailed:  true,
	api.CodeNamespaceNotAllow:  true,
	api.CodeEngineUnavailable:  true,
	api.CodeContextLimit:       true, // past the context the model was trained for
}

// failure is how an error is reported: its exit code and the JSON error object.
type failure struct {
	exit int
	err  *api.Error
}

// classify maps an error to its exit code and JSON error. interrupted says the caller's
// context (the signal one) ended, which wins over whatever error that caused.
func classify(err error, interrupted bool) failure {
	if interrupted {
		return failure{ExitInterrupted, &api.Error{Code: CodeInterrupted, Message: "interrupted"}}
	}
	var (
		ue  *usageError
		ae  *api.Error
		unr *apiclient.UnreachableError
		me  *errUnreachable
	)
	switch {
	case errors.As(err, &ue):
		return failure{ExitUsage, &api.Error{Code: CodeUsage, Message: err.Error()}}
	case errors.As(err, &me):
		return failure{ExitUnreachable, &api.Error{Code: api.CodeUnreachable, Message: err.Error(), Fix: me.fix}}
	case errors.As(err, &ae):
		// The API client already reads the gateway's OpenAI codes in the API's terms.
		out := &api.Error{Code: ae.Code, Message: ae.Message, Fix: ae.Fix}
		switch {
		case refusals[out.Code]:
			return failure{ExitRefused, out}
		case out.Code == api.CodeNotFound:
			return failure{ExitNotFound, out}
		case out.Code == api.CodeBadRequest:
			return failure{ExitUsage, out}
		case out.Code == api.CodeUnreachable:
			return failure{ExitUnreachable, out}
		}
		return failure{ExitFailed, out}
	case errors.Is(err, context.DeadlineExceeded):
		return failure{ExitUnreachable, &api.Error{Code: CodeTimeout, Message: err.Error(),
			Fix: "raise --timeout, or run `llmkube-tui mesh doctor` to see why the mesh is slow to answer"}}
	case errors.As(err, &unr):
		return failure{ExitUnreachable, &api.Error{Code: api.CodeUnreachable, Message: err.Error(),
			Fix: "check that llmkube-agent runs at " + unr.URL + " and that its API port is open"}}
	case errors.Is(err, console.ErrNoAgents):
		return failure{ExitUnreachable, &api.Error{Code: api.CodeUnreachable, Message: err.Error(),
			Fix: "run `llmkube-tui mesh doctor` to see why no agent is visible"}}
	}
	return failure{ExitFailed, &api.Error{Code: CodeFailed, Message: err.Error()}}
}
