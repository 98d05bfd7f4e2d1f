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
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmkube/mesh/internal/atomicfile"
	"github.com/llmkube/mesh/internal/backoff"
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
	// AllowHostsWhy is said after a refusal by AllowHosts: why the list is what it is and what
	// to do instead ("the demo is offline: …"); "" says nothing more.
	AllowHostsWhy string
	// MaxRedirects limits the redirects followed; 0 means DefaultMaxRedirects.
	MaxRedirects int
	// Header is sent with the first request only, never to another host: the place for a
	// token (Authorization: Bearer …).
	Header http.Header
	// HTTP is the client to use (its timeout and TLS settings); nil means a fresh one. Its
	// Transport must be nil or an *http.Transport: a clone of it gets the address guard and no
	// proxy, since a proxy would hide the real destination from the guard.
	HTTP *http.Client
	// MinFree is the space a download leaves free on the destination's disk: checked before
	// the body is read (against what remains to fetch) and while it is written. 0 means
	// DefaultMinFree.
	MinFree int64
	// Retries is how often a download cut mid-way (a dropped connection, a 5xx) is resumed
	// before it fails; 0 means DefaultRetries, a negative number none.
	Retries int
	// RetryBackoff is the first wait before a retry, doubled each time up to a minute; 0 means
	// DefaultRetryBackoff.
	RetryBackoff time.Duration
	// Peers, when it finds holders of a file whose SHA-256 is wanted, is asked for it before the
	// origin (see FetchWith); nil asks no peer.
	Peers *Peers
	// PeerStall is how long a peer may send nothing before the next is tried; 0 means
	// DefaultPeerStall.
	PeerStall time.Duration
	// Log hears which peers served a file and which were dropped; nil discards.
	Log *slog.Logger
}

// Defaults for Options' zero values.
const (
	DefaultMinFree      int64 = 512 << 20
	DefaultRetries            = 4
	DefaultRetryBackoff       = time.Second
	maxRetryBackoff           = time.Minute
)

// Want is what the finished file must be; a zero field is not checked.
type Want struct {
	// SHA256 is the file's hex digest: a mismatch deletes the partial (ErrChecksum).
	SHA256 string
	// Bytes is the file's length when it was sized: a server that now offers another length
	// is refused before its body is read (ErrNotSized), and no download writes past it.
	Bytes int64
}

// ErrChecksum is wrapped when a finished download does not match its sha256.
var ErrChecksum = errors.New("sha256 mismatch")

// ErrTooManyRedirects is wrapped when a download is redirected more than allowed.
var ErrTooManyRedirects = errors.New("too many redirects")

// ErrBusy is wrapped when another download of the same file is in progress.
var ErrBusy = errors.New("download already in progress")

// ErrNotSized is wrapped when the server offers a file of another length than the one sized,
// or sends more bytes than it announced: the partial is deleted.
var ErrNotSized = errors.New("not the file that was sized")

// ErrNoSpace is wrapped when the disk has not enough room for the rest of the file (keeping
// Options.MinFree free). The partial is kept for a resume once there is room.
var ErrNoSpace = errors.New("not enough free disk space")

// progressEvery spaces progress reports: often enough for a live bar, rare enough that a
// multi-gigabyte file does not make hundreds of thousands of calls.
const progressEvery = 200 * time.Millisecond

// spaceCheckEvery spaces the free-space checks while a body is written.
const spaceCheckEvery = 64 << 20

// Fetch downloads rawURL to dest. An existing dest is kept when it matches want (its digest,
// its length). A ".partial" left by an earlier attempt is resumed with a Range request; a
// server that ignores the range gets a fresh start; a transfer cut mid-way is resumed after a
// backoff (Options.Retries). The body is never read past the announced or wanted length, and
// the disk keeps Options.MinFree free. When want.SHA256 is given the finished file is checked
// and, on a mismatch, the partial is deleted and ErrChecksum returned. The file is fsynced and
// renamed into place only when complete. progress, when not nil, is called with the bytes done
// and the total (0 when the server does not say). Cancelling ctx stops the download and keeps
// the partial for a later resume.
func Fetch(ctx context.Context, rawURL, dest string, want Want, opts Options, progress func(done, total int64)) error {
	if progress == nil {
		progress = func(int64, int64) {}
	}
	return FetchWith(ctx, rawURL, dest, want, opts, func(p Progress) { progress(p.Done, p.Total) })
}

