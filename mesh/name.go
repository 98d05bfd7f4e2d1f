package mesh

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/llmkube/mesh/internal/atomicfile"
)

// nodeNameFile holds a node's name under its state dir, so the name survives restarts.
const nodeNameFile = "node-name"

// maxNodeName bounds node names; they appear in every message and in metadata-less places.
const maxNodeName = 63

var nodeNameRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// validNodeName reports whether name can name a node: a DNS label.
func validNodeName(name string) error {
	if !nodeNameRe.MatchString(name) {
		return fmt.Errorf("node name %q: use 1-63 lower-case letters, digits and '-', not starting or ending with '-'", name)
	}
	return nil
}

// resolveNodeName returns the node's name: the configured one, else the one saved in
// stateDir, else a new one made from the hostname plus a random suffix (and saved). The suffix
// is what makes names unique: Raspberry Pis flashed from one image all call themselves
// "raspberrypi". A state dir copied to another host copies its name too; memberlist then sees
// two nodes with one name, which the mesh reports (NotifyConflict) rather than merging.
func resolveNodeName(configured, stateDir, hostname string) (string, error) {
	if configured != "" {
		return configured, validNodeName(configured)
	}
	path := ""
	if stateDir != "" {
		path = filepath.Join(stateDir, nodeNameFile)
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			name := strings.TrimSpace(string(b))
			if err := validNodeName(name); err != nil {
				return "", fmt.Errorf("%s: %w (fix or delete the file)", path, err)
			}
			return name, nil
		case !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("reading node name: %w", err)
		}
	}
	var suffix [3]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", err
	}
	base := sanitizeHostname(hostname)
	name := base + "-" + hex.EncodeToString(suffix[:])
	if path != "" {
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return "", fmt.Errorf("saving node name: %w", err)
		}
		if err := atomicfile.WriteFile(path, []byte(name+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("saving node name: %w", err)
		}
	}
	return name, nil
}

// sanitizeHostname turns a hostname into the start of a node name: its first label, lower
// case, [a-z0-9-] only, at most 48 characters (room for the suffix).
func sanitizeHostname(h string) string {
	h, _, _ = strings.Cut(strings.ToLower(h), ".")
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 48 {
		s = strings.TrimRight(s[:48], "-")
	}
	if s == "" {
		s = "host"
	}
	return s
}
