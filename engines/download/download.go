// Package download fetches model files over HTTP the careful way: into a ".partial" file next
// to the destination, resumable with a Range request, verified against a sha256 when one is
// given, and renamed into place only when complete. The destination is guarded: loopback,
// private and link-local addresses are refused unless allowed (checked at dial time, after name
// resolution), redirects are limited, and credentials never cross hosts.
package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultMaxRedirects is how many redirects a download follows when Options names no limit.
const DefaultMaxRedirects = 5

// PartialSuffix is appended to the destination while the file is incomplete.
const PartialSuffix = ".partial"

// Options says where downloads may go and how.
type Options struct {
	// AllowPrivate lets downloads reach loopback, private, link-local and other non-public
	// addresses. Off by default: a model URL is user input.
	AllowPrivate bool
	// AllowHosts, when not empty, is the only hosts a download (and each of its redirects) may
	// reach: exact names or addresses, or ".example.com" for example.com's subdomains. Naming a
	// host is also consent for it to resolve to a private address (a NAS on the LAN).
	AllowHosts []string
	// MaxRedirects limits the redirects followed; 0 means DefaultMaxRedirects.
	MaxRedirects int
	// Header is sent with the first request only, never to another host: the place for a
	// token (Authorization: Bearer …).
	Header http.Header
	// HTTP is the client to use (its timeout and TLS settings); nil means a fresh one. Its
	// Transport must be nil or an *http.Transport: a clone of it gets the address guard and no
	// proxy, since a proxy would hide the real destination from the guard.
	HTTP *http.Client
}

// ErrChecksum is wrapped when a finished download does not match its sha256.
var ErrChecksum = errors.New("sha256 mismatch")

// ErrTooManyRedirects is wrapped when a download is redirected more than allowed.
var ErrTooManyRedirects = errors.New("too many redirects")

// ErrBusy is wrapped when another download of the same file is in progress.
var ErrBusy = errors.New("download already in progress")

// progressEvery spaces progress reports: often enough for a live bar, rare enough that a
// multi-gigabyte file does not make hundreds of thousands of calls.
const progressEvery = 200 * time.Millisecond

// Fetch downloads rawURL to dest. An existing dest is kept when it matches sha256hex (or when
// none is given). A ".partial" left by an earlier attempt is resumed with a Range request; a
// server that ignores the range gets a fresh start. When sha256hex is given the finished file is
// checked and, on a mismatch, the partial is deleted and ErrChecksum returned. The file is
// fsynced and renamed into place only when complete. progress, when not nil, is called with the
// bytes done and the total (0 when the server does not say). Cancelling ctx stops the download
// and keeps the partial for a later resume.
func Fetch(ctx context.Context, rawURL, dest, sha256hex string, opts Options, progress func(done, total int64)) error {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	want := strings.ToLower(strings.TrimSpace(sha256hex))
	if want != "" {
		if b, err := hex.DecodeString(want); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("download: %q is not a sha256 (64 hex digits)", sha256hex)
		}
	}
	u, err := checkURL(rawURL, opts)
	if err != nil {
		return err
	}
	client, err := newClient(u, opts)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o750); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	partial := dest + PartialSuffix
	f, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	// Two downloads appending to one partial would interleave their bytes: lock it.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("download %s: %w", filepath.Base(dest), ErrBusy)
	}
	defer func() {
		// An attempt that got no bytes leaves no empty partial behind; one with bytes is kept
		// for resuming. (After the rename, Stat fails on the closed file and nothing is removed.)
		if fi, err := f.Stat(); err == nil && fi.Size() == 0 {
			os.Remove(partial)
		}
		f.Close()
	}()
	// Checked under the lock, so a download that finished meanwhile is not fetched again.
	if done, err := existing(dest, want, progress); err != nil || done {
		return err
	}

	d := &fetch{client: client, url: u.String(), shown: u.Redacted(), header: opts.Header, file: f, progress: progress}
	if err := d.run(ctx); err != nil {
		return err
	}
	if want != "" {
		if got := hex.EncodeToString(d.hash.Sum(nil)); got != want {
			f.Close()
			os.Remove(partial)
			return fmt.Errorf("download %s: %w: got %s, want %s (the partial file was deleted)", u.Redacted(), ErrChecksum, got, want)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if err := os.Rename(partial, dest); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	syncDir(filepath.Dir(dest))
	return nil
}

// checkURL refuses what the guard refuses before any connection is made, so the error names
// the URL rather than a socket.
func checkURL(rawURL string, opts Options) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("download: %w: %v", ErrRefused, err)
	}
	if err := checkTarget(u, opts); err != nil {
		return nil, fmt.Errorf("download: %w", err)
	}
	return u, nil
}

