// Package events is the agent's event hub: a bounded ring of recent events for replay
// (SSE Last-Event-ID) and live fan-out to subscribers. A subscriber that cannot keep up is cut
// off rather than allowed to slow the agent; it reconnects and replays from the ring.
package events

import (
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// Hub fans events out to subscribers and remembers the last few for replay.
type Hub struct {
	host string

	mu   sync.Mutex
	ring []api.Event // oldest first, at most cap(ring)
	size int
	seq  uint64
	subs map[*Subscription]struct{}
}

// subBuffer is how many events a subscriber may fall behind before it is cut off.
const subBuffer = 256

// New returns a hub remembering the last size events, stamping them with host.
// Sequence numbers start at the current Unix time in milliseconds, so they keep increasing
// across agent restarts and a client's Last-Event-ID from before a restart replays the new ring
// rather than skipping it.
func New(host string, size int) *Hub {
	if size < 1 {
		size = 1
	}
	return &Hub{
		host: host,
		size: size,
		ring: make([]api.Event, 0, size),
		seq:  uint64(time.Now().UnixMilli()),
		subs: make(map[*Subscription]struct{}),
	}
}

// Publish stamps ev with the next sequence number, the time and the host, and delivers it.
func (h *Hub) Publish(ev api.Event) api.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	ev.Seq = h.seq
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.Host == "" {
		ev.Host = h.host
	}
	if len(h.ring) == h.size {
		copy(h.ring, h.ring[1:])
		h.ring = h.ring[:h.size-1]
	}
	h.ring = append(h.ring, ev)
	for s := range h.subs {
		if s.filter != nil && !s.filter(ev) {
			continue
		}
		select {
		case s.ch <- ev:
		default:
			// Too slow: cut it off. Its reader sees the channel close and reconnects.
			delete(h.subs, s)
			close(s.ch)
		}
	}
	return ev
}

// Subscription receives events published after it was made.
type Subscription struct {
	h      *Hub
	ch     chan api.Event
	filter func(api.Event) bool
	once   sync.Once
}

// Subscribe returns the ring's events with a sequence number above after (none when after is
// 0) and a subscription to everything published from then on, with no gap and no repeat
// between the two. filter, when set, decides which events the subscriber sees.
func (h *Hub) Subscribe(after uint64, filter func(api.Event) bool) ([]api.Event, *Subscription) {
	s := &Subscription{h: h, ch: make(chan api.Event, subBuffer), filter: filter}
	h.mu.Lock()
	defer h.mu.Unlock()
	var replay []api.Event
	if after > 0 {
		for _, ev := range h.ring {
			if ev.Seq > after && (filter == nil || filter(ev)) {
				replay = append(replay, ev)
			}
		}
	}
	h.subs[s] = struct{}{}
	return replay, s
}

// C delivers events; it is closed when the subscription ends or falls too far behind.
func (s *Subscription) C() <-chan api.Event { return s.ch }

// Close ends the subscription.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.h.mu.Lock()
		defer s.h.mu.Unlock()
		if _, ok := s.h.subs[s]; ok {
			delete(s.h.subs, s)
			close(s.ch)
		}
	})
}
