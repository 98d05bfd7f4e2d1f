// Package discovery finds the peers a new member should join: by mDNS on the LAN, from static
// --join seeds, and from the peers this host knew last time. It only finds candidates; memberlist
// does the joining and owns liveness (mDNS goodbyes get lost, so a vanished record proves nothing).
//
// Every source sits behind the small Source interface so the mesh core can combine them with
// Multi and a doctor can ask each one why a peer might be invisible (Findings).
package discovery

import (
	"context"
	"errors"
	"sort"
	"sync"

	"github.com/llmkube/mesh/agent/api"
)

// Ways a peer was found, in Peer.Via.
const (
	ViaMDNS      = "mdns"
	ViaSeed      = "seed"
	ViaLastKnown = "last-known"
)

// Severities of a Finding (api's).
const (
	SeverityError   = api.SeverityError
	SeverityWarning = api.SeverityWarning
	SeverityInfo    = api.SeverityInfo
)

// Peer is a candidate to join. Seeds and last-known peers know only GossipAddr; mDNS peers
// carry everything their records said.
type Peer struct {
	Node       string `json:"node,omitempty"`
	MeshHash   string `json:"mesh_hash,omitempty"`
	GossipAddr string `json:"gossip_addr"` // ip:port, already resolved
	APIAddr    string `json:"api_addr,omitempty"`
	Via        string `json:"via"`
	// OnLink: mDNS only, GossipAddr is on a subnet of the interfaces mDNS listens on, as a LAN
	// peer's address is. A forged answer may name any address; the mesh prefers these.
	OnLink bool `json:"on_link,omitempty"`
}

// Finding is a reason discovery may not be working, with what to do about it: the doctor's
// api.Finding.
type Finding = api.Finding

// Source finds peers.
type Source interface {
	// Run finds peers until ctx ends, calling found for every new or changed peer (debounced,
	// each peer reported once until it changes). found is never called concurrently by one
	// Source. Run returns nil when ctx ends: trouble along the way becomes a Finding, never an
	// error, so a discovery problem never stops an agent.
	Run(ctx context.Context, found func(Peer)) error
	// Findings are the source's current diagnoses; safe to call at any time, from any goroutine.
	Findings() []Finding
}

// Multi runs several sources as one: found is serialised across them and Findings is the
// concatenation of theirs, in the order given.
func Multi(srcs ...Source) Source { return multi(srcs) }

type multi []Source

func (m multi) Run(ctx context.Context, found func(Peer)) error {
	var mu sync.Mutex
	serial := func(p Peer) {
		mu.Lock()
		defer mu.Unlock()
		found(p)
	}
	errs := make([]error, len(m))
	var wg sync.WaitGroup
	for i, s := range m {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Run(ctx, serial)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (m multi) Findings() []Finding {
	var out []Finding
	for _, s := range m {
		out = append(out, s.Findings()...)
	}
	return out
}

// findings is a concurrency-safe set of findings keyed by what they are about, so a condition
// that clears (an interface comes up, a seed resolves) removes its finding.
type findings struct {
	mu sync.Mutex
	m  map[string]Finding
}

func (f *findings) set(key string, x Finding) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]Finding{}
	}
	f.m[key] = x
}

func (f *findings) clear(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
}

// list returns the findings sorted by key, so reports are stable.
func (f *findings) list() []Finding {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.m))
	for k := range f.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Finding, 0, len(keys))
	for _, k := range keys {
		out = append(out, f.m[k])
	}
	return out
}
