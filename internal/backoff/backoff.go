// Package backoff is the one doubling delay the product's retry loops share: a console
// following an agent's event stream, an agent restarting a crashed engine, a member joining a
// peer, a seed name resolved again, a download resumed. Each loop had its own doubling and cap;
// the rule lives here once.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff is a delay that doubles after each failure, from First up to Max, and starts over at
// First after Reset. The zero value is not useful: set First and Max.
type Backoff struct {
	First, Max time.Duration
	cur        time.Duration
}

// New returns a backoff from first up to max.
func New(first, max time.Duration) Backoff { return Backoff{First: first, Max: max} }

// Next returns the delay before the next try and doubles the one after it, up to Max.
func (b *Backoff) Next() time.Duration {
	d := b.Current()
	b.cur = min(2*d, max(b.Max, b.First))
	return d
}

// Current is the delay Next will return, without advancing it.
func (b *Backoff) Current() time.Duration {
	if b.cur <= 0 {
		return b.First
	}
	return b.cur
}

// AtMax reports whether the delay has reached Max, where a loop may say that it keeps failing.
func (b *Backoff) AtMax() bool { return b.Current() >= b.Max }

// Reset starts the delay over at First, after a success.
func (b *Backoff) Reset() { b.cur = 0 }

// Jitter is d plus up to a quarter of d at random, so hosts that fail together (rebooted at
// once, one peer gone for all) do not retry in lockstep.
func Jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/4+1))
}
