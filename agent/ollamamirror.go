package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/store"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/internal/seal"
)

// OllamaManifestPath is where an agent serves the manifests of the models its Ollama daemon
// holds to the mesh's other agents: GET /v1/ollama/manifests/{namespace}/{model}/{tag}.
const OllamaManifestPath = "/v1/ollama/manifests/"

// OllamaRegistryPath is where the agent's mirror of the registry API answers its own Ollama
// daemon (loopback, plain): Ollama's pull of 127.0.0.1:<port>/<namespace>/<model>:<tag> asks
// /v2/<namespace>/<model>/manifests/<tag> and /v2/<namespace>/<model>/blobs/sha256:<hex>.
const OllamaRegistryPath = "/v2/"

// OllamaMirrorDir is the folder of the store where the mirror keeps the blobs it copied for the
// daemon until its pull ends (DropOllamaMirrorCopies).
func OllamaMirrorDir(store string) string { return filepath.Join(store, "ollama-mirror") }

// OllamaMirror configures the agent's part in moving Ollama models between hosts.
type OllamaMirror struct {
	// Models is the daemon's models folder (its OLLAMA_MODELS), when the agent can read it:
	// its blobs are served to the mesh's agents by digest and gossiped with the store's files,
	// and its manifests by name. "" serves none (the mirror still works).
	Models string
	// Registry is the origin registry's base URL, asked for what no peer delivers.
	Registry string
	// Download is the policy for the origin and the peers (the agent's guard, its Peers).
	Download download.Options

	copies *mirrorCopies // shared by the mirror and the driver Attach wires
}

// mirrorCopies are the copies of blobs the mirror made or makes for the daemon's pulls in
// progress, for the placement's progress.
type mirrorCopies struct {
	mu sync.Mutex
	by map[string]download.Progress // by SHA-256
}

func (c *mirrorCopies) set(sum string, p download.Progress) {
	c.mu.Lock()
	c.by[sum] = p
	c.mu.Unlock()
}

func (c *mirrorCopies) clear() {
	c.mu.Lock()
	clear(c.by)
	c.mu.Unlock()
}

// status sums the copies: the bytes, and where they came from ("" from the registry alone).
func (c *mirrorCopies) status() (engines.Progress, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var p engines.Progress
	var from []string
	for _, cp := range c.by {
		p.Completed += cp.Done
		p.Total += cp.Total
		if cp.From != "" && !slices.Contains(from, cp.From) {
			from = append(from, cp.From)
		}
	}
	slices.Sort(from)
	p.From = strings.Join(from, "; ")
	return p, len(c.by) > 0
}

// progress is the copies the mirror of m records, made once.
func (m *OllamaMirror) progress() *mirrorCopies {
	if m.copies == nil {
		m.copies = &mirrorCopies{by: map[string]download.Progress{}}
	}
	return m.copies
}

// Attach has d pull the models the mesh's peers hold through the mirror, which the daemon
// reaches at addr (the agent's API listener, on this host); the blobs the mirror copied into
// the store at storeDir are dropped once d's pulls through it have ended.
func (m *OllamaMirror) Attach(d *ollama.Driver, addr, storeDir string, log *slog.Logger) {
	peers, copies := m.Download.Peers, m.progress()
	d.UseMirror(ollama.Mirror{
		Addr:   addr,
		Held:   func(ref string) bool { return len(peers.Manifests(ref)) > 0 },
		Status: copies.status,
		Done: func() {
			copies.clear()
			if err := DropOllamaMirrorCopies(storeDir); err != nil {
				log.Warn("the Ollama mirror's copies of blobs the daemon holds now could not be removed", "err", err)
			}
		},
	})
}

// manifestTimeout bounds each request for a manifest (a few kilobytes).
const manifestTimeout = 30 * time.Second

// ollamaMirror serves the registry API to the daemon: manifests from peers that hold the
// model, then the registry; blobs from peers, then the registry, verified, one copy of a blob at
// a time however many of the daemon's requests ask for it.
type ollamaMirror struct {
	cfg   OllamaMirror
	dir   string // OllamaMirrorDir of the store
	files *files
	a     *Agent

	copies   *mirrorCopies
	mu       sync.Mutex
	inflight map[string]*blobCopy
}

