// Package seal is the mesh's sealed channel: TLS 1.3 between our programs, with a certificate
// authority every keyholder derives from the mesh secret, so there is no CA to run or to hand
// out. The CA's key is an Ed25519 key whose seed is HKDF(secret, "llmkube mesh ca v1"); its
// certificate is built deterministically (fixed serial, validity and subject), so every
// keyholder derives the same bytes, and `llmkube-agent ca` can print them for curl and the SDKs
// (--cacert). Each agent holds its own leaf key and signs a leaf for its node name; a peer checks
// the chain to the mesh CA and, when it knows whom it meant to reach, the leaf's name and the
// key that node gossips (a keyholder can sign a leaf with any name, but cannot gossip another
// live member's key: memberlist refuses a second member with a live member's name).
//
// TLS rather than the Noise protocol: an ordinary HTTPS client, given the CA certificate and a
// token, reaches an agent across the LAN with no plain listener; Go's TLS 1.3 is in the
// standard library and resumes sessions, so pooled or resumed connections pay no new handshake.
package seal

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"
)

// Roles a leaf names (its subject's organizational unit). Only an agent's leaf may assert a
// caller's principal on a gateway hop; a console's leaf identifies a console.
const (
	RoleAgent   = "agent"
	RoleConsole = "console"
)

// caInfo is the HKDF info of the CA key; a new derivation gets a new version, never a reuse.
const caInfo = "llmkube mesh ca v1"

// The CA certificate's fixed fields: every keyholder must build the same bytes.
var (
	caNotBefore = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	caNotAfter  = time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Leaf validity: a leaf is reissued well before its end (Identity.current), so an agent that
// runs for years keeps a valid one; the back-dating absorbs clocks a little apart.
const (
	leafLife     = 365 * 24 * time.Hour
	leafRenew    = 30 * 24 * time.Hour
	leafBackdate = time.Hour
)

// KeyIDSize is the length of a leaf key's fingerprint as gossiped (KeyID): 128 bits of
// SHA-256, enough against a second preimage, small enough for the 512-byte node metadata.
const KeyIDSize = 16

// CA is a mesh's certificate authority, derived from its secret.
type CA struct {
	meshID string
	key    ed25519.PrivateKey
	cert   *x509.Certificate
	der    []byte
	pool   *x509.CertPool
}

// NewCA derives the mesh's CA from its secret; every keyholder derives the same one.
func NewCA(meshID string, secret []byte) (*CA, error) {
	if len(secret) < 16 {
		return nil, errors.New("seal: the mesh secret is too short to derive a CA from")
	}
	if meshID == "" {
		return nil, errors.New("seal: no mesh id")
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, caInfo, ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	key := ed25519.NewKeyFromSeed(seed)
	pub := key.Public().(ed25519.PublicKey)
	ski := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{Organization: []string{"llmkube mesh"}, CommonName: "llmkube mesh " + meshID + " CA"},
		NotBefore:             caNotBefore,
		NotAfter:              caNotAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski[:20],
	}
	// Ed25519 signatures are deterministic, so the same template and key give the same bytes.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("seal: building the mesh CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{meshID: meshID, key: key, cert: cert, der: der, pool: pool}, nil
}

// PEM is the CA certificate in PEM, for curl's --cacert and the SDKs.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

// NewKey makes a leaf key.
func NewKey() (ed25519.PrivateKey, error) {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	return k, err
}

// MarshalKey is a leaf key in PEM (PKCS #8), for the state dir.
func MarshalKey(k ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKey reads a leaf key written by MarshalKey.
func ParseKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("seal: not a PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("seal: a %T key, not Ed25519", k)
	}
	return ek, nil
}

// KeyID is the fingerprint of a public key that a node gossips: SHA-256 of its DER form,
// cut to KeyIDSize.
func KeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return sum[:KeyIDSize], nil
}

// Identity is one program's side of the channel: its leaf, signed by the mesh CA for a name
// and a role, reissued before it runs out.
type Identity struct {
	ca    *CA
	name  string
	role  string
	key   ed25519.PrivateKey
	keyID []byte
	hosts []string
	// cache resumes sessions to the same peer: a reconnect after an idle connection closed
	// skips the certificate exchange.
	cache tls.ClientSessionCache

	mu   sync.Mutex
	leaf *tls.Certificate
}

// Identity signs a leaf for name in role with key. hosts are the names and addresses an
// ordinary HTTPS client may reach it at (its advertised API host); they go into the leaf's
// subject alternative names, with loopback, so `curl --cacert` checks them as it checks any
// site. Peers of the mesh check the name in the subject, not these.
func (ca *CA) Identity(name, role string, key ed25519.PrivateKey, hosts ...string) (*Identity, error) {
	if name == "" {
		return nil, errors.New("seal: a leaf needs a name")
	}
	if role != RoleAgent && role != RoleConsole {
		return nil, fmt.Errorf("seal: unknown role %q", role)
	}
	id, err := KeyID(key.Public())
	if err != nil {
		return nil, err
	}
	i := &Identity{ca: ca, name: name, role: role, key: key, keyID: id, hosts: hosts, cache: tls.NewLRUClientSessionCache(256)}
	if _, err := i.current(time.Now()); err != nil {
		return nil, err
	}
	return i, nil
}

