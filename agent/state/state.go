// Package state keeps what an agent must remember across restarts — its identity and its
// placements — in one JSON document in the state dir, written atomically so a crash at any
// moment leaves either the old document or the new one, never half of either.
package state

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/atomicfile"
)

// Version is the state document's format version. Readers refuse newer versions rather than
// silently dropping what they do not understand.
const Version = 1

// FileName is the state document inside the state dir.
const FileName = "state.json"

// MaxSize bounds what Load reads: a state file is a few KiB; anything near this is damage.
// Save writes nothing larger, so a file the agent wrote always loads.
const MaxSize = 16 << 20

// Identity is who this agent is in the mesh.
type Identity struct {
	// NodeID is random, made once per state dir. Copying a state dir copies it, which is why
	// node names, not ids, are what the mesh requires to be unique.
	NodeID    string    `json:"node_id"`
	NodeName  string    `json:"node_name"`
	CreatedAt time.Time `json:"created_at"`
}

// State is the whole persisted document.
type State struct {
	Version    int             `json:"version"`
	Identity   Identity        `json:"identity"`
	Placements []api.Placement `json:"placements"`
}

// NewNodeID returns a fresh random node id (16 hex digits).
func NewNodeID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making node id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Decode parses and validates a state document. It never returns a partly valid state: a
// damaged document is an error naming what is wrong, so the caller can refuse to start instead
// of overwriting what the operator may still want.
func Decode(data []byte) (State, error) {
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("not a state document: %w", err)
	}
	if s.Version < 1 {
		return State{}, fmt.Errorf("state version %d: want 1..%d", s.Version, Version)
	}
	if s.Version > Version {
		return State{}, fmt.Errorf("state version %d was written by a newer agent (this one reads up to %d)", s.Version, Version)
	}
	seen := make(map[string]bool, len(s.Placements))
	for i, p := range s.Placements {
		switch {
		case p.ID == "":
			return State{}, fmt.Errorf("placement %d has no id", i)
		case seen[p.ID]:
			return State{}, fmt.Errorf("placement id %q appears twice", p.ID)
		case !p.Runtime.Valid() && (p.Runtime != api.RuntimeRPCServer || p.Part == nil): // a split's part runs on rpc-server
			return State{}, fmt.Errorf("placement %s: unknown runtime %q", p.ID, p.Runtime)
		case p.Source == "":
			return State{}, fmt.Errorf("placement %s has no source", p.ID)
		}
		seen[p.ID] = true
	}
	return s, nil
}

// Encode renders a state document.
func Encode(s State) ([]byte, error) {
	s.Version = Version
	if s.Placements == nil {
		s.Placements = []api.Placement{}
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Dir is an open state dir. Only one agent at a time may hold it: two agents sharing one
// would overwrite each other's placements and fight over the same engines.
type Dir struct {
	path string
	lock *os.File
}

// Open creates the state dir if needed (0700) and takes its lock.
func Open(path string) (*Dir, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(abs, "agent.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir lock: %w", err)
	}
	if err := lockFile(lf); err != nil {
		lf.Close()
		return nil, fmt.Errorf("state dir %s is in use by another llmkube-agent (%w): give each agent its own --state-dir", abs, err)
	}
	return &Dir{path: abs, lock: lf}, nil
}

// Path is the state dir's absolute path.
func (d *Dir) Path() string { return d.path }

// Close releases the lock.
func (d *Dir) Close() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close() // closing the descriptor drops the flock
	d.lock = nil
	return err
}

// Load reads the state document. A missing document is a fresh state dir (ok false, no error).
func (d *Dir) Load() (s State, ok bool, err error) {
	name := filepath.Join(d.path, FileName)
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return State{Version: Version}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return State{}, false, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(data) > MaxSize {
		return State{}, false, fmt.Errorf("%s is larger than %d bytes: not a state document", name, MaxSize)
	}
	s, err = Decode(data)
	if err != nil {
		return State{}, false, fmt.Errorf("%s: %w (move it aside to start afresh; nothing was changed)", name, err)
	}
	return s, true, nil
}

// ErrTooLarge is returned by Save for a document Load would refuse: nothing is written, so
// the file on disk always loads.
var ErrTooLarge = errors.New("state document over the size Load accepts")

// Save writes the state document atomically.
func (d *Dir) Save(s State) error {
	b, err := Encode(s)
	if err != nil {
		return err
	}
	if len(b) > MaxSize {
		return fmt.Errorf("%w (%d bytes, the limit is %d)", ErrTooLarge, len(b), MaxSize)
	}
	return atomicfile.WriteFile(filepath.Join(d.path, FileName), b, 0o600)
}
