package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/llmkube/mesh/internal/atomicfile"
)

// lastKnownVersion is the file format version; a newer file is refused, never misread.
const lastKnownVersion = 1

// maxLastKnown bounds the file so a corrupted or hostile one cannot make us dial thousands of
// addresses; a LAN mesh has at most ~100 hosts.
const maxLastKnown = 512

type lastKnownFile struct {
	Version int      `json:"version"`
	Peers   []string `json:"peers"`
}

// LoadLastKnown reads the gossip addresses saved by SaveLastKnown. A missing file is (nil, nil):
// a first start. A file that is not ours, or is damaged, is a clear error and is left untouched.
func LoadLastKnown(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last-known peers: %w", err)
	}
	addrs, err := parseLastKnown(b)
	if err != nil {
		return nil, fmt.Errorf("last-known peers %s: %w", path, err)
	}
	return addrs, nil
}

func parseLastKnown(b []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var f lastKnownFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a last-known peers file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a last-known peers file: trailing data after the JSON object")
	}
	if f.Version != lastKnownVersion {
		return nil, fmt.Errorf("version %d, this build reads version %d", f.Version, lastKnownVersion)
	}
	if len(f.Peers) > maxLastKnown {
		return nil, fmt.Errorf("%d peers, at most %d are kept", len(f.Peers), maxLastKnown)
	}
	out := make([]string, 0, len(f.Peers))
	for _, a := range f.Peers {
		if _, _, err := ParseSeed(a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// SaveLastKnown writes addrs atomically (temp file, fsync, rename, fsync of the folder), so a
// crash leaves either the old list or the new one, never half of one. Invalid addresses are
// refused before anything is written.
func SaveLastKnown(path string, addrs []string) error {
	if len(addrs) > maxLastKnown {
		addrs = addrs[:maxLastKnown]
	}
	for _, a := range addrs {
		if _, _, err := ParseSeed(a); err != nil {
			return fmt.Errorf("saving last-known peers: %w", err)
		}
	}
	if addrs == nil {
		addrs = []string{}
	}
	b, err := json.MarshalIndent(lastKnownFile{Version: lastKnownVersion, Peers: addrs}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}

// ParseSeed checks a seed or peer address of the form host:port ("10.0.0.7:7946",
// "pi-kitchen.local:7946", "[fe80::1%eth0]:7946") and returns its parts, or a clear error.
func ParseSeed(addr string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("seed %q: want host:port (e.g. 10.0.0.7:7946 or pi.local:7946): %w", addr, err)
	}
	if host == "" {
		return "", "", fmt.Errorf("seed %q: the host is empty", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("seed %q: port %q is not a number from 1 to 65535", addr, port)
	}
	if ip := net.ParseIP(strings.SplitN(host, "%", 2)[0]); ip == nil {
		if err := validHostname(host); err != nil {
			return "", "", fmt.Errorf("seed %q: %w", addr, err)
		}
	}
	return host, port, nil
}

func validHostname(h string) error {
	name := strings.TrimSuffix(h, ".")
	if len(name) == 0 || len(name) > 253 {
		return fmt.Errorf("host name %q has a bad length", h)
	}
	for _, label := range strings.Split(name, ".") {
		if len(label) == 0 || len(label) > 63 {
			return fmt.Errorf("host name %q has an empty or over-long label", h)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return fmt.Errorf("host name %q: character %q is not allowed", h, c)
			}
		}
	}
	return nil
}
