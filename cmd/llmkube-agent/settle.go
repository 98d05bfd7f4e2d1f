package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/internal/execpages"
)

// releaseWhenSettled hands the agent's code pages back to the kernel (execpages) once a burst
// of one-off work is over: start-up (engine detection, restoring the placements kept), a
// placement's sizing, pull and load, a member joining or leaving the mesh — whatever the
// agent's events tell of — and each periodic round of engine detection. It waits until no event has come for after (--release-code-after),
// for the work's wrap-up (the first publish of the new state, the first health checks and
// gossip rounds), and until every placement has an outcome, ready or failed. That code ran
// once: without this the idle agent kept nearly all of its binary resident (13 of its 15 MB)
// where it runs about 5 MB of it. What runs again comes back from the page cache in a few
// hundred minor faults. The first release logs "start-up over"; with after 0 none is made.
func releaseWhenSettled(ctx context.Context, a *agent.Agent, after time.Duration, log *slog.Logger) {
	select {
	case <-a.Running():
	case <-ctx.Done():
		return
	}
	_, sub := a.Events().Subscribe(0, nil)
	defer func() { sub.Close() }()
	timer := time.NewTimer(after) // start-up was work
	first := true
	for {
		select {
		case _, ok := <-sub.C():
			if !ok { // cut off for falling behind (a burst of events): listen again
				_, sub = a.Events().Subscribe(0, nil)
			}
			timer.Reset(after)
			continue
		case <-a.DetectRounds():
			// Detection and the host's re-probe run most of hwprobe's and the drivers' code
			// every 30 s (3 MB of pages in a release build, measured by VmRSS): hand it back too.
			timer.Reset(after)
			continue
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		if !settled(a) {
			continue // its outcome is an event, which arms the timer again
		}
		var attrs []any
		if after > 0 {
			released, err := execpages.Release()
			switch {
			case err == nil:
				attrs = append(attrs, "released_code_mb", float64(released>>10)/1024)
			case !errors.Is(err, execpages.ErrUnsupported):
				log.Warn("releasing code pages", "err", err)
			}
		}
		if first {
			log.Info("start-up over", attrs...)
			first = false
		} else if after > 0 {
			log.Debug("code pages released", attrs...)
		}
	}
}

// settled reports whether every placement has an outcome: none is being sized, pulled,
// loaded or restarted.
func settled(a *agent.Agent) bool {
	for _, p := range a.Placements() {
		if done, _ := p.Outcome(); !done {
			return false
		}
	}
	return true
}
