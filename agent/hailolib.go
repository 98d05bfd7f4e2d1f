package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/internal/atomicfile"
	"github.com/llmkube/mesh/internal/seal"
)

// HailoLibraryPath is where the agent serves its local hailo-ollama a mirror of Hailo's model
// library (hailo-ollama's "library" setting names http://127.0.0.1:<api port>/hailo-library): a
// HEF comes from the agent's store, else from the mesh's peers that hold it, else from Hailo's
// server, and is kept in the store, verified against its digest, for the next host to ask.
const HailoLibraryPath = "/hailo-library/"

// HailoLibrary configures the mirror.
type HailoLibrary struct {
	// Upstream is Hailo's library (sizing.DefaultHailoLibraryURL, or a LAN mirror).
	Upstream string
	// Download is the policy for fetching from upstream and peers (the agent's guard, its Peers).
	Download download.Options
}

// companionMax bounds a library's .sha256 companion: one line naming one file.
const companionMax = 4 << 10

// hailoLibrary serves GET and HEAD /hailo-library/… to this host's own programs (loopback,
// plain): the 5.1.1 form /blob/sha256_<digest> and the 5.4 form /v<version>/blob/<file>.hef, whose
// digest its .sha256 companion names (asked of upstream, and passed through).
func (a *Agent) hailoLibrary(w http.ResponseWriter, r *http.Request) {
	lib := a.cfg.HailoLibrary
	if r.TLS != nil || lanPlain(r) {
		WriteError(w, api.Errorf(api.CodeForbidden, "the Hailo library mirror serves this host's hailo-ollama only (loopback)"))
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(HailoLibraryPath, "/"))
	upstream := strings.TrimSuffix(lib.Upstream, "/") + rest
	var sum string
	switch {
	case strings.HasPrefix(rest, "/blob/sha256_"):
		var err error
		if sum, err = download.ParseSHA256(strings.TrimPrefix(rest, "/blob/sha256_")); err != nil {
			WriteError(w, api.Errorf(api.CodeBadRequest, "%v", err))
			return
		}
	case strings.HasSuffix(rest, ".sha256") && libraryFile.MatchString(strings.TrimSuffix(rest, ".sha256")+".hef"):
		// hailo-ollama 5.4 asks the companion before the HEF: offline, it comes from the record
		// or a peer like the HEF's digest does.
		hef := strings.TrimSuffix(rest, ".sha256") + ".hef"
		sum, err := a.libraryDigest(r.Context(), hef)
		if err != nil {
			WriteError(w, api.Errorf(api.CodeUnreachable, "the Hailo library's digest of %s: %v", api.Clip(hef, 200), err))
			return
		}
		serveCompanion(w, r, sum, hef)
		return
	case !libraryFile.MatchString(rest):
		a.passThrough(w, r, upstream)
		return
	default:
		var err error
		if sum, err = a.libraryDigest(r.Context(), rest); err != nil {
			WriteError(w, api.Errorf(api.CodeUnreachable, "the Hailo library's digest of %s: %v", api.Clip(rest, 200), err))
			return
		}
	}
	if h, ok := a.files.lookup(sum); ok {
		a.rememberDigest(rest, sum)
		a.serveHeld(w, r, h.Path, sum)
		return
	}
	dest := filepath.Join(a.store.Path(), "hailo", "sha256_"+sum+".hef")
	if r.Method == http.MethodHead {
		// A size asked for (sizing a hailo:// model): no reason to copy gigabytes.
		if n, ok := download.PeerSize(r.Context(), lib.Download, sum); ok {
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			w.Header().Set("Accept-Ranges", "bytes")
			return
		}
		a.passThrough(w, r, upstream)
		return
	}
	err := download.FetchWith(r.Context(), upstream, dest, download.Want{SHA256: sum}, lib.Download, nil)
	switch {
	case errors.Is(err, download.ErrBusy):
		w.Header().Set("Retry-After", "5")
		WriteError(w, api.Errorf(api.CodeTooBusy, "the HEF is being fetched already"))
		return
	case err != nil:
		a.log.Warn("Hailo library mirror: fetch failed", "sha256", sum, "err", err)
		WriteError(w, api.Errorf(api.CodePullFailed, "the HEF %s came from neither the store, a peer nor the library: %v", sum, err))
		return
	}
	a.files.landed()
	a.rememberDigest(rest, sum)
	a.serveHeld(w, r, dest, sum)
}

