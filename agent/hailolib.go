package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/download"
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
	case strings.HasSuffix(rest, ".sha256") || !strings.HasSuffix(rest, ".hef"):
		a.passThrough(w, r, upstream)
		return
	default:
		var err error
		if sum, err = a.companionDigest(r.Context(), strings.TrimSuffix(upstream, ".hef")+".sha256"); err != nil {
			WriteError(w, api.Errorf(api.CodeUnreachable, "the Hailo library's digest of %s: %v", api.Clip(rest, 200), err))
			return
		}
	}
	if h, ok := a.files.lookup(sum); ok {
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
	a.serveHeld(w, r, dest, sum)
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

// companionDigest reads a 5.4 library's "<hex>  <file>.hef" companion.
func (a *Agent) companionDigest(ctx context.Context, url string) (string, error) {
	resp, err := a.upstreamGet(ctx, http.MethodGet, url)
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