// checkTarget checks a URL before any connection to it, for the first request and each redirect.
func checkTarget(u *url.URL, opts Options) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: %s: only http and https URLs are fetched", ErrRefused, u.Redacted())
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%w: %s: the URL has no host", ErrRefused, u.Redacted())
	}
	if !hostAllowed(u.Hostname(), opts.AllowHosts) {
		return fmt.Errorf("%w: %s: host %s is not on the download allowlist (%s)",
			ErrRefused, u.Redacted(), u.Hostname(), strings.Join(opts.AllowHosts, ", "))
	}
	return nil
}

func newClient(first *url.URL, opts Options) (*http.Client, error) {
	base := opts.HTTP
	if base == nil {
		base = &http.Client{}
	}
	var tr *http.Transport
	switch t := base.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = t.Clone()
	default:
		return nil, fmt.Errorf("download: Options.HTTP.Transport is a %T; it must be an *http.Transport so the address guard can be applied", t)
	}
	tr.Proxy = nil
	tr.DialContext = dialer(opts)
	tr.DialTLSContext = nil // TLS then runs over DialContext, so the guard sees every connection
	limit := opts.MaxRedirects
	if limit <= 0 {
		limit = DefaultMaxRedirects
	}
	c := *base
	c.Transport = tr
	c.Jar = nil // cookies are credentials too
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > limit {
			return fmt.Errorf("%w: more than %d", ErrTooManyRedirects, limit)
		}
		if err := checkTarget(req.URL, opts); err != nil {
			return err
		}
		// Credentials go to the host they were given for and nowhere else: a signed CDN
		// URL needs none, and a hostile redirect must not collect them. Stricter than
		// net/http, which keeps them for subdomains.
		if !strings.EqualFold(req.URL.Host, first.Host) {
			for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie"} {
				req.Header.Del(h)
			}
		}
		return nil
	}
	return &c, nil
}

// existing reports whether dest already holds the file.
func existing(dest, want string, progress func(done, total int64)) (bool, error) {
	fi, err := os.Stat(dest)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("download: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("download: %s exists and is not a regular file", dest)
	}
	if want != "" {
		f, err := os.Open(dest)
		if err != nil {
			return false, fmt.Errorf("download: %w", err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return false, fmt.Errorf("download: %w", err)
		}
		if hex.EncodeToString(h.Sum(nil)) != want {
			return false, nil // stale: fetch again, and the rename replaces it
		}
	}
	progress(fi.Size(), fi.Size())
	return true, nil
}

// fetch is one download in progress into an open partial file.
type fetch struct {
	client   *http.Client
	url      string
	shown    string // url without a password, for messages
	header   http.Header
	file     *os.File
	hash     hash.Hash
	progress func(done, total int64)
}

// run appends the rest of the file to the partial, restarting from zero when the server
// cannot resume.
func (d *fetch) run(ctx context.Context) error {
	have, err := d.file.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	for attempt := 0; ; attempt++ {
		resp, err := d.get(ctx, have)
		if err != nil {
			return err
		}
		start, total, err := resumePoint(resp, have)
		if errors.Is(err, errComplete) {
			resp.Body.Close()
			return d.finishPartial(have)
		}
		if err != nil {
			resp.Body.Close()
			if errors.Is(err, errRestart) && attempt == 0 {
				have = 0 // the partial does not fit what the server has now: start over
				if err := d.file.Truncate(0); err != nil {
					return fmt.Errorf("download: %w", err)
				}
				continue
			}
			return fmt.Errorf("download %s: %w", d.shown, err)
		}
		err = d.copy(ctx, resp.Body, start, total)
		resp.Body.Close()
		return err
	}
}

var (
	errRestart  = errors.New("cannot resume")
	errComplete = errors.New("partial file already complete")
)

// finishPartial hashes a partial that already holds the whole file.
func (d *fetch) finishPartial(size int64) error {
	d.hash = sha256.New()
	if _, err := io.Copy(d.hash, io.NewSectionReader(d.file, 0, size)); err != nil {
		return fmt.Errorf("download: reading the partial file: %w", err)
	}
	d.progress(size, size)
	return nil
}

func (d *fetch) get(ctx context.Context, from int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url, nil)
	if err != nil {
		return nil, fmt.Errorf("download: %w", err)
	}
	for k, v := range d.header {
		req.Header[k] = v
	}
	// A compressed answer would make byte offsets meaningless.
	req.Header.Set("Accept-Encoding", "identity")
	if from > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(from, 10)+"-")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in our own message
		}
		return nil, fmt.Errorf("download %s: %w", d.shown, err)
	}
	return resp, nil
}

