package apiclient

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

	"github.com/llmkube/mesh/agent/api"
)

// followServer serves placement p-1 as answers, one per look, the last one from then on; an
// answer with a Code and no State is an error response with that code.
func followServer(t *testing.T, answers ...api.Placement) *Client {
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
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: a.Code, Message: a.Reason}})
			return
		}
		_ = json.NewEncoder(w).Encode(a)
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL, "")
}

// TestFollowPlacement pins the one wait loop: what look hears, a failed look asked again or
// ending the wait as look decides, and a deleted placement ending it whatever look says.
func TestFollowPlacement(t *testing.T) {
	pulling := api.Placement{ID: "p-1", State: api.StatePulling, Progress: 0.5}
	busy := api.Placement{Code: api.CodeTooBusy, Reason: "busy"}
	ready := api.Placement{ID: "p-1", State: api.StateReady}
	c := followServer(t, pulling, pulling, busy, pulling, ready)

	type heard struct {
		state api.PlacementState
		code  api.Code
	}
	var got []heard
	p, err := c.FollowPlacement(t.Context(), "p-1", time.Millisecond, func(p api.Placement, err error) error {
		var ae *api.Error
		if errors.As(err, &ae) {
			got = append(got, heard{code: ae.Code})
			return nil // asked again
		}
		got = append(got, heard{state: p.State})
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, api.StateReady, p.State)
	assert.Equal(t, []heard{{state: api.StatePulling}, {code: api.CodeTooBusy}, {state: api.StatePulling}, {state: api.StateReady}}, got,
		"a look that changes nothing is not heard, the first after a failed one is")

	// WaitPlacement's look ends the wait at the first failure, with the last placement seen.
	c = followServer(t, pulling, busy, ready)
	p, err = c.WaitPlacement(t.Context(), "p-1", time.Millisecond, nil)
	var ae *api.Error
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, api.CodeTooBusy, ae.Code)
	assert.Equal(t, api.StatePulling, p.State)

	// A placement gone from its host ends even a wait that asks again.
	c = followServer(t, pulling, api.Placement{Code: api.CodeNotFound, Reason: "no placement p-1"})
	p, err = c.FollowPlacement(t.Context(), "p-1", time.Millisecond, func(api.Placement, error) error { return nil })
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, api.CodeNotFound, ae.Code)
	assert.Equal(t, api.StatePulling, p.State)

	// A failed placement ends it with its code.
	c = followServer(t, api.Placement{ID: "p-1", State: api.StateFailed, Code: api.CodePullFailed, Reason: "503"})
	p, err = c.FollowPlacement(t.Context(), "p-1", time.Millisecond, func(api.Placement, error) error { return nil })
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, api.CodePullFailed, ae.Code)
	assert.Equal(t, api.StateFailed, p.State)
}
