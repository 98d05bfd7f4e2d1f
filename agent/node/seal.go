package node

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/atomicfile"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh/discovery"
)

// KeyFile is the agent's leaf key in its state dir (mode 0600). It outlives restarts, so the
// key a node gossips stays the one its peers know.
const KeyFile = "seal.key"

// Identity is a program's side of the sealed channel: the mesh CA derived from j, and a leaf
// for name in role, signed with the key kept in dir (made there on first use); dir "" makes a
// key for this process alone (a console). apiAddr's host goes into the leaf for ordinary HTTPS
// clients to check.
func Identity(j api.Join, name, role, dir, apiAddr string) (*seal.Identity, error) {
	ca, err := seal.NewCA(j.MeshID, j.Secret)
	if err != nil {
		return nil, err
	}
	var key ed25519.PrivateKey
	if dir == "" {
		key, err = seal.NewKey()
	} else {
		key, err = loadKey(filepath.Join(dir, KeyFile))
	}
	if err != nil {
		return nil, err
	}
	// The names an HTTPS client may use for the agent: its address, and its mDNS name, which the
	// agent answers for itself.
	hosts := []string{strings.TrimSuffix(discovery.MDNSHostName(name), ".")}
	if h, _, err := net.SplitHostPort(apiAddr); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	return ca.Identity(name, role, key, hosts...)
}

// loadKey reads the leaf key at path, or makes and writes one when there is none.
func loadKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		k, err := seal.ParseKey(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (delete it and the agent makes a new key)", path, err)
		}
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	k, err := seal.NewKey()
	if err != nil {
		return nil, err
	}
	b, err = seal.MarshalKey(k)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("writing the sealed channel's key: %w", err)
	}
	return k, nil
}

// refusalRecent is how long a refused handshake stays a finding.
const refusalRecent = 10 * time.Minute

// refusals is the doctor's finding about handshakes l refused for a certificate lately: a host
// of another mesh, one with an old join string, or a client without the mesh's CA.
func refusals(l *seal.Listener, node string, now time.Time) []api.Finding {
	last := l.LastRefused()
	if last == nil || now.Sub(last.At) > refusalRecent {
		return nil
	}
	n, _ := l.Refused()
	from, _, err := net.SplitHostPort(last.From)
	if err != nil {
		from = last.From
	}
	return []api.Finding{{
		Severity: api.SeverityWarning,
		Problem:  fmt.Sprintf("%s refused TLS handshakes on its API port from %s: a program there holds no certificate of this mesh, or does not trust its CA (a host of another mesh, or with an old join string)", node, from),
		Detail:   fmt.Sprintf("%d handshake(s) refused since the start, the last %s ago: %s", n, now.Sub(last.At).Round(time.Second), api.Printable(last.Err)),
		Fix:      fmt.Sprintf("give the host at %s this mesh's join string (llmkube-agent join), or its HTTPS client the mesh's CA (llmkube-agent ca)", from),
	}}
}
