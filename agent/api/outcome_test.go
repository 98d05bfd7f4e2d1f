package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// followServer serves placement p-1 as answers, one per look, the last one from then on; an
// answer with a Code and no State is an error response with that code.
func followServer(t *testing.T, answers ...Placement) *Client {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		a := answers[min(n, len(answers)-1)]
		n++
		mu.Unlock()
		if a.State == "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(ErrorBody{Error: &Error{Code: a.Code, Message: a.Reason}})
			return
		}
		_ = json.NewEncoder(w).Encode(a)
	}))
	t.Cleanup(srv.Close)
	return NewClient(srv.URL, "")
}

// TestFollowPlacement pins the one wait loop: what look hears, a failed look asked again or
// ending the wait as look decides, and a deleted placement ending it whatever look says.
func TestFollowPlacement(t *testing.T) {
	pulling := Placement{ID: "p-1", State: StatePulling, Progress: 0.5}
	busy := Placement{Code: CodeTooBusy, Reason: "busy"}
	ready := Placement{ID: "p-1", State: StateReady}
	c := followServer(t, pulling, pulling, busy, pulling, ready)

	type heard struct {
		state PlacementState
		code  Code
	}
	var got []heard
	p, err := c.FollowPlacement(t.Context(), "p-1", time.Millisecond, func(p Placement, err error) error {
		var ae *Error
		if errors.As(err, &ae) {
			got = append(got, heard{code: ae.Code})
			return nil // asked again
		}
		got = append(got, heard{state: p.State})
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, StateReady, p.State)
	assert.Equal(t, []heard{{state: StatePulling}, {code: CodeTooBusy}, {state: StatePulling}, {state: StateReady}}, got,
		"a look that changes nothing is not heard, the first after a failed one is")

	// WaitPlacement's look ends the wait at the first failure, with the last placement seen.
	c = followServer(t, pulling, busy, ready)
	p, err = c.WaitPlacement(t.Context(), "p-1", time.Millisecond, nil)
	var ae *Error
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, CodeTooBusy, ae.Code)
	assert.Equal(t, StatePulling, p.State)

	// A placement gone from its host ends even a wait that asks again.
	c = followServer(t, pulling, Placement{Code: CodeNotFound, Reason: "no placement p-1"})
	p, err = c.FollowPlacement(t.Context(), "p-1", time.Millisecond, func(Placement, error) error { return nil })
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, CodeNotFound, ae.Code)
	assert.Equal(t, StatePulling, p.State)

	// A failed placement ends it with its code.
	c = followServer(t, Placement{ID: "p-1", State: StateFailed, Code: CodePullFailed, Reason: "503"})
	p, err = c.FollowPlacement(t.Context(), "p-1", time.Millisecond, func(Placement, error) error { return nil })
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, CodePullFailed, ae.Code)
	assert.Equal(t, StateFailed, p.State)
}
