// Package intent keeps the mesh's intents: what users asked the mesh to keep running, one
// record per namespace and model name (api.Intent). Every agent holds the whole set, persisted
// in its state dir, and the set travels between members beside the state documents (the mesh's
// Shared hook): one intent gossiped on each change, the whole set in every push/pull.
//
// Merging is last-writer-wins per key on (Version, Origin): a Lamport clock, so an edit made
// after seeing another always wins over it, and the node name breaks the tie between two edits
// made concurrently. A deletion is an edit (a tombstone), so a member that missed it cannot
// bring the intent back. Merge is idempotent, commutative and associative: members that
// exchanged their sets in any order, after any partition or restart, hold the same set.
//
// The set is bounded: MaxIntents intents and MaxBytes of them, each at most MaxIntentBytes; a
// new one past the bound is refused. A tombstone is kept for Horizon, then dropped: by then
// every member in touch with the mesh holds it, since the whole set rides every push/pull.
//
// A member out of touch for longer (off for over Horizon) may come back holding an intent
// deleted meanwhile, whose tombstone is gone. What keeps it from resurrecting the intent: a
// member whose view has been continuous for over Horizon (it ran, or restarted within Horizon,
// or synced with such a member since; "settled", said in every whole set it sends) would have
// heard of any intent last edited over Horizon ago by now, so it never takes such an intent it
// does not hold; and a member that merges a settled member's whole set drops its intents last
// edited over Horizon ago that the set lacks (any deleted within Horizon still has its
// tombstone there), and is settled from then on. A member back after Horizon, or new, is not
// settled until then: it takes everything, so when the whole mesh was off that long nothing is
// lost, and a new mesh settles after running for Horizon. What this gives up: a partition
// longer than Horizon drops, on both sides, the intents made on one side and not edited since
// (the set converges, without them), rather than resurrect deletions.
package intent

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

// Bounds of the set: a member with the key could invent any number of intents, or huge ones,
// and the whole set rides every push/pull.
const (
	MaxIntents     = 1024
	MaxIntentBytes = 4 << 10
	MaxBytes       = 512 << 10
)

// Horizon is how long a tombstone is kept, and how long a member's view must be continuous
// before it is settled (see the package comment). Far longer than any push/pull interval.
const Horizon = 24 * time.Hour

// wireVersion is the first byte of an encoded set; a JSON wire object follows.
const wireVersion = 2

// wire is what members send each other: intents, and whether the sender is settled and sends
// its whole set (a push/pull) or only changes (gossip).
type wire struct {
	Settled bool         `json:"settled,omitempty"`
	Full    bool         `json:"full,omitempty"`
	Intents []api.Intent `json:"intents"`
}

// saved is the file: the intents, when this member was last seen running (to within an hour),
// which tells a restart whether it was off for over Horizon, and since when its view is
// continuous.
type saved struct {
	Seen    time.Time    `json:"seen,omitzero"`
	Since   time.Time    `json:"since,omitzero"`
	Intents []api.Intent `json:"intents"`
}

// Store is one member's copy of the mesh's intents. Its methods are safe for concurrent use.
type Store struct {
	node string
	path string // "" keeps nothing (consoles, tests)
	now  func() time.Time

	mu    sync.Mutex
	clock uint64
	// since is when this member's view became continuous: settled once over Horizon ago.
	since   time.Time
	seen    time.Time // when the file last said this member was running
	items   map[string]api.Intent
	sizes   map[string]int // encoded bytes of each item
	bytes   int            // their sum
	changed chan struct{}
}

// Open reads the intents kept in dir (none when the file is missing); dir "" keeps nothing.
// node names this member as the origin of its edits.
func Open(dir, node string) (*Store, error) { return openWith(dir, node, time.Now) }

func openWith(dir, node string, now func() time.Time) (*Store, error) {
	s := &Store{node: node, now: now, since: now(), items: map[string]api.Intent{}, sizes: map[string]int{}, changed: make(chan struct{}, 1)}
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
	var sv saved
	if err := json.Unmarshal(b, &sv); err != nil {
		return nil, fmt.Errorf("reading intents %s: %w", s.path, err)
	}
	at := now()
	s.mergeLocked(wire{Intents: sv.Intents}, at) // unsettled yet: its own intents all count
	s.seen = sv.Seen
	if at.Sub(sv.Seen) <= Horizon && !sv.Since.IsZero() {
		s.since = sv.Since // a restart, not an absence
	}
	return s, nil
}

