// Package statedoc is the codec of a node's state document: what does not fit in node metadata
// (the placement list with states and memory, engine health, measured tokens/s — an agent's
// whole api.Host). It encodes a document to its wire form (deflate-compressed JSON), decodes one
// that any member sent — bounded in size, sanitized and clamped, since it may be hostile — and
// names a document by the hash of its wire form. How documents travel between members, and
// which one a member keeps, is package mesh's (doc.go there).
package statedoc

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

const (
	Version = 1       // JSON layout of Doc; bumped only for incompatible changes
	wire    = 1       // first byte of an encoded document: deflate-compressed JSON follows
	maxSize = 4 << 20 // decompressed size limit: a hostile document cannot balloon
)

// Figures from other members may be absurd (a bug, or a compromised keyholder): sizes are
// clamped to MaxBytes (8 PiB) and counts to MaxCount, so that a console can add up the memory
// of a hundred hosts, or draw one, without overflowing. Node metadata is clamped the same.
const (
	MaxBytes = 1 << 53
	MaxCount = 1 << 20
)

// Doc is one node's state.
type Doc struct {
	V          int             `json:"v"`
	Node       string          `json:"node"`
	Gen        uint64          `json:"gen"`
	At         time.Time       `json:"at"`
	Host       *api.Host       `json:"host,omitempty"`
	Placements []api.Placement `json:"placements,omitempty"`
}

// Encode returns the wire form of d.
func Encode(d *Doc) ([]byte, error) {
	js, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encoding state document: %w", err)
	}
	var buf bytes.Buffer
	buf.WriteByte(wire)
	w := docWriters.Get().(*flate.Writer)
	defer docWriters.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(js); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// docWriters and docReaders keep deflate's state between documents: a writer is about 1 MB
// (its hash tables), a reader 40 kB, and a member encodes one on every change of its state that
// matters and decodes every document it learns. A pool keeps them while documents flow and
// lets the garbage collector have them when they stop, so an idle agent holds neither.
var (
	docWriters = sync.Pool{New: func() any {
		w, err := flate.NewWriter(nil, flate.BestCompression)
		if err != nil {
			panic(err) // only for a level out of range
		}
		return w
	}}
	docReaders = sync.Pool{New: func() any { return flate.NewReader(nil) }}
)

// Decode decodes a document's wire form from any member: unknown JSON fields are ignored,
// every string is made printable and every figure clamped (MaxBytes, MaxCount).
func Decode(b []byte) (*Doc, error) {
	if len(b) == 0 {
		return nil, errors.New("state document is empty")
	}
	if b[0] != wire {
		return nil, fmt.Errorf("state document: unknown encoding %d", b[0])
	}
	r := docReaders.Get().(io.ReadCloser)
	defer docReaders.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(b[1:]), nil); err != nil {
		return nil, fmt.Errorf("state document: %w", err)
	}
	js, err := io.ReadAll(io.LimitReader(r, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("state document: %w", err)
	}
	if len(js) > maxSize {
		return nil, fmt.Errorf("state document is over %d bytes", maxSize)
	}
	var d Doc
	if err := json.Unmarshal(js, &d); err != nil {
		return nil, fmt.Errorf("state document: %w", err)
	}
	switch {
	case d.V < 1:
		return nil, errors.New("state document: no version")
	case d.V > Version:
		return nil, fmt.Errorf("state document: version %d, this build reads %d", d.V, Version)
	case d.Node == "":
		return nil, errors.New("state document: no node name")
	}
	api.Sanitize(&d) // every string reaches some terminal
	clamp(&d)
	return &d, nil
}

// clamp bounds every figure of a document as node metadata is bounded: another member's
// numbers may be absurd, and none may overflow a sum or a drawing.
func clamp(d *Doc) {
	size := func(v *int64) { *v = max(0, min(*v, MaxBytes)) }
	count := func(v *int) { *v = max(0, min(*v, MaxCount)) }
	rate := func(v *float64) { *v = max(0, min(*v, 1e12)) }
	if h := d.Host; h != nil {
		for _, v := range []*int64{&h.Memory.Total, &h.Memory.Available, &h.Memory.Budget, &h.Memory.Committed, &h.Memory.Reserved, &h.Memory.CgroupLimit} {
			size(v)
		}
		for i := range h.Accelerators {
			size(&h.Accelerators[i].Memory)
		}
		count(&h.CPUs)
		count(&h.Placements)
		count(&h.PageSize)
	}
	for i := range d.Placements {
		p := &d.Placements[i]
		for _, v := range []*int64{&p.Memory.Bytes, &p.Memory.Weights, &p.Memory.KV, &p.Memory.Compute, &p.Memory.Overhead, &p.PulledBytes, &p.TotalBytes} {
			size(v)
		}
		count(&p.Context)
		count(&p.Restarts)
		p.Progress = max(0, min(p.Progress, 1))
		rate(&p.TTFTMillis)
		rate(&p.TokensPerS)
	}
}

// HashSize is how much of a SHA-256 names a document in metadata: 128 bits, so no member
// can make another document with the same name.
const HashSize = 16

// Hash names a document by its wire form.
func Hash(wire []byte) string {
	sum := sha256.Sum256(wire)
	return string(sum[:HashSize])
}
