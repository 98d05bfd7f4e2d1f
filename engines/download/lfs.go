package download

import (
	"context"
	"net/http"
	"strings"
)

// LFSDigest is the SHA-256 a Hugging Face resolve URL names for its file: the X-Linked-Etag
// header its redirect carries for a file kept in LFS (every GGUF), read with a HEAD that follows
// no redirect. "" when the answer has none (a file not in LFS, another server): the download
// is then not asked of peers, since nothing else names the content it must have.
func LFSDigest(ctx context.Context, rawURL string, opts Options) (string, error) {
	u, err := checkURL(rawURL, opts)
	if err != nil {
		return "", err
	}
	c, err := NewClient(opts)
	if err != nil {
		return "", err
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u.String(), nil)
	if err != nil {
		return "", err
	}
	for k, v := range opts.Header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", Redact(err)
	}
	resp.Body.Close()
	etag := strings.TrimPrefix(resp.Header.Get("X-Linked-Etag"), "W/")
	sum, err := ParseSHA256(strings.ToLower(strings.Trim(etag, `"`)))
	if err != nil {
		return "", nil // not an LFS file's digest (a git blob's SHA-1, or nothing)
	}
	return sum, nil
}