type blobCopy struct {
	done chan struct{}
	err  error
}

func newOllamaMirror(a *Agent, cfg OllamaMirror) *ollamaMirror {
	return &ollamaMirror{cfg: cfg, dir: OllamaMirrorDir(a.store.Path()), files: a.files, a: a, inflight: map[string]*blobCopy{},
		copies: cfg.progress()}
}

// serveManifest answers GET /v1/ollama/manifests/{namespace}/{model}/{tag}: to an agent of the
// mesh over the sealed channel only, like the files route. The receiver checks every blob the
// manifest names by its digest.
func (m *ollamaMirror) serveManifest(w http.ResponseWriter, r *http.Request) {
	who, ok := seal.PeerOf(r.TLS)
	if !ok || who.Role != seal.RoleAgent {
		WriteError(w, api.Errorf(api.CodeForbidden, "Ollama manifests are served to the mesh's agents only, over the sealed channel"))
		return
	}
	n, err := ollama.ParseName(r.PathValue("ns") + "/" + r.PathValue("model") + ":" + r.PathValue("tag"))
	if err != nil {
		WriteError(w, api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	if m.cfg.Models == "" {
		WriteError(w, api.Errorf(api.CodeNotFound, "this host's agent does not read its Ollama daemon's models folder"))
		return
	}
	b, _, err := ollama.ReadManifest(m.cfg.Models, n)
	if err != nil {
		WriteError(w, api.Errorf(api.CodeNotFound, "no Ollama model %s here", n))
		return
	}
	m.a.log.Info("serving an Ollama manifest to a peer", "peer", who.Name, "model", n.String())
	w.Header().Set("Content-Type", manifestType)
	w.Write(b)
}

// manifestType is the media type of a registry manifest.
const manifestType = "application/vnd.docker.distribution.manifest.v2+json"

// serveRegistry answers the daemon's registry requests (GET and HEAD under /v2/), on loopback.
func (m *ollamaMirror) serveRegistry(w http.ResponseWriter, r *http.Request) {
	if r.TLS != nil || lanPlain(r) {
		WriteError(w, api.Errorf(api.CodeForbidden, "the Ollama registry mirror serves this host's Ollama only (loopback)"))
		return
	}
	if r.URL.Path == OllamaRegistryPath {
		w.WriteHeader(http.StatusOK) // the registry API's version check
		return
	}
	req, err := ollama.ParseRegistryPath(r.URL.Path)
	if err != nil {
		WriteError(w, api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	if req.SHA256 == "" {
		m.manifest(w, r, req.Name)
		return
	}
	m.blob(w, r, req)
}

// manifest answers with n's manifest from the first peer holding it that gives a well-formed
// one, else from the registry.
func (m *ollamaMirror) manifest(w http.ResponseWriter, r *http.Request, n ollama.Name) {
	for _, p := range m.cfg.Download.Peers.Manifests(n.Namespace + "/" + n.Model + ":" + n.Tag) {
		b, err := getManifest(r.Context(), p.Client, p.URL)
		if err != nil {
			m.a.log.Warn("a peer could not give an Ollama manifest; trying the next", "peer", p.Name, "model", n.String(), "err", err)
			continue
		}
		m.a.log.Info("Ollama manifest from a peer", "peer", p.Name, "model", n.String())
		w.Header().Set("Content-Type", manifestType)
		w.Write(b)
		return
	}
	c, err := download.NewClient(m.cfg.Download)
	if err == nil {
		var b []byte
		b, err = getManifest(r.Context(), c, m.origin(n, "manifests/"+n.Tag))
		if err == nil {
			w.Header().Set("Content-Type", manifestType)
			w.Write(b)
			return
		}
	}
	WriteError(w, api.Errorf(api.CodeNotFound, "no peer holds the Ollama model %s, and the registry did not give it: %v", n, err))
}

// getManifest fetches a manifest and checks it.
func getManifest(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, manifestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", manifestType)
	resp, err := c.Do(req)
	if err != nil {
		return nil, download.Redact(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, ollama.MaxManifest+1))
	if err != nil {
		return nil, download.Redact(err)
	}
	if _, err := ollama.ParseManifest(b); err != nil {
		return nil, err
	}
	return b, nil
}

// origin is a path of the model's repository on the registry.
func (m *ollamaMirror) origin(n ollama.Name, rest string) string {
	return strings.TrimSuffix(m.cfg.Registry, "/") + "/v2/" + n.Namespace + "/" + n.Model + "/" + rest
}

// blob answers with a blob: copied from peers that hold it, else the registry, verified, into
// the mirror's folder of the store, and served from there. Ollama's pull asks in three steps:
// a HEAD for the size (the copy is made then, before any of its reads, which give up on a
// stalled part), a GET for the blob's "direct URL" (it takes a redirect to another host name as
// that, and follows one to the same name), then ranged GETs of that URL.
func (m *ollamaMirror) blob(w http.ResponseWriter, r *http.Request, req ollama.RegistryRequest) {
	sum := req.SHA256
	dest := filepath.Join(m.dir, "sha256-"+sum)
	if r.Method == http.MethodGet && r.URL.Query().Get(directParam) == "" {
		loc, err := directURL(r)
		if err != nil {
			WriteError(w, api.Errorf(api.CodeBadRequest, "%v", err))
			return
		}
		http.Redirect(w, r, loc, http.StatusTemporaryRedirect)
		return
	}
	if _, fresh := download.ReadDigest(dest); !fresh {
		if err := m.copyBlob(r.Context(), req, dest); err != nil {
			m.a.log.Warn("Ollama registry mirror: a blob came from neither a peer nor the registry", "sha256", sum, "err", err)
			WriteError(w, api.Errorf(api.CodePullFailed, "the blob %s came from neither a peer nor the registry: %v", sum, err))
			return
		}
	}
	m.a.serveHeld(w, r, dest, sum)
}

// directParam marks a blob URL the mirror sent the daemon to as the blob's direct URL.
const directParam = "direct"

// directURL is the request's URL under another name of the same address (an IPv4 address in
// its IPv6-mapped form, ::1 as localhost), marked direct: Ollama keeps a redirect to another
// host name as the blob's direct URL instead of following it.
func directURL(r *http.Request) (string, error) {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		return "", fmt.Errorf("the mirror was asked at %.80q: want an address with a port", r.Host)
	}
	ip := net.ParseIP(host)
	switch {
	case ip != nil && ip.To4() != nil && !strings.Contains(host, ":"):
		host = "::ffff:" + ip.String()
	case ip != nil && ip.IsLoopback():
		host = "localhost"
	case host == "localhost":
		host = "127.0.0.1"
	default:
		return "", fmt.Errorf("the mirror was asked at %.80q: want it by an IP address or localhost", r.Host)
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: r.URL.Path, RawQuery: directParam + "=1"}
	return u.String(), nil
}

// copyBlob copies the blob into dest once, however many requests ask for it at once.
func (m *ollamaMirror) copyBlob(ctx context.Context, req ollama.RegistryRequest, dest string) error {
	sum := req.SHA256
	m.mu.Lock()
	c, ok := m.inflight[sum]
	if !ok {
		c = &blobCopy{done: make(chan struct{})}
		m.inflight[sum] = c
		go func() {
			// Not the request's context: the daemon asks again (its parts, its retries) for
			// the same copy.
			c.err = download.FetchWith(context.WithoutCancel(ctx), m.origin(req.Name, "blobs/sha256:"+sum), dest,
				download.Want{SHA256: sum}, m.cfg.Download, func(p download.Progress) { m.copies.set(sum, p) })
			if c.err == nil {
				m.files.landed()
			}
			m.mu.Lock()
			delete(m.inflight, sum)
			m.mu.Unlock()
			close(c.done)
		}()
	}
	m.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DropOllamaMirrorCopies removes the blobs the mirror copied into the store at storeDir, once the
// daemon's pulls through it have ended: the daemon holds them now (and serves them to peers
// through its models folder). Partial copies stay for a resume.
func DropOllamaMirrorCopies(storeDir string) error {
	dir := OllamaMirrorDir(storeDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var first error
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), store.PartialSuffix) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && first == nil {
			first = err
		}
	}
	return first
}