// libraryFile is a 5.4 library's HEF path (/v<version>/blob/<file>.hef); nothing in it can climb
// out of the folder of records.
var libraryFile = regexp.MustCompile(`^/v[0-9][0-9A-Za-z.+_-]*/blob/[A-Za-z0-9][A-Za-z0-9.+_-]*\.hef$`)

// HailoDigestsPath is where an agent tells the mesh's other agents the digest of a 5.4 library
// HEF it holds, as the library's own .sha256 companion: GET /v1/hailo-library/v<version>/blob/
// <file>.sha256. It answers from the record its mirror kept when it verified the HEF, so an
// offline Pi's mirror learns the digest from a peer and then copies the HEF by it.
const HailoDigestsPath = "/v1/hailo-library/"

// libraryDigest is the digest of the 5.4 library's HEF at path: from the library's companion,
// else (the library unreachable, or refusing) from this host's record, else from the first
// agent of the mesh that holds the HEF and says its digest.
func (a *Agent) libraryDigest(ctx context.Context, path string) (string, error) {
	lib := a.cfg.HailoLibrary
	companion := strings.TrimSuffix(path, ".hef") + ".sha256"
	sum, err := a.companionDigest(ctx, a.upstreamGet, strings.TrimSuffix(lib.Upstream, "/")+companion)
	if err == nil {
		return sum, nil
	}
	if sum, ok := a.recordedDigest(path); ok {
		return sum, nil
	}
	for _, p := range lib.Download.Peers.Agents(HailoDigestsPath + strings.TrimPrefix(companion, "/")) {
		get := func(ctx context.Context, method, url string) (*http.Response, error) {
			ctx, cancel := context.WithTimeout(ctx, download.DefaultPeerStall)
			req, err := http.NewRequestWithContext(ctx, method, url, nil)
			if err != nil {
				cancel()
				return nil, err
			}
			resp, err := p.Client.Do(req)
			if err != nil {
				cancel()
				return nil, err
			}
			resp.Body = cancelOnClose{resp.Body, cancel}
			return resp, nil
		}
		sum, perr := a.companionDigest(ctx, get, p.URL)
		if perr == nil {
			a.log.Info("Hailo library mirror: a HEF's digest from a peer, the library unreachable", "path", path, "peer", p.Name, "sha256", sum)
			return sum, nil
		}
		a.log.Debug("Hailo library mirror: a peer does not know a HEF's digest", "path", path, "peer", p.Name, "err", perr)
	}
	return "", fmt.Errorf("%w; and neither this host's records nor a peer of the mesh know it", err)
}

// recordFile is where the store keeps the digest of the library's HEF at path (a folder whose
// name starts with a dot, so the store's walk does not serve the records as model files).
func (a *Agent) recordFile(path string) string {
	return filepath.Join(a.store.Path(), "hailo", ".library", filepath.FromSlash(strings.TrimSuffix(path, ".hef")+".sha256"))
}

// rememberDigest records that the library's HEF at path has digest sum, once the HEF is in the
// store, verified: so this host can serve it offline and tell its peers.
func (a *Agent) rememberDigest(path, sum string) {
	if got, ok := a.recordedDigest(path); ok && got == sum {
		return
	}
	f := a.recordFile(path)
	err := os.MkdirAll(filepath.Dir(f), 0o755)
	if err == nil {
		err = atomicfile.WriteFile(f, []byte(companionLine(sum, path)), 0o644)
	}
	if err != nil {
		a.log.Warn("Hailo library mirror: cannot record a HEF's digest", "path", path, "err", err)
	}
}

