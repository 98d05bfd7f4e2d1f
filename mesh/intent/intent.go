// Package intent keeps the mesh's intents: what users asked the mesh to keep running, one
// record per namespace and model name (api.Intent). Every agent holds the whole set, persisted
// in its state dir, and the set travels between members beside the state documents (the mesh's
// Shared hook): one intent gossiped on each change, the whole set in every push/pull.
//
// Merging is last-writer-wins per key on (Version, Origin): a Lamport clock, so an edit made
// after seeing another always wins over it, and the node name breaks the tie between two edits
// made concurrently. A deletion is an edit (a tombstone) and is kept, so a member that missed it
// cannot bring the intent back. Merge is idempotent, commutative and associative: members that
// exchanged their sets in any order, after any partition or restart, hold the same set.
package intent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/atomicfile"
)

// File holds the intents under the agent's state dir.
const File = "intents.json"

// MaxIntents bounds the set: a member with the key could invent any number of intents.
const MaxIntents = 1024

// wireVersion is the first byte of an encoded set; the JSON array of intents follows.
const wireVersion = 1

// Store is one member's copy of the mesh's intents. Its methods are safe for concurrent use.
type Store struct {
	node string
	path string // "" keeps nothing (consoles, tests)

	mu      sync.Mutex
	clock   uint64
	items   map[string]api.Intent
	changed chan struct{}
}

// Open reads the intents kept in dir (none when the file is missing); dir "" keeps nothing.
// node names this member as the origin of its edits.
func Open(dir, node string) (*Store, error) {
	s := &Store{node: node, items: map[string]api.Intent{}, changed: make(chan struct{}, 1)}
	if dir == "" {
		return s, nil
	}
	s.path = filepath.Join(dir, File)
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading intents: %w", err)
	}
	var saved []api.Intent
	if err := json.Unmarshal(b, &saved); err != nil {
		return nil, fmt.Errorf("reading intents %s: %w", s.path, err)
	}
	s.mergeLocked(saved)
	return s, nil
}

// Changed is signalled (coalesced) whenever the set changes.
func (s *Store) Changed() <-chan struct{} { return s.changed }

// All returns every intent, tombstones included, by key.
func (s *Store) All() []api.Intent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.Intent, 0, len(s.items))
	for _, in := range s.items {
		out = append(out, clone(in))
	}
	slices.SortFunc(out, api.CompareIntents)
	return out
}

// Live returns the intents not deleted, by key.
func (s *Store) Live() []api.Intent {
	return slices.DeleteFunc(s.All(), func(in api.Intent) bool { return in.Deleted })
}

// Get returns the intent with key, tombstone or not.
func (s *Store) Get(key string) (api.Intent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.items[key]
	return clone(in), ok
}

// Put records a local edit of in (a new intent, a change, or a deletion when in.Deleted): it
// gets the next version with this member as its origin, is saved, and is returned in its wire
// form to gossip. A full set refuses a new key.
func (s *Store) Put(in api.Intent) (api.Intent, []byte, error) {
	if err := check(&in); err != nil {
		return api.Intent{}, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.items[in.Key()]; !ok && len(s.items) >= MaxIntents {
		return api.Intent{}, nil, api.Errorf(api.CodeTooBusy, "the mesh keeps %d intents already, the most it keeps", MaxIntents)
	}
	s.clock++
	in.Version, in.Origin, in.UpdatedAt = s.clock, s.node, time.Now().UTC()
	s.items[in.Key()] = clone(in)
	if err := s.saveLocked(); err != nil {
		return api.Intent{}, nil, err
	}
	signal(s.changed)
	return in, Encode([]api.Intent{in}), nil
}

// Merge takes intents from another member (one gossiped, or a whole set) and returns those that
// were news, each in its wire form to gossip on. Invalid ones are dropped.
func (s *Store) Merge(wire []byte) (news map[string][]byte, err error) {
	ins, err := Decode(wire)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	won := s.mergeLocked(ins)
	if len(won) == 0 {
		return nil, nil
	}
	if err := s.saveLocked(); err != nil {
		return nil, err
	}
	signal(s.changed)
	news = make(map[string][]byte, len(won))
	for _, in := range won {
		news[in.Key()] = Encode([]api.Intent{in})
	}
	return news, nil
}

// mergeLocked keeps each intent newer than the one held and returns those kept.
func (s *Store) mergeLocked(ins []api.Intent) []api.Intent {
	var won []api.Intent
	for _, in := range ins {
		if check(&in) != nil {
			continue
		}
		s.clock = max(s.clock, in.Version)
		old, ok := s.items[in.Key()]
		if ok && !in.Newer(old) {
			continue
		}
		if !ok && len(s.items) >= MaxIntents {
			continue
		}
		s.items[in.Key()] = clone(in)
		won = append(won, in)
	}
	return won
}

// Full is the whole set's wire form, for a push/pull.
func (s *Store) Full() []byte { return Encode(s.All()) }

func (s *Store) saveLocked() error {
	if s.path == "" {
		return nil
	}
	all := make([]api.Intent, 0, len(s.items))
	for _, in := range s.items {
		all = append(all, in)
	}
	slices.SortFunc(all, api.CompareIntents)
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("saving intents: %w", err)
	}
	return nil
}

// Encode is the wire form of a set of intents.
func Encode(ins []api.Intent) []byte {
	b, _ := json.Marshal(ins) // plain data: cannot fail
	return append([]byte{wireVersion}, b...)
}

// maxWire bounds a decoded set, so a hostile one cannot balloon.
const maxWire = 4 << 20

// Decode reads a wire form. Intents are checked by Merge, not here.
func Decode(b []byte) ([]api.Intent, error) {
	switch {
	case len(b) == 0:
		return nil, errors.New("intents: empty")
	case b[0] != wireVersion:
		return nil, fmt.Errorf("intents: unknown encoding %d", b[0])
	case len(b) > maxWire:
		return nil, fmt.Errorf("intents: over %d bytes", maxWire)
	}
	var ins []api.Intent
	if err := json.Unmarshal(b[1:], &ins); err != nil {
		return nil, fmt.Errorf("intents: %w", err)
	}
	if len(ins) > MaxIntents {
		return nil, fmt.Errorf("intents: %d, at most %d", len(ins), MaxIntents)
	}
	return ins, nil
}

// check refuses an intent no member could place, and bounds what another member may say: its
// strings reach terminals, its replica count every agent's reconciler.
func check(in *api.Intent) error {
	api.Sanitize(in)
	if err := api.ValidNamespace(in.Namespace); err != nil {
		return api.Errorf(api.CodeBadRequest, "intent: %v", err)
	}
	if in.Name == "" || in.Source == "" {
		return api.Errorf(api.CodeBadRequest, "intent %s: no model name or source", in.Key())
	}
	if !in.Deleted {
		least := 1
		if in.Alias {
			least = 0 // placed on demand
		}
		in.Replicas = max(least, min(in.Replicas, api.MaxReplicas))
	}
	return nil
}

func clone(in api.Intent) api.Intent {
	in.Args = slices.Clone(in.Args)
	in.Hosts = slices.Clone(in.Hosts)
	return in
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
