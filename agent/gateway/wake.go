package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/dialect"
	"github.com/llmkube/mesh/agent/route"
)

// Defaults of the wait for a sleeping model to load again.
const (
	// DefaultWakeTimeout bounds a request's wait for a sleeping model to load: under the
	// forwarder's DefaultResponseHeaderTimeout, so a forwarded request hears the owner's answer.
	DefaultWakeTimeout = 4 * time.Minute
	// wakeKeepAlive spaces the SSE comments a streaming client gets while the model loads.
	wakeKeepAlive = 5 * time.Second
	// wakeRetryAfter is the Retry-After of a wake refused for memory: long enough for a
	// placement to go idle or be deleted, short enough to notice.
	wakeRetryAfter = 30
)

// commenter is an encoder that can send an SSE comment before the answer (Anthropic's: a ping
// event): a stream in an SSE dialect, which tells a waiting client the connection is alive.
type commenter interface {
	Comment(text string) error
}

// canKeepAlive reports whether keepAlive keeps enc's stream alive.
func canKeepAlive(enc dialect.Encoder) bool {
	_, ok := enc.(commenter)
	return ok
}

// acquire counts a request on a local replica (see agent.Acquire), waking it when it sleeps.
// It returns the replica as it serves now (reloaded after a wake), the release, and the
// failure to answer; a wait for the load sends ": loading" comments on an SSE stream.
func (g *Gateway) acquire(ctx context.Context, c route.Replica, enc dialect.Encoder) (route.Replica, func(), error) {
	release, wait, err := g.a.Acquire(c.P.ID)
	if err != nil {
		return c, nil, wakeFailure(err)
	}
	if wait == nil {
		return c, release, nil
	}
	wctx, cancel := context.WithTimeout(ctx, g.cfg.WakeTimeout)
	defer cancel()
	err = keepAlive(enc, func() error { return wait(wctx) })
	if err == nil {
		l, ok := g.a.ServingID(c.P.ID)
		if !ok {
			err = api.Errorf(api.CodeEngineUnavailable, "model %q loaded and went away again", c.P.Model)
		} else {
			c.P, c.Local = l.Placement, &l
			return c, release, nil
		}
	}
	release()
	if ctx.Err() != nil {
		return c, nil, ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = &dialect.Failure{Status: http.StatusServiceUnavailable, Code: api.CodeEngineUnavailable, OACode: "model_not_ready",
			Msg: "model " + c.P.Model + " is still loading after " + g.cfg.WakeTimeout.String() + "; retry later", RetryAfter: wakeRetryAfter}
	}
	return c, nil, wakeFailure(err)
}

// keepAlive runs wait, and meanwhile keeps enc's stream alive when it is one that can be (see
// commenter): a "loading" comment at once, then every wakeKeepAlive. It is how a streaming
// client hears that its request waits for its model to load, whether a sleeping one wakes
// (acquire) or one is placed on demand (Gateway.replicas).
func keepAlive(enc dialect.Encoder, wait func() error) error {
	cm, _ := enc.(commenter)
	if cm == nil {
		return wait()
	}
	done := make(chan error, 1)
	go func() { done <- wait() }()
	cm.Comment("loading")
	t := time.NewTicker(wakeKeepAlive)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			cm.Comment("loading")
		case err := <-done:
			return err
		}
	}
}

// wakeFailure is the answer to a wake that failed: one refused for memory is a 503 with
// Retry-After (the memory may free up), keeping its code, so the client can tell why.
func wakeFailure(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	f := dialect.FailureOf(err)
	if f.Code == api.CodeInsufficientMemory {
		f = &dialect.Failure{Status: http.StatusServiceUnavailable, Code: f.Code, OACode: "model_not_ready", Msg: f.Msg, RetryAfter: wakeRetryAfter}
	}
	return f
}

// load answers an Ollama load request on a local replica, as Ollama does: keep_alive 0 unloads
// the model (it sleeps at once, unless a request is in flight: then once it ends); otherwise
// keep_alive, when given, is the model's TTL from now on, and a sleeping model is woken.
func (g *Gateway) load(w http.ResponseWriter, r *http.Request, call *dialect.Call, c route.Replica) (bool, error) {
	if call.KeepAlive != nil {
		if err := g.a.SetTTL(c.P.ID, *call.KeepAlive); err != nil {
			return false, dialect.FailureOf(err)
		}
		if *call.KeepAlive == 0 {
			dialect.AnswerLoad(w, call, "unload")
			return true, nil
		}
	}
	_, release, err := g.acquire(r.Context(), c, nil)
	if err != nil {
		return false, err
	}
	release()
	dialect.AnswerLoad(w, call, "load")
	return true, nil
}
