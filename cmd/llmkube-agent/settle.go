package main

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/internal/execpages"
)

// releaseWhenSettled hands the agent's code pages back to the kernel (execpages) once a burst
// of one-off work is over: start-up (engine detection, restoring the placements kept), a
// placement's sizing, pull and load, a member joining or leaving the mesh — whatever the
// agent's events tell of — and each periodic round of engine detection. After an event it
// waits until none has come for after (--release-code-after), for the work's wrap-up (the first
// publish of the new state, the first health checks and gossip rounds), and until every
// placement has an outcome, ready or failed. That code ran once: without this the idle agent
// kept nearly all of its binary resident (13 of its 15 MB) where it runs about 5 MB of it.
// What runs again comes back from the page cache in a few hundred minor faults. A release
// after work, and one in collectEvery after rounds, also returns the heap's free pages. The
// first release logs "start-up over"; with after 0 none is made.
func releaseWhenSettled(ctx context.Context, a *agent.Agent, after time.Duration, log *slog.Logger) {
	select {
	case <-a.Running():
	case <-ctx.Done():
		return
	}
	_, sub := a.Events().Subscribe(0, nil)
	defer func() { sub.Close() }()
	timer := time.NewTimer(after) // start-up was work
	waiting := true               // the timer runs for work that is winding down
	first := true
	rounds := 0 // detection rounds released in a row, since the last release after other work
	for {
		round := false
		select {
		case _, ok := <-sub.C():
			if !ok { // cut off for falling behind (a burst of events): listen again
				_, sub = a.Events().Subscribe(0, nil)
			}
			timer.Reset(after)
			waiting = true
			continue
		case <-a.DetectRounds():
			// Detection and the host's re-probe run code nothing else runs, every 30 s (2.7-3.7
			// MB of pages in a release build, by RssFile): the round is over when it signals and
			// leaves nothing to wind down, so its pages go back at once. Waiting after for it
			// kept them for 5 s of every 30, and an idle agent measured then held 1.6 times a
			// bare node's RSS instead of 1.2-1.4 (footprint). A change it found is an event,
			// which arms the timer as any other.
			if waiting {
				continue // the timer's release takes the round's pages too
			}
			round = true
		case <-timer.C:
			waiting = false
		case <-ctx.Done():
			return
		}
		if !settled(a) {
			continue // its outcome is an event, which arms the timer again
		}
		var attrs []any
		if after > 0 {
			// The work's garbage goes back too: the runtime lets the heap grow to 4 MB before
			// it collects, and returns freed pages only slowly, so after start-up the idle agent
			// held 0.8-0.9 MB more anonymous memory for good (RssAnon 3.5 -> 4.4 MB). A round's
			// garbage is less, and is left to the runtime but at every collectEvery-th round.
			if round {
				rounds++
			} else {
				rounds = 0
			}
			collect := rounds%collectEvery == 0
			if collect {
				debug.FreeOSMemory()
			}
			released, err := execpages.Release()
			switch {
			case err == nil:
				attrs = append(attrs, "released_code_mb", float64(released>>10)/1024, "heap_returned", collect)
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

// collectEvery: of the releases after detection rounds in a row, each collectEvery-th also returns
// the heap's free pages (debug.FreeOSMemory), as the releases after other work all do; at the
// others the runtime is left to collect when it will (at a heap of 4 MB, or after 2 minutes). An
// idle agent allocates 1-2 MB in a round and the 30 s before it, nearly none of which lives
// (GODEBUG=gctrace=1, 2026-12-06): a collection forced at every round, with runtime.GC's wait for
// the sweep, the pages handed back and then faulted in again as the heap was used, was half of what
// a round cost on the Firecracker guest (perf, 120 s: 6-7 ms of 13-15). Left to the runtime, a
// round took 6-8 ms against 10-31 for the same build collecting every round, and the agent's
// anonymous memory was 0.2 MB more (mean 4.26 against 4.04 MB; two agents side by side, 300 s, CPU
// time of each 1 s). One in collectEvery still returns what an occasional burst without an event (a
// chat's buffers) left: every 5 minutes. Not the first round after work: the release after the work
// collected 30 s before, and a collection then found its work buffers to fault in afresh (100 of
// the 260 minor faults of the first round after start-up, by perf; 80-90 at the rounds after).
const collectEvery = 10

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