// recordedDigest is the digest this host recorded for the library's HEF at path.
func (a *Agent) recordedDigest(path string) (string, bool) {
	b, err := os.ReadFile(a.recordFile(path))
	if err != nil {
		return "", false
	}
	sum, err := parseCompanion(b)
	return sum, err == nil
}

// companionLine is a library's .sha256 companion of the HEF at path: "<hex>  <file>.hef".
func companionLine(sum, path string) string {
	return sum + "  " + pathpkg.Base(path) + "\n"
}

// serveCompanion answers a .sha256 companion with the line the library itself would send.
func serveCompanion(w http.ResponseWriter, r *http.Request, sum, path string) {
	w.Header().Set("Content-Type", "text/plain")
	http.ServeContent(w, r, "", time.Time{}, strings.NewReader(companionLine(sum, path)))
}

// serveDigest answers GET HailoDigestsPath…: to an agent of the mesh over the sealed channel, as
// the files route, and only for a HEF this host still holds (it vouches for the bytes it serves).
func (a *Agent) serveDigest(w http.ResponseWriter, r *http.Request) {
	who, ok := seal.PeerOf(r.TLS)
	if !ok || who.Role != seal.RoleAgent {
		WriteError(w, api.Errorf(api.CodeForbidden, "the Hailo library's digests are told to the mesh's agents only, over the sealed channel"))
		return
	}
	stem, ok := strings.CutSuffix("/"+r.PathValue("path"), ".sha256")
	path := stem + ".hef"
	if !ok || !libraryFile.MatchString(path) {
		WriteError(w, api.Errorf(api.CodeBadRequest, "%.200q is not a Hailo library companion: want v<version>/blob/<file>.sha256", r.PathValue("path")))
		return
	}
	sum, ok := a.recordedDigest(path)
	if ok {
		_, ok = a.files.lookup(sum)
	}
	if !ok {
		WriteError(w, api.Errorf(api.CodeNotFound, "this host holds no HEF of the library at %s", path))
		return
	}
	a.log.Info("telling a peer a Hailo library HEF's digest", "peer", who.Name, "path", path, "sha256", sum)
	serveCompanion(w, r, sum, path)
}

// serveHeld serves a file of the store, with ranges.
func (a *Agent) serveHeld(w http.ResponseWriter, r *http.Request, path, sum string) {
	f, err := os.Open(path)
	if err != nil {
		WriteError(w, api.Errorf(api.CodeNotFound, "no file with sha256 %s here", sum))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// companionDigest reads a 5.4 library's "<hex>  <file>.hef" companion at url through get.
func (a *Agent) companionDigest(ctx context.Context, get func(ctx context.Context, method, url string) (*http.Response, error), url string) (string, error) {
	resp, err := get(ctx, http.MethodGet, url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", errors.New("it answered HTTP " + resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, companionMax))
	if err != nil {
		return "", err
	}
	return parseCompanion(b)
}

// parseCompanion reads the digest of a "<hex>  <file>.hef" line.
func parseCompanion(b []byte) (string, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "", errors.New("its .sha256 file is empty")
	}
	return download.ParseSHA256(strings.ToLower(f[0]))
}

// passThrough answers a request the store cannot with upstream's answer (its status, length and
// body; nothing else of its headers).
func (a *Agent) passThrough(w http.ResponseWriter, r *http.Request, url string) {
	resp, err := a.upstreamGet(r.Context(), r.Method, url)
	if err != nil {
		WriteError(w, api.Errorf(api.CodeUnreachable, "the Hailo library: %v", err))
		return
	}
	defer resp.Body.Close()
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

func (a *Agent) upstreamGet(ctx context.Context, method, url string) (*http.Response, error) {
	c, err := download.NewClient(a.cfg.HailoLibrary.Download)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		return nil, download.Redact(err)
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }
