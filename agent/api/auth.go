package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// SecretSize is the size of a mesh secret in bytes.
const SecretSize = 32

// A mesh is one secret and one id. Everything else is derived from the secret with HMAC-SHA256
// under distinct labels, so a leaked derived value (a token, the gossip key) never reveals the
// secret or another derived value.
const (
	labelGossip    = "llmkube/gossip-key/v1"
	labelAdmin     = "llmkube/admin-token/v1"
	labelNamespace = "llmkube/namespace-token/v1/"
	labelMeshHash  = "llmkube/mesh-id/v1/"
	labelGossipTag = "llmkube/gossip-label/v1/"
)

const (
	joinPrefix  = "llmk1:"
	adminPrefix = "llmk_admin_"
	nsPrefix    = "llmk_ns_"
)

var (
	meshIDRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
	namespaceRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// ValidMeshID reports whether id can name a mesh: 1–32 of [a-z0-9-], starting alphanumeric.
func ValidMeshID(id string) error {
	if !meshIDRe.MatchString(id) {
		return fmt.Errorf("mesh id %q: use 1-32 lower-case letters, digits and '-', starting with a letter or digit", Clip(id, maxEcho))
	}
	return nil
}

// ValidNamespace reports whether ns can name a namespace (a DNS label).
func ValidNamespace(ns string) error {
	if !namespaceRe.MatchString(ns) {
		return fmt.Errorf("namespace %q: use 1-63 lower-case letters, digits and '-', not starting or ending with '-'", Clip(ns, maxEcho))
	}
	return nil
}

// maxEcho bounds a name echoed in an error: a little past the longest valid one, enough to
// see what was sent, never the 30 kB a caller may send as a "namespace".
const maxEcho = 80

// Join is what a host needs to enter a mesh: its id, its secret, and optional seed addresses.
type Join struct {
	MeshID string
	Secret []byte
	Seeds  []string // gossip host:port
}

// NewMeshID returns a fresh mesh id with 64 random bits, "mesh-" and 16 hex digits: mDNS
// announces a hash of the id, and an id that can be guessed names the mesh to anyone who
// hashes the guesses.
func NewMeshID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making mesh id: %w", err)
	}
	return "mesh-" + hex.EncodeToString(b), nil
}

// NewSecret returns a fresh random mesh secret.
func NewSecret() ([]byte, error) {
	s := make([]byte, SecretSize)
	if _, err := rand.Read(s); err != nil {
		return nil, fmt.Errorf("making mesh secret: %w", err)
	}
	return s, nil
}

// String encodes the join string: llmk1:<mesh id>:<secret, base64url>[@seed,seed].
func (j Join) String() string {
	s := joinPrefix + j.MeshID + ":" + base64.RawURLEncoding.EncodeToString(j.Secret)
	if len(j.Seeds) > 0 {
		s += "@" + strings.Join(j.Seeds, ",")
	}
	return s
}

// JoinDoc is the join file an agent keeps in its state folder (mesh.json).
type JoinDoc struct {
	Join string `json:"join"`
}

// JoinFileText is the join string a join file holds: the JSON document an agent saves
// (JoinDoc), or the bare join string. The agent and the console read --join-file alike.
func JoinFileText(b []byte) string {
	var doc JoinDoc
	if json.Unmarshal(b, &doc) == nil && doc.Join != "" {
		return strings.TrimSpace(doc.Join)
	}
	return strings.TrimSpace(string(b))
}

