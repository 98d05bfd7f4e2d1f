package mesh

import (
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// eventBuffer is how many events a subscriber may fall behind before the oldest are dropped.
const eventBuffer = 256

// broker fans views and events out to subscribers without ever blocking the mesh: a view
// subscriber holds at most one view, replaced by a newer one if it has not read it; an event
// subscriber that falls eventBuffer events behind loses the oldest.
type broker struct {
	mu     sync.Mutex
	views  map[chan View]struct{}
	events map[chan api.Event]struct{}
	seq    uint64
	closed bool
}

// Subscribe returns a channel that receives a fresh View after every change (the current one
// first), coalesced: a slow reader gets the latest, never a backlog. Call the function to
// unsubscribe; the channel is closed then, or when the member shuts down.
func (m *Mesh) Subscribe() (<-chan View, func()) {
	ch := make(chan View, 1)
	b := &m.subs
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		close(ch)
		return ch, func() {}
	}
	if b.views == nil {
		b.views = map[chan View]struct{}{}
	}
	b.views[ch] = struct{}{}
	b.mu.Unlock()
	signal(m.changed)
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.views[ch]; ok {
			delete(b.views, ch)
			close(ch)
		}
	}
}

// SubscribeEvents returns a channel of mesh events (api.Event of type api.EventMesh): a member
// joined, left, turned suspect, dead or unreachable, recovered, or two nodes claim one name.
// Kind says which (api.MeshEventKind); Message starts with the same word for people, then ": "
// and the detail, if any.
func (m *Mesh) SubscribeEvents() (<-chan api.Event, func()) {
	ch := make(chan api.Event, eventBuffer)
	b := &m.subs
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(ch)
		return ch, func() {}
	}
	if b.events == nil {
		b.events = map[chan api.Event]struct{}{}
	}
	b.events[ch] = struct{}{}
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.events[ch]; ok {
			delete(b.events, ch)
			close(ch)
		}
	}
}

func (b *broker) event(e api.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	e.Seq, e.Time = b.seq, time.Now()
	for ch := range b.events {
		select {
		case ch <- e:
		default:
			select { // full: drop the oldest
			case <-ch:
			default:
			}
			select {
			case ch <- e:
			default:
			}
		}
	}
}

func (b *broker) hasViewSubs() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.views) > 0
}

func (b *broker) view(v View) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.views {
		select { // replace an unread view
		case <-ch:
		default:
		}
		select {
		case ch <- v:
		default:
		}
	}
}

func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for ch := range b.views {
		close(ch)
	}
	for ch := range b.events {
		close(ch)
	}
	b.views, b.events = nil, nil
}

// notifier builds one View per burst of changes and hands it to the subscribers.
func (m *Mesh) notifier() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.changed:
		}
		if !m.subs.hasViewSubs() {
			continue
		}
		m.subs.view(m.View())
	}
}
