package api

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Intent is what a user asked the mesh to keep running: a placement request with a replica
// count, kept by every agent (gossiped, persisted), so it outlives the host that accepted it.
// Placements are how intents are met: the placements of the intent's namespace and model name
// from its source count as its replicas. GET /v1/intents.
//
// Concurrent edits: the one with the higher (Version, Origin) wins everywhere (last writer wins
// on a Lamport clock, node name breaking ties); a deletion is such an edit too (Deleted, a
// tombstone), so a deleted intent cannot come back from a member that missed the deletion.
type Intent struct {
	PlacementRequest
	// Need and Device are the size estimate the accepting agent made, so every agent ranks
	// hosts for it alike without sizing it again.
	Need   int64  `json:"need,omitempty"`
	Device string `json:"device,omitempty"`
	// Version is the Lamport clock of the edit, Origin the agent that made it.
	// Alias: Name is a mesh-wide name for Source, placed on the first request that names it
	// (Replicas 0 until then, 1 from then on).
	Alias     bool      `json:"alias,omitempty"`
	Version   uint64    `json:"version"`
	Origin    string    `json:"origin"`
	Deleted   bool      `json:"deleted,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// BusyInFlight is how many requests may be in flight on one replica before it is busy
// (Placement.BusySince): past it they queue at its engine.
const BusyInFlight = 4

// MaxReplicas bounds an intent's replica count: more than this is refused (and clamped when
// another member gossips it).
const MaxReplicas = 16

// Key names an intent in the mesh: its namespace and model name.
func (in Intent) Key() string { return IntentKey(in.Namespace, in.Name) }

// IntentKey is the key of the intent for model name in namespace ns.
func IntentKey(ns, name string) string { return ns + "/" + name }

// Newer reports whether in wins over o (see Intent).
func (in Intent) Newer(o Intent) bool {
	if in.Version != o.Version {
		return in.Version > o.Version
	}
	return strings.Compare(in.Origin, o.Origin) > 0
}

// Replica is one placement of an intent as the mesh sees it.
type Replica struct {
	Host      string         `json:"host"`
	Placement string         `json:"placement"`
	State     PlacementState `json:"state"`
	Liveness  Liveness       `json:"liveness"`
	// Counts: the replica counts toward the intent (its host is alive or only suspect, and the
	// placement is neither failed nor evicted).
	Counts bool `json:"counts"`
}

// IntentStatus is an intent with how it is met. GET /v1/intents.
type IntentStatus struct {
	Intent
	Has   int       `json:"has"`
	Where []Replica `json:"where,omitempty"`
	// Note says why it has fewer or more than it wants, and what is done about it, for people:
	// "pi5-b dead 12 s ago; re-placing on pi5-c".
	Note string `json:"note,omitempty"`
}

// CompareIntents orders intents by key.
func CompareIntents(a, b Intent) int { return cmp.Compare(a.Key(), b.Key()) }

// EventIntent is an intent changed, was met, or could not be met (its replicas placed or removed
// by the agents that keep it).
const EventIntent = "intent"

// IntentLine says an intent and how it is met in one line, for people: "qwen2.5:1.5b wants 2,
// has 1 (pi5-b dead 12s ago; re-placing on pi5-c)"; another namespace's model is named with it.
func IntentLine(st IntentStatus) string {
	name := st.Name
	if st.Namespace != DefaultNamespace {
		name = st.Namespace + "/" + name
	}
	line := name + " wants " + strconv.Itoa(st.Replicas) + ", has " + strconv.Itoa(st.Has)
	if st.Alias && st.Replicas == 0 {
		line = name + " is " + st.Source + ", placed on the first request"
	}
	if st.Note != "" {
		line += " (" + st.Note + ")"
	}
	return line
}

// AliasRequest is PUT /v1/aliases/{name}: the source the name stands for, in a namespace
// (the token's, or the default one, when empty).
type AliasRequest struct {
	Source    string `json:"source"`
	Namespace string `json:"namespace,omitempty"`
}

// Bounds of a host's labels and of those an intent requires: they ride every state document
// and every intent.
const (
	MaxLabels   = 16
	MaxLabelLen = 63
)

// ParseLabels reads key=value pairs (`--label k=v`, repeatable) and checks them.
func ParseLabels(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want key=value", Clip(p, 80))
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", Clip(k, 80))
		}
		out[k] = v
	}
	return out, CheckLabels(out)
}

// CheckLabels refuses more than MaxLabels labels, and keys or values that are empty (a key),
// longer than MaxLabelLen or not made of letters, digits and . _ - / : the values are compared
// and shown, so nothing needs sanitizing.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%d labels, at most %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if k == "" || !labelText(k) || !labelText(v) {
			return fmt.Errorf("label %q=%q: keys and values are up to %d letters, digits and . _ - / (a key not empty)", Clip(k, 80), Clip(v, 80), MaxLabelLen)
		}
	}
	return nil
}

func labelText(s string) bool {
	if len(s) > MaxLabelLen {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-/", c)
		if !ok {
			return false
		}
	}
	return true
}

// MissingLabel is the first (by key) of want that have does not carry, as "k=v"; "" when have
// carries them all.
func MissingLabel(have, want map[string]string) string {
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if v, ok := have[k]; !ok || v != want[k] {
			return k + "=" + want[k]
		}
	}
	return ""
}
