package ollama

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/llmkube/mesh/engines/download"
)

// The registry and models-folder facts an agent needs to serve its daemon's models to its peers
// and to pull a peer's model through a mirror of the registry API.

// DefaultRegistryHost is the registry a name without a host comes from: its manifests are kept
// under manifests/<this>/ in the models folder.
const DefaultRegistryHost = "registry.ollama.ai"

// MaxManifest bounds a manifest read from a peer, a registry or the models folder: a few layers'
// digests and sizes.
const MaxManifest = 1 << 20

// Name is a model's name split as the registry's paths use it: namespace/model:tag.
type Name struct {
	Namespace, Model, Tag string
}

func (n Name) String() string { return n.Namespace + "/" + n.Model + ":" + n.Tag }

// ParseName splits an ollama:// name ("qwen2:1.5b", "user/model:tag", "model": tag latest,
// namespace library). Each part must be a name the registry and the models folder take as one
// path element: letters, digits, '.', '-' and '_', not starting with '.' (no "..").
func ParseName(ref string) (Name, error) {
	n := Name{Namespace: "library", Tag: "latest"}
	rest := strings.TrimPrefix(strings.TrimSpace(ref), DefaultRegistryHost+"/")
	if i := strings.LastIndex(rest, ":"); i >= 0 && !strings.Contains(rest[i:], "/") {
		rest, n.Tag = rest[:i], rest[i+1:]
	}
	switch parts := strings.Split(rest, "/"); len(parts) {
	case 1:
		n.Model = parts[0]
	case 2:
		n.Namespace, n.Model = parts[0], parts[1]
	default:
		return Name{}, fmt.Errorf("Ollama model name %.100q: want [namespace/]model[:tag]", ref)
	}
	for _, p := range []string{n.Namespace, n.Model, n.Tag} {
		if !pathElement(p) {
			return Name{}, fmt.Errorf("Ollama model name %.100q: %.100q is not a name part (letters, digits, '.', '-', '_'; not starting with '.')", ref, p)
		}
	}
	n.Namespace, n.Model = strings.ToLower(n.Namespace), strings.ToLower(n.Model)
	return n, nil
}