// FetchWith is Fetch, asking the mesh's peers first: when want names the file's SHA-256 and
// opts.Peers finds hosts that hold it, the file is copied from them (split across several at
// once when it is large), hashed as it arrives, and the origin is asked only when no peer
// delivers. A peer that sends another file's bytes is dropped for this file and logged by name;
// nothing unverified is renamed into place. progress says where the bytes come from.
func FetchWith(ctx context.Context, rawURL, dest string, want Want, opts Options, report func(Progress)) error {
	if report == nil {
		report = func(Progress) {}
	}
	progress := func(done, total int64) { report(Progress{Done: done, Total: total}) }
	sum := strings.ToLower(strings.TrimSpace(want.SHA256))
	if sum != "" {
		if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("download: %q is not a sha256 (64 hex digits)", want.SHA256)
		}
	}
	if want.Bytes < 0 {
		return fmt.Errorf("download: a length of %d bytes", want.Bytes)
	}
	want.SHA256 = sum
	u, err := checkURL(rawURL, opts)
	if err != nil {
		return err
	}
	client, err := NewClient(opts)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o750); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	partial := dest + PartialSuffix
	f, err := lockPartial(partial)
	if err != nil {
		return fmt.Errorf("download %s: %w", filepath.Base(dest), err)
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

	d := &fetch{client: client, url: u.String(), shown: u.Redacted(), header: opts.Header, file: f, progress: progress,
		want: want, opts: opts}
	d.progressFrom = func(done, total int64, from string) { report(Progress{Done: done, Total: total, From: from}) }
	fromPeer := false
	if holders := opts.Peers.Holders(sum); sum != "" && len(holders) > 0 {
		log := opts.Log
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		before, _ := f.Seek(0, io.SeekEnd)
		who, err := d.fromPeers(ctx, holders, log)
		switch {
		case err == nil:
			fromPeer = true
			log.Info("copied a file from peers", "file", filepath.Base(dest), "from", who, "sha256", sum)
		case errors.Is(err, errPeersFailed):
			log.Info("no peer delivered the file; asking the origin", "file", filepath.Base(dest), "sha256", sum, "url", d.shown)
			// Bytes a failed peer left are unverified: the origin is not asked to finish them,
			// or one bad peer would fail the whole download at the last check.
			if after, _ := f.Seek(0, io.SeekEnd); after != before {
				if err := f.Truncate(0); err != nil {
					return fmt.Errorf("download: %w", err)
				}
			}
		default:
			return err
		}
	}
	if !fromPeer {
		if err := d.run(ctx); err != nil {
			if errors.Is(err, ErrNotSized) {
				f.Truncate(0) // another file's bytes: nothing to resume (the deferred cleanup removes it)
			}
			return err
		}
	}
	if sum != "" {
		if got := hex.EncodeToString(d.hash.Sum(nil)); got != sum {
			f.Close()
			os.Remove(partial)
			return fmt.Errorf("download %s: %w: got %s, want %s (the partial file was deleted)", u.Redacted(), ErrChecksum, got, sum)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if err := atomicfile.Rename(partial, dest); err != nil {
		return fmt.Errorf("download: %w", err)
	}
	// The file was hashed whole on its way in: record it, so the host can serve it to its
	// peers by content without reading it again. A record that cannot be written is made
	// again later by the model store, so a failure here costs only time.
	_ = RecordDigest(dest, hex.EncodeToString(d.hash.Sum(nil)))
	return nil
}

// lockPartial opens (or creates) a partial file and locks it: two downloads appending to one
// partial would interleave their bytes. A partial that Discard deleted between the open and
// the lock is opened again, so the download does not write into a file with no name.
func lockPartial(partial string) (*os.File, error) {
	for range 3 {
		f, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o640)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			return nil, ErrBusy
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(partial)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return f, nil
		}
		f.Close()
	}
	return nil, ErrBusy
}