// Changed is signalled (coalesced) whenever the set changes.
func (s *Store) Changed() <-chan struct{} { return s.changed }

// All returns every intent, tombstones included, by key.
func (s *Store) All() []api.Intent {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tidyLocked(s.now())
	return s.allLocked()
}

func (s *Store) allLocked() []api.Intent {
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
// form to gossip. A full set refuses a new key, and any set an intent over its size.
func (s *Store) Put(in api.Intent) (api.Intent, []byte, error) {
	if err := check(&in); err != nil {
		return api.Intent{}, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.pruneLocked(now)
	s.clock++
	in.Version, in.Origin, in.UpdatedAt = s.clock, s.node, now.UTC()
	if err := s.roomLocked(in); err != nil {
		s.clock--
		return api.Intent{}, nil, err
	}
	s.setLocked(in)
	if err := s.saveLocked(); err != nil {
		return api.Intent{}, nil, err
	}
	signal(s.changed)
	return in, s.encodeLocked([]api.Intent{in}, false), nil
}

// roomLocked refuses in when it is too big, or the set has no room for it.
func (s *Store) roomLocked(in api.Intent) error {
	n := size(in)
	if n > MaxIntentBytes {
		return api.Errorf(api.CodeBadRequest, "intent %s: %d bytes, at most %d", in.Key(), n, MaxIntentBytes)
	}
	_, held := s.items[in.Key()]
	if !held && len(s.items) >= MaxIntents {
		return api.Errorf(api.CodeTooBusy, "the mesh keeps %d intents already, the most it keeps; delete some first", MaxIntents)
	}
	if s.bytes-s.sizes[in.Key()]+n > MaxBytes {
		return api.Errorf(api.CodeTooBusy, "the mesh's intents would take %d bytes, over the %d it keeps; delete some first", s.bytes-s.sizes[in.Key()]+n, MaxBytes)
	}
	return nil
}

func (s *Store) setLocked(in api.Intent) {
	n := size(in)
	s.bytes += n - s.sizes[in.Key()]
	s.sizes[in.Key()] = n
	s.items[in.Key()] = clone(in)
}

func (s *Store) dropLocked(key string) {
	s.bytes -= s.sizes[key]
	delete(s.sizes, key)
	delete(s.items, key)
}

// pruneLocked drops the tombstones older than Horizon and reports whether it dropped any.
func (s *Store) pruneLocked(now time.Time) bool {
	pruned := false
	for key, in := range s.items {
		if in.Deleted && now.Sub(in.UpdatedAt) > Horizon {
			s.dropLocked(key)
			pruned = true
		}
	}
	return pruned
}

// settledLocked: this member's view has been continuous for over Horizon.
func (s *Store) settledLocked(now time.Time) bool { return now.Sub(s.since) > Horizon }

// tidyLocked drops the aged tombstones and notes in the file, hourly, that this member runs
// (the keeper reads All every tick): a member restarted within Horizon stays settled.
func (s *Store) tidyLocked(now time.Time) {
	if s.pruneLocked(now) || (s.path != "" && now.Sub(s.seen) > time.Hour) {
		if err := s.saveLocked(); err != nil {
			return // the next look tries again; only settling after a restart depends on it
		}
	}
}

// Merge takes intents from another member (one gossiped, or a whole set) and returns those that
// were news, each in its wire form to gossip on. Invalid ones are dropped.
func (s *Store) Merge(b []byte) (news map[string][]byte, err error) {
	w, err := decode(b)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	changed := s.pruneLocked(now)
	won := s.mergeLocked(w, now)
	if w.Full && w.Settled {
		// (After merging it: settled first, this member would refuse the set's old intents.)
		// A settled member's whole set: the intents it lacks that were last edited over
		// Horizon ago were deleted there (their tombstones dropped), or never reached it.
		changed = s.dropForgottenLocked(w.Intents, now) || changed
		if !s.settledLocked(now) {
			s.since = now.Add(-Horizon - time.Second) // its view is now the settled one's
			changed = true                            // saved
		}
	}
	if len(won) == 0 && !changed {
		s.tidyLocked(now)
		return nil, nil
	}
	if err := s.saveLocked(); err != nil {
		return nil, err
	}
	signal(s.changed)
	news = make(map[string][]byte, len(won))
	for _, in := range won {
		news[in.Key()] = s.encodeLocked([]api.Intent{in}, false)
	}
	return news, nil
}

// dropForgottenLocked drops the live intents last edited over Horizon ago that set lacks.
func (s *Store) dropForgottenLocked(set []api.Intent, now time.Time) bool {
	has := make(map[string]bool, len(set))
	for _, in := range set {
		has[in.Key()] = true
	}
	dropped := false
	for key, in := range s.items {
		if !has[key] && !in.Deleted && now.Sub(in.UpdatedAt) > Horizon {
			s.dropLocked(key)
			dropped = true
		}
	}
	return dropped
}

// mergeLocked keeps each intent newer than the one held and returns those kept.
func (s *Store) mergeLocked(w wire, now time.Time) []api.Intent {
	var won []api.Intent
	for _, in := range w.Intents {
		if check(&in) != nil {
			continue
		}
		s.clock = max(s.clock, in.Version)
		held, ok := s.items[in.Key()]
		aged := now.Sub(in.UpdatedAt) > Horizon
		switch {
		case ok && !in.Newer(held):
			continue
		case aged && in.Deleted:
			continue // dropped by now everywhere in touch
		case aged && !ok && !in.Deleted && s.settledLocked(now):
			continue // perhaps deleted, its tombstone dropped: see the package comment
		case s.roomLocked(in) != nil:
			continue
		}
		s.setLocked(in)
		won = append(won, in)
	}
	return won
}

// Full is the whole set's wire form, for a push/pull.
func (s *Store) Full() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.tidyLocked(now)
	return s.encodeLocked(s.allLocked(), true)
}

func (s *Store) encodeLocked(ins []api.Intent, full bool) []byte {
	return encode(wire{Settled: s.settledLocked(s.now()), Full: full, Intents: ins})
}

func (s *Store) saveLocked() error {
	if s.path == "" {
		return nil
	}
	now := s.now()
	b, err := json.MarshalIndent(saved{Seen: now, Since: s.since, Intents: s.allLocked()}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("saving intents: %w", err)
	}
	s.seen = now
	return nil
}

func encode(w wire) []byte {
	b, _ := json.Marshal(w) // plain data: cannot fail
	return append([]byte{wireVersion}, b...)
}

// maxWire bounds a decoded wire form, so a hostile one cannot balloon.
const maxWire = 2 * MaxBytes

// decode reads a wire form. Intents are checked by Merge, not here.
func decode(b []byte) (wire, error) {
	var w wire
	switch {
	case len(b) == 0:
		return w, errors.New("intents: empty")
	case b[0] != wireVersion:
		return w, fmt.Errorf("intents: unknown encoding %d", b[0])
	case len(b) > maxWire:
		return w, fmt.Errorf("intents: over %d bytes", maxWire)
	}
	if err := json.Unmarshal(b[1:], &w); err != nil {
		return w, fmt.Errorf("intents: %w", err)
	}
	if len(w.Intents) > MaxIntents {
		return w, fmt.Errorf("intents: %d, at most %d", len(w.Intents), MaxIntents)
	}
	return w, nil
}

func size(in api.Intent) int {
	b, _ := json.Marshal(in) // plain data: cannot fail
	return len(b)
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
	if err := api.CheckLabels(in.Labels); err != nil {
		return api.Errorf(api.CodeBadRequest, "intent %s: %v", in.Key(), err)
	}
	if !in.Deleted {
		least := 1
		if in.Alias {
			least = 0 // placed on demand
		}
		in.Replicas = max(least, min(in.Replicas, api.MaxReplicas))
		if in.MaxReplicas != 0 {
			in.MaxReplicas = max(in.Replicas, min(in.MaxReplicas, api.MaxReplicas))
		}
	}
	return nil
}

func clone(in api.Intent) api.Intent {
	in.Args = slices.Clone(in.Args)
	in.Hosts = slices.Clone(in.Hosts)
	in.Labels = maps.Clone(in.Labels)
	return in
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
