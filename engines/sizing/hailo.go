package sizing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/internal/hailozoo"
)

// maxManifest bounds a hailo-ollama manifest read: real ones are about 2 KB (a chat template).
const maxManifest = 1 << 20

// HailoManifest is the part of a hailo-ollama manifest the sizer needs.
//   - 5.0–5.1.x: "hef_h10h" is the HEF's sha256; the blob is <library>/blob/sha256_<digest>.
//   - newer (5.4): "hef_filename" names the HEF; the blob is <library>/v<version>/blob/<file>.
type HailoManifest struct {
	Digest   string `json:"hef_h10h"`
	Filename string `json:"hef_filename"`
	Details  struct {
		Format            string `json:"format"`
		Family            string `json:"family"`
		ParameterSize     string `json:"parameter_size"`
		QuantizationLevel string `json:"quantization_level"`
	} `json:"details"`
}

// DecodeHailoManifest reads and validates a manifest: a JSON object naming its HEF by a sha256
// digest (64 lower-case hex) or by a plain .hef file name. When a manifest carries both, the
// digest wins: it is what 5.1.x pulls by, and it can be verified.
func DecodeHailoManifest(data []byte) (HailoManifest, error) {
	var m HailoManifest
	if len(data) > maxManifest {
		return m, fmt.Errorf("manifest is %d bytes; the limit is %d", len(data), maxManifest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return HailoManifest{}, fmt.Errorf("manifest is not a JSON object of the expected shape: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return HailoManifest{}, errors.New("manifest has data after its JSON object")
	}
	switch {
	case m.Digest != "":
		if !isSHA256Hex(m.Digest) {
			return HailoManifest{}, fmt.Errorf("manifest's hef_h10h %q is not a sha256 digest (64 lower-case hex characters)", clip(m.Digest))
		}
		m.Filename = ""
	case m.Filename != "":
		if why := badHEFName(m.Filename); why != "" {
			return HailoManifest{}, fmt.Errorf("manifest's hef_filename %q %s", clip(m.Filename), why)
		}
	default:
		return HailoManifest{}, errors.New("manifest names no HEF (neither hef_h10h nor hef_filename)")
	}
	return m, nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// badHEFName says what is wrong with a manifest's hef_filename, which becomes part of a URL path.
func badHEFName(n string) string {
	switch {
	case len(n) > 255:
		return "is too long"
	case n == ".hef" || !strings.HasSuffix(n, ".hef"):
		return "does not name a .hef file"
	case strings.ContainsAny(n, `/\?#%`) || strings.HasPrefix(n, "."):
		return "is not a plain file name"
	}
	for _, r := range n {
		if r <= 0x20 || r == 0x7f {
			return "contains a space or control character"
		}
	}
	return ""
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// HailoManifestsDir is where hailo-ollama keeps its manifests when nothing overrides it:
// models/manifests inside its data folder, which hailo-ollama takes to be the first existing
// <dir>/hailo-ollama among $XDG_DATA_HOME (default ~/.local/share), then each of
// $XDG_DATA_DIRS (default /usr/share:/usr/local/share). Relative entries are ignored, as the
// XDG spec says. getenv reads the environment (os.Getenv when nil).
func HailoManifestsDir(getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var dirs []string
	if d := getenv("XDG_DATA_HOME"); d != "" {
		dirs = append(dirs, d)
	} else if home := getenv("HOME"); home != "" {
		dirs = append(dirs, filepath.Join(home, ".local", "share"))
	}
	dataDirs := getenv("XDG_DATA_DIRS")
	if dataDirs == "" {
		dataDirs = "/usr/share:/usr/local/share"
	}
	dirs = append(dirs, filepath.SplitList(dataDirs)...)
	var looked []string
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, "hailo-ollama")
		looked = append(looked, p)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return filepath.Join(p, "models", "manifests"), nil
		}
	}
	return "", fmt.Errorf("no hailo-ollama data folder (looked in %s)", strings.Join(looked, ", "))
}

// HailoModels lists the model ids (name:tag) that have a manifest in dir, sorted.
func HailoModels(dir string) ([]string, error) {
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, n := range names {
		if !n.IsDir() {
			continue
		}
		tags, err := os.ReadDir(filepath.Join(dir, n.Name()))
		if err != nil {
			continue
		}
		for _, t := range tags {
			if fi, err := os.Stat(filepath.Join(dir, n.Name(), t.Name(), "manifest.json")); err == nil && fi.Mode().IsRegular() {
				ids = append(ids, n.Name()+":"+t.Name())
			}
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// hailo sizes a hailo:// model: the HEF's size, which is what it occupies in the Hailo-10H's
// own memory (its KV cache and buffers are inside the device's budget for the HEF).
func (s *Sizer) hailo(ctx context.Context, src source.Source) (api.SizeEstimate, error) {
	dir := s.HailoManifestsDir
	if dir == "" {
		var err error
		if dir, err = HailoManifestsDir(s.Getenv); err != nil {
			return api.SizeEstimate{}, failed("cannot size %s: %v; set --hailo-manifests-dir", src, err)
		}
	}
	id := src.Name + ":" + src.Tag
	path := filepath.Join(dir, src.Name, src.Tag, "manifest.json")
	data, err := readLimited(path, maxManifest)
	if errors.Is(err, fs.ErrNotExist) {
		known, lerr := HailoModels(dir)
		name, offered := hailozoo.Offers(known, id)
		switch {
		case lerr != nil:
			return api.SizeEstimate{}, failed("cannot size %s: hailo-ollama's manifests folder %s cannot be read: %v", src, dir, lerr)
		case len(known) == 0:
			return api.SizeEstimate{}, api.Errorf(api.CodeNotFound, "hailo model %s is not in hailo-ollama's zoo: %s holds no manifests", id, dir)
		case !offered:
			return api.SizeEstimate{}, api.Errorf(api.CodeNotFound, "hailo model %s is not in hailo-ollama's zoo; known models: %s", id, strings.Join(known, ", "))
		}
		// This release lists the model under another name (a known rename): size that manifest.
		model, tag, _ := strings.Cut(name, ":")
		path = filepath.Join(dir, model, tag, "manifest.json")
		data, err = readLimited(path, maxManifest)
	}
	if err != nil {
		return api.SizeEstimate{}, failed("cannot size %s: %v", src, err)
	}
	m, err := DecodeHailoManifest(data)
	if err != nil {
		return api.SizeEstimate{}, failed("cannot size %s: %s: %v", src, path, err)
	}
	lib := orDefault(s.HailoLibraryURL, DefaultHailoLibraryURL)
	var size int64
	var method, how string
	if m.Digest != "" {
		url := lib + "/blob/sha256_" + m.Digest
		if size, err = s.headSize(ctx, url); err != nil {
			return api.SizeEstimate{}, err
		}
		method, how = api.SizeHead, "HEAD "+url
	} else {
		url, n, err := s.hailoBlobRange(ctx, lib, m.Filename)
		if err != nil {
			return api.SizeEstimate{}, err
		}
		size, method, how = n, api.SizeRange, "range GET "+url
	}
	return api.SizeEstimate{
		Bytes:   size,
		Weights: size,
		Method:  method,
		Device:  api.DeviceHailo,
		Detail:  fmt.Sprintf("HEF %s (%s) in the Hailo-10H's own memory", api.FormatBytes(size), how),
	}, nil
}

// hailoBlobRange finds a newer manifest's HEF the way hailo-ollama does: at its own version,
// else at the fallback version (x.y.z → x.y.0, x.y.0 → x.(y-1).0), by a one-byte range GET.
func (s *Sizer) hailoBlobRange(ctx context.Context, lib, file string) (string, int64, error) {
	version := orDefault(s.HailoVersion, DefaultHailoVersion)
	versions := []string{version}
	if fb, ok := fallbackVersion(version); ok {
		versions = append(versions, fb)
	}
	var lastErr error
	for _, v := range versions {
		url := lib + "/v" + v + "/blob/" + file
		n, err := s.rangeSize(ctx, url)
		if err == nil {
			return url, n, nil
		}
		lastErr = err
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
			break
		}
	}
	return "", 0, lastErr
}

// fallbackVersion is hailo-ollama's version fallback: a patch release falls back to its x.y.0,
// an x.y.0 to x.(y-1).0; there is none across a major version.
func fallbackVersion(v string) (string, bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return "", false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return "", false
		}
		n[i] = x
	}
	switch {
	case n[2] != 0:
		return fmt.Sprintf("%d.%d.0", n[0], n[1]), true
	case n[1] != 0:
		return fmt.Sprintf("%d.%d.0", n[0], n[1]-1), true
	}
	return "", false
}

// headSize reads a blob's size from a HEAD's Content-Length.
func (s *Sizer) headSize(ctx context.Context, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return 0, failed("sizing %s: %v", url, err)
	}
	resp, err := s.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return 0, api.Errorf(api.CodeNotFound, "%s", httpStatusError("HEAD", url, resp))
	case resp.StatusCode != http.StatusOK:
		return 0, failed("cannot size: %s", httpStatusError("HEAD", url, resp))
	case resp.ContentLength <= 0:
		return 0, failed("cannot size: HEAD %s gave no Content-Length", url)
	}
	return resp.ContentLength, nil
}

// rangeSize reads a blob's size with a one-byte range GET: the total of Content-Range on a 206;
// on a 200 (the server ignored the range) the Content-Length, closing the body unread.
func (s *Sizer) rangeSize(ctx context.Context, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, failed("sizing %s: %v", url, err)
	}
	req.Header.Set("Range", "bytes=0-0")
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := s.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if n := contentRangeTotal(resp.Header.Get("Content-Range")); n > 0 {
			return n, nil
		}
		return 0, failed("cannot size: GET %s (bytes 0-0) gave no total in its Content-Range", url)
	case http.StatusOK:
		if resp.ContentLength > 0 {
			return resp.ContentLength, nil
		}
		return 0, failed("cannot size: GET %s ignored the range and gave no Content-Length", url)
	case http.StatusNotFound:
		return 0, api.Errorf(api.CodeNotFound, "%s", httpStatusError("GET", url, resp))
	}
	return 0, failed("cannot size: %s", httpStatusError("GET", url, resp))
}

// readLimited reads a small file, refusing one over limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is over %d bytes", path, limit)
	}
	return data, nil
}
