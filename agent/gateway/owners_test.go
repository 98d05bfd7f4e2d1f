package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/dialect"
)

// livenessBoard is a mesh's liveness as a test sets it.
type livenessBoard struct {
	mu sync.Mutex
	m  map[string]api.Liveness
}

func (l *livenessBoard) set(host string, v api.Liveness) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[host] = v
}

func (l *livenessBoard) get(host string) (api.Liveness, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[host]
	return v, ok
}

func (o *owners) watching() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.running
}

// TestOwnersWatch: one watch for every forwarded request in flight ends the requests of a lost
// owner, with the reason, and those alone; a suspect owner's after the grace; a request that
// ended is not touched; the watch stops once nothing is in flight.
func TestOwnersWatch(t *testing.T) {
	board := &livenessBoard{m: map[string]api.Liveness{"a": api.Alive, "b": api.Alive}}
	g := &Gateway{cfg: Config{Liveness: board.get, OwnerGrace: 300 * time.Millisecond}, log: slog.New(slog.DiscardHandler)}
	o := &owners{g: g, hosts: map[string]*owner{}}
	watch := func(host string) (context.Context, func()) {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		return ctx, o.watch(cancel, host, "m")
	}
	// lost is why the watch ended a request.
	lost := func(ctx context.Context) *dialect.Failure {
		var f *dialect.Failure
		errors.As(context.Cause(ctx), &f)
		return f
	}
	onA1, stopA1 := watch("a")
	onA2, stopA2 := watch("a")
	ended, stopEnded := watch("a")
	stopEnded()
	onB, stopB := watch("b")

	board.set("a", api.Dead)
	for _, ctx := range []context.Context{onA1, onA2} {
		<-ctx.Done()
		f := lost(ctx)
		require.NotNil(t, f)
		assert.Equal(t, `agent a serving "m" is dead in the mesh: the request to it was ended`, f.Msg)
	}
	assert.NoError(t, onB.Err(), "b is alive")
	assert.NoError(t, ended.Err(), "a request that ended is not watched")
	stopA1()
	stopA2()

	suspectAt := time.Now()
	board.set("b", api.Suspect)
	<-onB.Done()
	assert.GreaterOrEqual(t, time.Since(suspectAt), 300*time.Millisecond, "ended after the grace, not before")
	assert.Contains(t, lost(onB).Msg, "has been suspect for")
	stopB()

	require.Eventually(t, func() bool { return !o.watching() }, 5*time.Second, time.Millisecond, "the watch stops with nothing in flight")
	again, stopAgain := watch("b")
	defer stopAgain()
	assert.True(t, o.watching(), "and starts again with the next request")
	board.set("b", api.Left)
	<-again.Done()
	assert.Contains(t, lost(again).Msg, "is left")
}