// resumePoint decides where the body starts: 206 continues the partial, 200 replaces it. A 416
// means the partial is already complete (errComplete) or does not fit the file (errRestart).
func resumePoint(resp *http.Response, have int64) (start, total int64, err error) {
	switch resp.StatusCode {
	case http.StatusOK:
		total = resp.ContentLength
		if total < 0 {
			total = 0
		}
		return 0, total, nil
	case http.StatusPartialContent:
		first, size, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || first != have {
			return 0, 0, fmt.Errorf("%w: server answered range %q to a request from byte %d", errRestart, resp.Header.Get("Content-Range"), have)
		}
		return have, max(size, 0), nil
	case http.StatusRequestedRangeNotSatisfiable:
		// "bytes */size": a partial of exactly size bytes was complete but not yet renamed.
		if _, size, ok := parseContentRange(strings.Replace(resp.Header.Get("Content-Range"), "*/", "0-0/", 1)); ok && size == have {
			return 0, 0, errComplete
		}
		return 0, 0, fmt.Errorf("%w: server refused to resume at byte %d", errRestart, have)
	default:
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		msg := strings.TrimSpace(string(snippet))
		if msg != "" {
			msg = ": " + msg
		}
		return 0, 0, fmt.Errorf("server answered %s%s", resp.Status, msg)
	}
}

// parseContentRange reads "bytes first-last/size" (size may be "*": -1).
func parseContentRange(s string) (first, size int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, false
	}
	span, sz, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	a, _, found := strings.Cut(span, "-")
	if !found {
		return 0, 0, false
	}
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 {
		return 0, 0, false
	}
	size = -1
	if sz != "*" {
		if size, err = strconv.ParseInt(sz, 10, 64); err != nil || size < 0 {
			return 0, 0, false
		}
	}
	return first, size, true
}

// copy hashes what the partial already holds up to start, then appends the body.
func (d *fetch) copy(ctx context.Context, body io.Reader, start, total int64) error {
	d.hash = sha256.New()
	if start == 0 {
		if err := d.file.Truncate(0); err != nil {
			return fmt.Errorf("download: %w", err)
		}
	} else {
		if _, err := io.Copy(d.hash, io.NewSectionReader(d.file, 0, start)); err != nil {
			return fmt.Errorf("download: reading the partial file: %w", err)
		}
	}
	if _, err := d.file.Seek(start, io.SeekStart); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	done := start
	d.progress(done, total)
	last := time.Now()
	buf := make([]byte, 256<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := d.file.Write(buf[:n]); err != nil {
				return fmt.Errorf("download: %w", err)
			}
			d.hash.Write(buf[:n])
			done += int64(n)
			if time.Since(last) >= progressEvery {
				d.progress(done, total)
				last = time.Now()
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("download %s stopped at byte %d (kept for resuming): %w", d.shown, done, ctx.Err())
			}
			return fmt.Errorf("download %s stopped at byte %d (kept for resuming): %w", d.shown, done, rerr)
		}
	}
	if total > 0 && done != total {
		return fmt.Errorf("download %s: got %d bytes, expected %d (kept for resuming)", d.shown, done, total)
	}
	d.progress(done, max(total, done))
	return nil
}

// syncDir makes a rename durable. Errors are ignored: some filesystems cannot sync a directory,
// and the file itself is already synced.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
