package download

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/llmkube/mesh/internal/atomicfile"
)

// DigestSuffix names the record of a file's SHA-256 kept beside it: "<file>.sha256". A verified
// download writes it (it hashed every byte anyway), and the model store computes it for a file
// that has none, so a host knows what it can serve its peers by content without hashing again.
const DigestSuffix = ".sha256"

// ParseSHA256 checks a SHA-256 named on the wire (a URL path, a gossiped set): exactly 64
// lowercase hex digits. Anything else is refused, so one file has one name.
func ParseSHA256(s string) (string, error) {
	if len(s) != 2*sha256.Size {
		return "", fmt.Errorf("%.80q is not a sha256: want 64 lowercase hex digits, got %d characters", s, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", fmt.Errorf("%.80q is not a sha256: want 64 lowercase hex digits, character %d is not one", s, i+1)
		}
	}
	return s, nil
}

// Recorded is a file's digest as recorded beside it, with the length and modification time the
// file had then: a record that no longer fits the file is stale.
type Recorded struct {
	SHA256  string
	Size    int64
	ModTime int64 // Unix nanoseconds
}

// ReadDigest is the digest recorded beside path, if there is one and it still fits the file (its
// length and modification time): false otherwise.
func ReadDigest(path string) (Recorded, bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return Recorded{}, false
	}
	b, err := os.ReadFile(path + DigestSuffix)
	if err != nil || len(b) > 256 {
		return Recorded{}, false
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return Recorded{}, false
	}
	sum, err := ParseSHA256(f[0])
	if err != nil {
		return Recorded{}, false
	}
	size, err1 := strconv.ParseInt(f[1], 10, 64)
	mod, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || size != fi.Size() || mod != fi.ModTime().UnixNano() {
		return Recorded{}, false
	}
	return Recorded{SHA256: sum, Size: size, ModTime: mod}, true
}

// RecordDigest writes sum beside path, with the file's length and modification time now.
func RecordDigest(path, sum string) error {
	if _, err := ParseSHA256(sum); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%s %d %d\n", sum, fi.Size(), fi.ModTime().UnixNano())
	return atomicfile.WriteFile(path+DigestSuffix, []byte(line), 0o640)
}

// HashFile computes path's SHA-256 and records it beside the file: what a file that has no
// record (one copied in by hand, one downloaded by an older agent) costs once.
func HashFile(path string) (Recorded, error) {
	f, err := os.Open(path)
	if err != nil {
		return Recorded{}, err
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return Recorded{}, err
	}
	if !before.Mode().IsRegular() {
		return Recorded{}, errors.New(path + " is not a regular file")
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return Recorded{}, err
	}
	after, err := os.Stat(path)
	if err != nil {
		return Recorded{}, err
	}
	if after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		return Recorded{}, fmt.Errorf("%s changed while it was hashed", path)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := RecordDigest(path, sum); err != nil {
		return Recorded{}, err
	}
	return Recorded{SHA256: sum, Size: after.Size(), ModTime: after.ModTime().UnixNano()}, nil
}