// KeyID is the fingerprint of the identity's key, which an agent gossips.
func (i *Identity) KeyID() []byte { return i.keyID }

// CA is the mesh CA the identity belongs to.
func (i *Identity) CA() *CA { return i.ca }

// current is the leaf, reissued when it is within leafRenew of its end.
func (i *Identity) current(now time.Time) (*tls.Certificate, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.leaf != nil && i.leaf.Leaf.NotAfter.Sub(now) > leafRenew {
		return i.leaf, nil
	}
	c, err := i.ca.issue(i.name, i.role, i.key, i.hosts, now.Add(-leafBackdate), now.Add(leafLife))
	if err != nil {
		return nil, err
	}
	i.leaf = c
	return c, nil
}

// issue signs a leaf valid from notBefore to notAfter.
func (ca *CA) issue(name, role string, key ed25519.PrivateKey, hosts []string, notBefore, notAfter time.Time) (*tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"llmkube mesh " + ca.meshID}, OrganizationalUnit: []string{role}, CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("seal: signing a leaf for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Peer is whom a client means to reach: a node's name and the key fingerprint it gossips. The
// zero Peer accepts any agent of the mesh (a console given an agent's URL and nothing else);
// a name without a key checks the name alone (the node has not gossiped one yet).
type Peer struct {
	Name  string
	KeyID []byte
}

// PeerNamed is the node name as the sealed channel checks it, with the key fingerprint it
// gossips (hex; "" or malformed: not known yet, so the name alone is checked).
func PeerNamed(name, keyHex string) Peer {
	p := Peer{Name: name}
	if k, err := hex.DecodeString(keyHex); err == nil && len(k) > 0 {
		p.KeyID = k
	}
	return p
}

// Who is the verified other end of a sealed connection.
type Who struct {
	Name string
	Role string
}

// PeerOf is who presented the verified client certificate of a connection a server accepted,
// false when it presented none (an ordinary HTTPS client, authenticated by its token alone).
func PeerOf(cs *tls.ConnectionState) (Who, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return Who{}, false
	}
	return whoOf(cs.PeerCertificates[0])
}

func whoOf(c *x509.Certificate) (Who, bool) {
	if len(c.Subject.OrganizationalUnit) != 1 || c.Subject.CommonName == "" {
		return Who{}, false
	}
	return Who{Name: c.Subject.CommonName, Role: c.Subject.OrganizationalUnit[0]}, true
}

// tlsBase is what both ends share: TLS 1.3 only (no downgrade, no renegotiation, replayed
// handshake bytes meet a fresh server random), HTTP/1.1 (the gateway's hop speaks it).
func (i *Identity) tlsBase() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}
}

// ServerConfig is an agent's listener's: it presents the leaf, and checks a client's
// certificate when one is given (a peer of the mesh always gives one). An ordinary HTTPS
// client (curl, an SDK) gives none and is served on its token alone; a certificate that does
// not chain to this mesh's CA ends the handshake.
func (i *Identity) ServerConfig() *tls.Config {
	c := i.tlsBase()
	c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return i.current(time.Now()) }
	c.ClientAuth = tls.VerifyClientCertIfGiven
	c.ClientCAs = i.ca.pool
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		if _, ok := whoOf(cs.PeerCertificates[0]); !ok {
			return errors.New("seal: the client's certificate names no node and role")
		}
		return nil
	}
	return c
}

// ClientConfig is for dialling peer: it presents the leaf and verifies the server (see
// Verify). Configs for different peers share one session cache.
func (i *Identity) ClientConfig(peer Peer) *tls.Config {
	c := i.tlsBase()
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return i.current(time.Now()) }
	c.ClientSessionCache = i.cache
	// The server is checked in VerifyConnection, against the mesh CA and the node meant, not
	// against a host name: peers are dialled by address, and a node's name need not be one.
	c.InsecureSkipVerify = true
	c.VerifyConnection = func(cs tls.ConnectionState) error { return i.ca.Verify(cs.PeerCertificates, peer, time.Now()) }
	return c
}

// Verify checks a server's certificate chain: it chains to this mesh's CA, names an agent,
// and is peer (when peer names one) holding the key peer gossips (when known).
func (ca *CA) Verify(chain []*x509.Certificate, peer Peer, now time.Time) error {
	if len(chain) == 0 {
		return errors.New("seal: the server presented no certificate")
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) {
			return fmt.Errorf("seal: the server's certificate is not of mesh %s (a host of another mesh, or one keyed with another secret)", ca.meshID)
		}
		return fmt.Errorf("seal: the server's certificate: %w", err)
	}
	who, ok := whoOf(leaf)
	if !ok || who.Role != RoleAgent {
		return fmt.Errorf("seal: the server's certificate is not an agent's (%q, role %q)", leaf.Subject.CommonName, who.Role)
	}
	if peer.Name != "" && who.Name != peer.Name {
		return fmt.Errorf("seal: the server is agent %.64q, not %s", who.Name, peer.Name)
	}
	if len(peer.KeyID) > 0 {
		got, err := KeyID(leaf.PublicKey)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, peer.KeyID) {
			return fmt.Errorf("seal: the server claims to be %s but holds key %s, not the %s that %s gossips", who.Name, hex.EncodeToString(got), hex.EncodeToString(peer.KeyID), peer.Name)
		}
	}
	return nil
}