// Discard deletes the partial download of dest, unless a download is writing it (ErrBusy): a
// placement that failed or was deleted mid-pull leaves one, and on a full disk it is the space
// to win back.
func Discard(dest string) error {
	partial := dest + PartialSuffix
	f, err := os.OpenFile(partial, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("download %s: %w", filepath.Base(dest), ErrBusy)
	}
	if err := os.Remove(partial); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("download: %w", err)
	}
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
		why := ""
		if opts.AllowHostsWhy != "" {
			why = "; " + opts.AllowHostsWhy
		}
		return fmt.Errorf("%w: %s: host %s is not on the download allowlist (%s)%s",
			ErrRefused, u.Redacted(), u.Hostname(), strings.Join(opts.AllowHosts, ", "), why)
	}
	return nil
}

// existing reports whether dest already holds the file.
func existing(dest string, want Want, progress func(done, total int64)) (bool, error) {
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
	if want.Bytes > 0 && fi.Size() != want.Bytes {
		return false, nil // not the file sized: fetch it, and the rename replaces it
	}
	if want.SHA256 != "" {
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
		if hex.EncodeToString(h.Sum(nil)) != want.SHA256 {
			return false, nil // stale: fetch again, and the rename replaces it
		}
		_ = RecordDigest(dest, want.SHA256) // hashed now: saved for serving peers (see Fetch)
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
	// progressFrom reports bytes copied from peers, and which.
	progressFrom func(done, total int64, from string)
	want         Want
	opts         Options
}

// run fetches the rest of the file into the partial, resuming after a backoff when the
// transfer is cut (a transient failure) until the retries are spent.
func (d *fetch) run(ctx context.Context) error {
	retries := d.opts.Retries
	if retries == 0 {
		retries = DefaultRetries
	}
	first := d.opts.RetryBackoff
	if first <= 0 {
		first = DefaultRetryBackoff
	}
	wait := backoff.New(first, maxRetryBackoff)
	for attempt := 0; ; attempt++ {
		err := d.attempt(ctx)
		var t transient
		if err == nil || !errors.As(err, &t) || attempt >= retries || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (then: %w)", err, ctx.Err())
		case <-time.After(wait.Next()):
		}
	}
}

// transient marks a failure worth a retry: the transfer was cut or the server was briefly
// unable, not a refusal or a wrong file.
type transient struct{ error }

func (t transient) Unwrap() error { return t.error }

// attempt appends the rest of the file to the partial, restarting from zero when the server
// cannot resume.
func (d *fetch) attempt(ctx context.Context) error {
	have, err := d.file.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	for restarted := false; ; restarted = true {
		resp, err := d.get(ctx, have)
		if err != nil {
			return err
		}
		start, total, err := resumePoint(resp, have)
		if errors.Is(err, errComplete) {
			resp.Body.Close()
			if d.want.Bytes > 0 && have != d.want.Bytes {
				return fmt.Errorf("download %s: %w: the server has %d bytes, %d were sized", d.shown, ErrNotSized, have, d.want.Bytes)
			}
			return d.finishPartial(have)
		}
		if err != nil {
			resp.Body.Close()
			if errors.Is(err, errRestart) && !restarted {
				have = 0 // the partial does not fit what the server has now: start over
				if err := d.file.Truncate(0); err != nil {
					return fmt.Errorf("download: %w", err)
				}
				continue
			}
			return fmt.Errorf("download %s: %w", d.shown, err)
		}
		if d.want.Bytes > 0 {
			if total > 0 && total != d.want.Bytes {
				resp.Body.Close()
				return fmt.Errorf("download %s: %w: the server offers %d bytes, the file sized had %d", d.shown, ErrNotSized, total, d.want.Bytes)
			}
			total = d.want.Bytes
		}
		if total > 0 {
			if err := d.roomFor(total - start); err != nil {
				resp.Body.Close()
				return err
			}
		}
		err = d.copy(ctx, resp.Body, start, total)
		resp.Body.Close()
		return err
	}
}