// pathElement accepts one safe path element of at most 128 characters.
func pathElement(s string) bool {
	if s == "" || len(s) > 128 || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// RegistryRequest is what a registry API path asks for: a manifest of Name, or the blob with
// digest SHA256 (of the repository Name names).
type RegistryRequest struct {
	Name   Name
	SHA256 string // "" for a manifest
}

// ParseRegistryPath reads /v2/<namespace>/<model>/manifests/<tag> and
// /v2/<namespace>/<model>/blobs/sha256:<hex>, the paths Ollama's pull asks of a registry.
func ParseRegistryPath(p string) (RegistryRequest, error) {
	rest, ok := strings.CutPrefix(p, "/v2/")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 4 {
		return RegistryRequest{}, fmt.Errorf("registry path %.120q: want /v2/<namespace>/<model>/manifests/<tag> or …/blobs/sha256:<digest>", p)
	}
	ns, model, kind, last := parts[0], parts[1], parts[2], parts[3]
	switch kind {
	case "manifests":
		n, err := ParseName(ns + "/" + model + ":" + last)
		if err != nil || strings.Contains(ns+model, ":") {
			return RegistryRequest{}, fmt.Errorf("registry path %.120q: not a model's manifest", p)
		}
		return RegistryRequest{Name: n}, nil
	case "blobs":
		n, err := ParseName(ns + "/" + model)
		if err != nil || strings.Contains(ns+model, ":") {
			return RegistryRequest{}, fmt.Errorf("registry path %.120q: not a model's blob", p)
		}
		sum, err := ParseDigest(last)
		if err != nil {
			return RegistryRequest{}, err
		}
		n.Tag = ""
		return RegistryRequest{Name: n, SHA256: sum}, nil
	}
	return RegistryRequest{}, fmt.Errorf("registry path %.120q: want …/manifests/<tag> or …/blobs/<digest>", p)
}

// ParseDigest reads a registry digest, "sha256:<64 lowercase hex>", as its hex.
func ParseDigest(d string) (string, error) {
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok {
		return "", fmt.Errorf("digest %.100q: want sha256:<64 hex digits>", d)
	}
	return download.ParseSHA256(hex)
}

// Layer is a blob a manifest names.
type Layer struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// Manifest is a model's registry manifest (Docker distribution v2, Ollama's media types).
type Manifest struct {
	SchemaVersion int     `json:"schemaVersion"`
	MediaType     string  `json:"mediaType"`
	Config        Layer   `json:"config"`
	Layers        []Layer `json:"layers"`
}

// ParseManifest reads a manifest and checks what a pull relies on: every blob it names (the
// config and each layer) has a sha256 digest and a size that is not negative, and it names at
// least one layer. It may come from a peer: the digests are what every blob is then checked
// against.
func ParseManifest(b []byte) (Manifest, error) {
	if len(b) > MaxManifest {
		return Manifest{}, fmt.Errorf("manifest of %d bytes: more than the %d a manifest takes", len(b), MaxManifest)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest: %w", err)
	}
	if len(m.Layers) == 0 {
		return Manifest{}, errors.New("manifest names no layer")
	}
	for _, l := range append([]Layer{m.Config}, m.Layers...) {
		if _, err := ParseDigest(l.Digest); err != nil {
			return Manifest{}, fmt.Errorf("manifest: %w", err)
		}
		if l.Size < 0 {
			return Manifest{}, fmt.Errorf("manifest: blob %s has a negative size", l.Digest)
		}
	}
	return m, nil
}

// Blobs are the hex digests of the blobs the manifest names, the config first.
func (m Manifest) Blobs() []string {
	var out []string
	for _, l := range append([]Layer{m.Config}, m.Layers...) {
		out = append(out, strings.TrimPrefix(l.Digest, "sha256:"))
	}
	return out
}

// ManifestFile is where a daemon keeps n's manifest in its models folder dir (the default
// registry's).
func ManifestFile(dir string, n Name) string {
	return filepath.Join(dir, "manifests", DefaultRegistryHost, n.Namespace, n.Model, n.Tag)
}

// ReadManifest reads n's manifest from the models folder dir, checked as ParseManifest does.
func ReadManifest(dir string, n Name) ([]byte, Manifest, error) {
	f, err := os.Open(ManifestFile(dir, n))
	if err != nil {
		return nil, Manifest{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxManifest+1))
	if err != nil {
		return nil, Manifest{}, err
	}
	m, err := ParseManifest(b)
	return b, m, err
}

// BlobFile is where a daemon keeps the blob with hex digest sum in its models folder dir: the
// file's name is its content's digest.
func BlobFile(dir, sum string) string {
	return filepath.Join(dir, "blobs", "sha256-"+sum)
}

// Blob is a blob the models folder holds.
type Blob struct {
	Path   string
	Size   int64
	SHA256 string
}

// readable reports whether this process may read the file at p.
func readable(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// Blobs lists the models folder's blobs by the digest their names give (a daemon verifies
// each blob before it names it so; a peer copying one verifies it again): none when the
// folder cannot be read. Half-pulled blobs ("-partial") and blobs this process may not read are
// not listed.
func Blobs(dir string) []Blob {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(dir, "blobs"))
	if err != nil {
		return nil
	}
	var out []Blob
	for _, e := range entries {
		hex, ok := strings.CutPrefix(e.Name(), "sha256-")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if _, err := download.ParseSHA256(hex); err != nil {
			continue
		}
		p := filepath.Join(dir, "blobs", e.Name())
		fi, err := e.Info()
		if err != nil || !readable(p) {
			continue // not one this host could serve: not gossiped as held
		}
		out = append(out, Blob{Path: p, Size: fi.Size(), SHA256: hex})
	}
	return out
}