// ParseJoin decodes a join string made by Join.String.
func ParseJoin(s string) (Join, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, joinPrefix)
	if !ok {
		return Join{}, errors.New("join string: must start with " + joinPrefix + " (made by `llmkube-agent init`)")
	}
	rest, seeds, hasSeeds := strings.Cut(rest, "@")
	id, secret, ok := strings.Cut(rest, ":")
	if !ok {
		return Join{}, errors.New("join string: missing ':' between mesh id and secret")
	}
	if err := ValidMeshID(id); err != nil {
		return Join{}, fmt.Errorf("join string: %w", err)
	}
	key, err := base64.RawURLEncoding.DecodeString(secret)
	if err != nil {
		return Join{}, fmt.Errorf("join string: secret is not base64url: %w", err)
	}
	if len(key) != SecretSize {
		return Join{}, fmt.Errorf("join string: secret has %d bytes, want %d", len(key), SecretSize)
	}
	j := Join{MeshID: id, Secret: key}
	if hasSeeds {
		for _, a := range strings.Split(seeds, ",") {
			if a = strings.TrimSpace(a); a != "" {
				j.Seeds = append(j.Seeds, a)
			}
		}
	}
	return j, nil
}

func mac(key []byte, label string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(label))
	return h.Sum(nil)
}

// GossipKey is memberlist's 32-byte encryption key for the mesh.
func GossipKey(secret []byte) []byte { return mac(secret, labelGossip) }

// GossipLabel is memberlist's label for the mesh: the header every gossip packet and stream
// carries in clear, which memberlist checks before anything else. It is derived from the secret
// (and the mesh id, so two meshes that share a secret still never mix), never the id itself: a
// neighbour without the secret cannot read which mesh a packet is for, nor forge traffic that
// gets past the label check.
func GossipLabel(meshID string, secret []byte) string {
	return "llmk-" + hex.EncodeToString(mac(secret, labelGossipTag+meshID)[:8])
}

// MeshIDHash is what mDNS records carry instead of the mesh id: it tells meshes apart without
// naming them to the LAN.
func MeshIDHash(meshID string) string {
	sum := sha256.Sum256([]byte(labelMeshHash + meshID))
	return hex.EncodeToString(sum[:8])
}

// AdminToken is the mesh's admin API token.
func AdminToken(secret []byte) string {
	return adminPrefix + hex.EncodeToString(mac(secret, labelAdmin))
}

// NamespaceToken mints the token of one namespace from the admin token, so anyone holding the
// admin token (not only the secret) can hand out namespace tokens.
func NamespaceToken(adminToken, namespace string) (string, error) {
	if err := ValidNamespace(namespace); err != nil {
		return "", err
	}
	if !strings.HasPrefix(adminToken, adminPrefix) {
		return "", errors.New("not an admin token")
	}
	return nsPrefix + namespace + "_" + hex.EncodeToString(mac([]byte(adminToken), labelNamespace+namespace)), nil
}

// Principal is who a token speaks for.
type Principal struct {
	Admin     bool
	Namespace string // set for namespace tokens
}

// Allows reports whether the principal may see and use placements of namespace ns.
func (p Principal) Allows(ns string) bool { return p.Admin || p.Namespace == ns }

// Claim reads whom token says it speaks for from its form alone, checking nothing else: the
// token that principal must present is then AdminToken or NamespaceToken, and Match compares.
func Claim(token string) (Principal, error) {
	if strings.HasPrefix(token, adminPrefix) {
		return Principal{Admin: true}, nil
	}
	if rest, ok := strings.CutPrefix(token, nsPrefix); ok {
		i := strings.LastIndexByte(rest, '_')
		if i <= 0 {
			return Principal{}, errors.New("malformed namespace token")
		}
		return Principal{Namespace: rest[:i]}, nil
	}
	return Principal{}, errors.New("unknown token kind")
}

// Match checks, in constant time, that token is want, the token p must present.
func (p Principal) Match(token, want string) error {
	if subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1 {
		return nil
	}
	if p.Admin {
		return errors.New("invalid admin token")
	}
	return errors.New("invalid namespace token")
}

// Verify checks a bearer token against the mesh secret.
func Verify(secret []byte, token string) (Principal, error) {
	p, err := Claim(token)
	if err != nil {
		return Principal{}, err
	}
	want := AdminToken(secret)
	if !p.Admin {
		if want, err = NamespaceToken(want, p.Namespace); err != nil {
			return Principal{}, err
		}
	}
	if err := p.Match(token, want); err != nil {
		return Principal{}, err
	}
	return p, nil
}
