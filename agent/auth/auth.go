// Package auth is the agent's side of the token contract in agent/api: it checks the bearer
// tokens of every request the agent serves, with what derives from the mesh secret kept.
package auth

import (
	"sync"

	"github.com/llmkube/mesh/agent/api"
)

// maxKnownNamespaces bounds the namespace tokens a Verifier keeps.
const maxKnownNamespaces = 1024

// Verifier is api.Verify for one mesh secret, with what derives from the secret alone worked
// out once: the admin token when it is made, a namespace's token once a token of that
// namespace has passed. api.Verify derives them on every call (one HMAC for an admin token,
// two for a namespace token), on every chat the agent serves. Keeping them changes no answer:
// a namespace token is an HMAC of its namespace under the admin token, itself an HMAC under
// the secret, so the token a namespace must present is fixed for as long as the secret is
// (tokens do not expire, and none is revoked but by a new secret, which is a new Verifier).
// Every call still compares the presented token in constant time. Only a namespace whose token
// passed is kept, so callers without a valid token cannot fill the table, and it is bounded
// besides (further namespaces are derived per call). Safe for concurrent use.
type Verifier struct {
	admin string
	mu    sync.RWMutex
	ns    map[string]string // namespace → its token
}

// NewVerifier makes the verifier of secret's tokens. It keeps no reference to secret.
func NewVerifier(secret []byte) *Verifier {
	return &Verifier{admin: api.AdminToken(secret), ns: map[string]string{}}
}

// Verify checks a bearer token, answering as api.Verify does.
func (v *Verifier) Verify(token string) (api.Principal, error) {
	p, err := api.Claim(token)
	if err != nil {
		return api.Principal{}, err
	}
	want, known := v.admin, true
	if !p.Admin {
		if want, known = v.known(p.Namespace); !known {
			if want, err = api.NamespaceToken(v.admin, p.Namespace); err != nil {
				return api.Principal{}, err
			}
		}
	}
	if err := p.Match(token, want); err != nil {
		return api.Principal{}, err
	}
	if !known {
		v.keep(p.Namespace, want)
	}
	return p, nil
}

// NamespaceToken is namespace ns's token (api.NamespaceToken), kept once made.
func (v *Verifier) NamespaceToken(ns string) (string, error) {
	if t, ok := v.known(ns); ok {
		return t, nil
	}
	t, err := api.NamespaceToken(v.admin, ns)
	if err != nil {
		return "", err
	}
	v.keep(ns, t)
	return t, nil
}

func (v *Verifier) known(ns string) (string, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	t, ok := v.ns[ns]
	return t, ok
}

func (v *Verifier) keep(ns, token string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.ns) < maxKnownNamespaces {
		v.ns[ns] = token
	}
}
