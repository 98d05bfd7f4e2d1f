package simserver

import (
	"context"
	"time"

	"github.com/llmkube/mesh/sim/simtext"
)

// Answer returns the tokens of the reply to prompt and why it ends: "stop" when the simulated
// model ends it on its own (simtext.AnswerLengthUpTo longest), "length" when limit (>= 0) cuts
// it short. limit < 0 means no limit.
func Answer(seed int64, prompt string, limit, longest int) ([]string, string) {
	n := simtext.AnswerLengthUpTo(seed, prompt, longest)
	if limit >= 0 && limit < n {
		return simtext.Generate(seed, prompt, limit), "length"
	}
	return simtext.Generate(seed, prompt, n), "stop"
}

// Pacer spaces tokens: the first TTFT after Start, then one every 1/Rate seconds, on an absolute
// schedule so slow writes do not add up. Rate 0 means no waiting between tokens.
type Pacer struct {
	Start time.Time
	TTFT  time.Duration
	Rate  float64
}

// Wait blocks until token i (0-based) is due, or ctx ends.
func (p Pacer) Wait(ctx context.Context, i int) error {
	due := p.Start.Add(p.TTFT)
	if p.Rate > 0 {
		due = due.Add(time.Duration(float64(i) / p.Rate * float64(time.Second)))
	}
	return Sleep(ctx, time.Until(due))
}

// Sleep waits d, or until ctx ends; it reports ctx's error (even for d <= 0, so a client that has
// left is noticed between tokens that are already due).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
