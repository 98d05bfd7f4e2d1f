package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// maxKVs and maxString bound what TrainedContext reads of a header, which is untrusted.
const (
	maxKVs    = 1 << 16
	maxString = 1 << 20
	maxArray  = 1 << 24
)

// TrainedContext reads a GGUF file's metadata for the context the model was trained for
// (<general.architecture>.context_length); 0 when the header does not say. A file that is not
// GGUF is an error. It reads only the header's metadata, skipping the rest.
func TrainedContext(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := &reader{r: bufio.NewReader(f)}
	if magic := string(r.bytes(4)); r.err == nil && magic != "GGUF" {
		return 0, fmt.Errorf("%s is not a GGUF file", path)
	}
	if v := r.u32(); r.err == nil && (v < 2 || v > 3) {
		return 0, fmt.Errorf("%s: GGUF version %d, want 2 or 3", path, v)
	}
	r.u64() // tensor count
	n := r.u64()
	if n > maxKVs {
		return 0, fmt.Errorf("%s: %d metadata entries", path, n)
	}
	var arch string
	lengths := map[string]uint64{}
	for i := uint64(0); i < n && r.err == nil; i++ {
		key := r.str()
		typ := r.u32()
		switch {
		case key == "general.architecture" && typ == typeString:
			arch = r.str()
		case strings.HasSuffix(key, ".context_length") && (typ == typeUint32 || typ == typeUint64):
			if typ == typeUint32 {
				lengths[key] = uint64(r.u32())
			} else {
				lengths[key] = r.u64()
			}
		default:
			r.skip(typ)
		}
	}
	if r.err != nil {
		return 0, fmt.Errorf("%s: reading the GGUF metadata: %w", path, r.err)
	}
	if l := lengths[arch+".context_length"]; l > 0 && l <= 1<<31-1 {
		return int(l), nil
	}
	return 0, nil
}

// reader reads GGUF's little-endian encoding, keeping the first error.
type reader struct {
	r   *bufio.Reader
	err error
}

// GGUF metadata value types beyond those the writer uses.
const typeUint64 = 10

// sizes of GGUF's fixed-size value types, by type id.
var fixedSize = map[uint32]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	b := make([]byte, n)
	_, r.err = io.ReadFull(r.r, b)
	return b
}

func (r *reader) u32() uint32 {
	if b := r.bytes(4); r.err == nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.bytes(8); r.err == nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) str() string {
	n := r.u64()
	if n > maxString {
		r.fail(fmt.Errorf("a %d-byte string", n))
		return ""
	}
	return string(r.bytes(int(n)))
}

func (r *reader) discard(n uint64) {
	if r.err == nil {
		_, r.err = r.r.Discard(int(n))
	}
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// skip passes over one value of type typ.
func (r *reader) skip(typ uint32) {
	switch {
	case typ == typeString:
		n := r.u64()
		if n > maxString {
			r.fail(fmt.Errorf("a %d-byte string", n))
		}
		r.discard(n)
	case typ == typeArray:
		elem, n := r.u32(), r.u64()
		if n > maxArray || elem == typeArray {
			r.fail(errors.New("an array too long, or of arrays"))
			return
		}
		if size, ok := fixedSize[elem]; ok {
			r.discard(n * uint64(size))
			return
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			r.skip(elem)
		}
	default:
		size, ok := fixedSize[typ]
		if !ok {
			r.fail(fmt.Errorf("unknown value type %d", typ))
			return
		}
		r.discard(uint64(size))
	}
}