// roomFor checks that n more bytes fit on the destination's disk with MinFree left over; the
// partial is kept for resuming.
func (d *fetch) roomFor(n int64) error {
	return d.room(n, "kept for resuming")
}

// room is roomFor, saying what becomes of the partial.
func (d *fetch) room(n int64, partial string) error {
	free, err := freeSpace(filepath.Dir(d.file.Name()))
	if err != nil {
		return nil // a filesystem that cannot say: the write itself will fail when full
	}
	minFree := d.opts.MinFree
	if minFree <= 0 {
		minFree = DefaultMinFree
	}
	if free-n < minFree {
		return fmt.Errorf("download %s: %w: %d more bytes needed, %d free, %d to be kept free (%s)", d.shown, ErrNoSpace, n, free, minFree, partial)
	}
	return nil
}

// writeErr is a failed write to the partial, saying what becomes of it: a disk that filled
// since the last check (another writer got there first) is ErrNoSpace, naming the folder.
func (d *fetch) writeErr(err error, partial string) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("download %s: %w: the disk of %s filled up during the copy (%s)", d.shown, ErrNoSpace, filepath.Dir(d.file.Name()), partial)
	}
	return fmt.Errorf("download: %w", err)
}

// freeSpace is what an unprivileged writer may still use on dir's filesystem.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
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
		err = fmt.Errorf("download %s: %w", d.shown, Redact(err))
		if ctx.Err() == nil && !errors.Is(err, ErrRefused) && !errors.Is(err, ErrTooManyRedirects) {
			err = transient{err}
		}
		return nil, err
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
		first, size, ok := ParseContentRange(resp.Header.Get("Content-Range"))
		if !ok || first != have {
			return 0, 0, fmt.Errorf("%w: server answered range %q to a request from byte %d", errRestart, resp.Header.Get("Content-Range"), have)
		}
		return have, max(size, 0), nil
	case http.StatusRequestedRangeNotSatisfiable:
		// "bytes */size": a partial of exactly size bytes was complete but not yet renamed.
		if _, size, ok := ParseContentRange(strings.Replace(resp.Header.Get("Content-Range"), "*/", "0-0/", 1)); ok && size == have {
			return 0, 0, errComplete
		}
		return 0, 0, fmt.Errorf("%w: server refused to resume at byte %d", errRestart, have)
	default:
		// The status only: the body is the remote's, and a refusal must not carry it back to
		// whoever asked (it would turn the agent into a reader of the LAN's pages).
		err := fmt.Errorf("server answered HTTP %d", resp.StatusCode)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout {
			return 0, 0, transient{err}
		}
		return 0, 0, err
	}
}

// ParseContentRange reads "bytes first-last/size" (size may be "*": -1): a remote header, so
// every number is checked.
func ParseContentRange(s string) (first, size int64, ok bool) {
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

// copy hashes what the partial already holds up to start, then appends the body: never past
// total (when known), and only while the disk keeps MinFree free.
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
	if total > 0 {
		// One byte more than is due, to notice a server that sends more than it said.
		body = io.LimitReader(body, total-start+1)
	}
	done := start
	d.progress(done, total)
	last := time.Now()
	var sinceCheck int64
	buf := make([]byte, 256<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if total > 0 && done+int64(n) > total {
				return fmt.Errorf("download %s: %w: the server sent more than the %d bytes due (the partial file was deleted)", d.shown, ErrNotSized, total)
			}
			if _, err := d.file.Write(buf[:n]); err != nil {
				return d.writeErr(err, "kept for resuming")
			}
			d.hash.Write(buf[:n])
			done += int64(n)
			if sinceCheck += int64(n); sinceCheck >= spaceCheckEvery {
				// Others write to this disk too: what was free at the start may not be now.
				sinceCheck = 0
				if err := d.roomFor(0); err != nil {
					return err
				}
			}
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
			return transient{fmt.Errorf("download %s stopped at byte %d (kept for resuming): %w", d.shown, done, Redact(rerr))}
		}
	}
	if total > 0 && done != total {
		return transient{fmt.Errorf("download %s: got %d bytes, expected %d (kept for resuming)", d.shown, done, total)}
	}
	d.progress(done, max(total, done))
	return nil
}
