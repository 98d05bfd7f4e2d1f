package gateway

import (
	"slices"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/dialect"
	"github.com/llmkube/mesh/engines"
)

// itemStore keeps the messages this agent answered through /v1/responses for a while, so a
// client that refers to one later by id (the AI SDK's item_reference, its default for earlier
// answers) is served by the agent that produced it. It is bounded in entries, bytes and age,
// scoped by namespace, and lost on restart: a reference it cannot resolve is refused, saying
// how to send the item itself.
type itemStore struct {
	mu    sync.Mutex
	items map[string]storedItem
	order []string // ids, oldest first
	bytes int
}

type storedItem struct {
	scope string
	text  string
	at    time.Time
}

// Bounds of the item store.
const (
	maxItems     = 4096
	maxItemBytes = 16 << 20
	itemTTL      = 2 * time.Hour
)

func newItemStore() *itemStore { return &itemStore{items: map[string]storedItem{}} }

// put remembers an answer's text under its item id.
func (s *itemStore) put(scope, id, text string) {
	if len(text) > maxItemBytes/16 {
		return // a huge answer is not kept; a reference to it is refused with the hint
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[id] = storedItem{scope: scope, text: text, at: time.Now()}
	s.order = append(s.order, id)
	s.bytes += len(text)
	for len(s.order) > 0 && (len(s.items) > maxItems || s.bytes > maxItemBytes || time.Since(s.items[s.order[0]].at) > itemTTL) {
		s.drop(s.order[0])
		s.order = s.order[1:]
	}
}

func (s *itemStore) drop(id string) {
	if it, ok := s.items[id]; ok {
		s.bytes -= len(it.text)
		delete(s.items, id)
	}
}

// get is the text of item id answered in scope, if it is still kept.
func (s *itemStore) get(scope, id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[id]
	if !ok || it.scope != scope || time.Since(it.at) > itemTTL {
		return "", false
	}
	return it.text, true
}

// itemScope is the item store's scope for a caller: its namespace, or the admin's own.
func itemScope(ns string, admin bool) string {
	if admin {
		return "\x00admin"
	}
	return ns
}

// withReferences returns call's messages with each item_reference replaced by the answer this
// agent gave, or a refusal naming the first it does not have.
func (g *Gateway) withReferences(call *dialect.Call, scope string) ([]engines.Message, *dialect.Failure) {
	if len(call.Refs) == 0 {
		return call.Req.Messages, nil
	}
	msgs := slices.Clone(call.Req.Messages)
	for _, ref := range call.Refs {
		text, ok := g.items.get(scope, ref.ID)
		if !ok {
			return nil, dialect.BadRequest("item_reference " + ref.ID + ": " + dialect.NoStore)
		}
		msgs[ref.Index].Content = text
	}
	return msgs, nil
}
