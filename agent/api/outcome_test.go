package api

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOutcome pins the one rule `place --wait` and the Place view end a wait by: they had a
// copy each.
func TestOutcome(t *testing.T) {
	for _, s := range []PlacementState{StateSizing, StatePulling, StateLoading, StateRestarting, StateStopping, StateUnavailable} {
		done, err := Placement{State: s}.Outcome()
		assert.False(t, done, s)
		assert.NoError(t, err, s)
	}
	done, err := Placement{State: StateReady}.Outcome()
	assert.True(t, done)
	assert.NoError(t, err)

	var apiErr *Error
	done, err = Placement{State: StateFailed, Code: CodeInsufficientMemory, Reason: "needs 5.0 GiB"}.Outcome()
	assert.True(t, done)
	if assert.True(t, errors.As(err, &apiErr)) {
		assert.Equal(t, CodeInsufficientMemory, apiErr.Code)
		assert.Equal(t, "needs 5.0 GiB", apiErr.Message)
	}
	done, err = Placement{State: StateEvicted, Reason: "evicted for qwen"}.Outcome()
	assert.True(t, done)
	if assert.True(t, errors.As(err, &apiErr)) {
		assert.Equal(t, CodeEngineError, apiErr.Code, "a failure without a code is the engine's")
	}
}
