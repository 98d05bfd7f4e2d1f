package llamaserver

import (
	"context"
	"strings"
	"time"

	"github.com/llmkube/mesh/sim/simtext"
)

// answer returns the tokens of the reply to prompt and why it ends: "stop" when the simulated
// model ends it on its own (simtext.AnswerLength), "length" when limit (>= 0) cuts it short.
// limit < 0 means no limit.
func answer(seed int64, prompt string, limit int) ([]string, string) {
	n := simtext.AnswerLength(seed, prompt)
	if limit >= 0 && limit < n {
		return simtext.Generate(seed, prompt, limit), "length"
	}
	return simtext.Generate(seed, prompt, n), "stop"
}

// stopper applies stop strings to streamed text the way llama-server does: text that might be
// the start of a stop string is held back until it is known not to be one, and nothing from the
// stop string on is ever sent.
type stopper struct {
	stops []string
	text  strings.Builder
	sent  int
}

// add appends a token and returns the text that is now safe to send, and whether a stop string
// was found (generation must end).
func (s *stopper) add(tok string) (string, bool) {
	s.text.WriteString(tok)
	all := s.text.String()
	for _, stop := range s.stops {
		if stop == "" {
			continue
		}
		if i := strings.Index(all[s.sent:], stop); i >= 0 {
			out := all[s.sent : s.sent+i]
			s.sent = len(all)
			return out, true
		}
	}
	hold := 0
	for _, stop := range s.stops {
		for k := min(len(stop)-1, len(all)-s.sent); k > hold; k-- {
			if strings.HasSuffix(all, stop[:k]) {
				hold = k
				break
			}
		}
	}
	out := all[s.sent : len(all)-hold]
	s.sent = len(all) - hold
	return out, false
}

// flush returns the held-back text once generation has ended without a stop string.
func (s *stopper) flush() string {
	all := s.text.String()
	out := all[s.sent:]
	s.sent = len(all)
	return out
}

// pacer spaces tokens: the first after ttft, then one every 1/rate seconds, on an absolute
// schedule so slow writes do not add up. rate 0 means no waiting between tokens.
type pacer struct {
	start time.Time
	ttft  time.Duration
	rate  float64
}

// wait blocks until token i (0-based) is due, or ctx ends.
func (p pacer) wait(ctx context.Context, i int) error {
	due := p.start.Add(p.ttft)
	if p.rate > 0 {
		due = due.Add(time.Duration(float64(i) / p.rate * float64(time.Second)))
	}
	d := time.Until(due)
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
