package download

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blob is a model file's stand-in: deterministic bytes and their sha256.
func blob(n int) ([]byte, string) {
	b := make([]byte, n)
	var seed [32]byte
	seed[0] = byte(n)
	rand.NewChaCha8(seed).Read(b)
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// fileServer serves content at every path with Range support (http.ServeContent), recording the
// Range headers and bytes it sent.
type fileServer struct {
	*httptest.Server
	content []byte
	mu      sync.Mutex
	ranges  []string
	auth    []string
	sent    atomic.Int64
}

func newFileServer(t *testing.T, content []byte) *fileServer {
	fs := &fileServer{content: content}
	fs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fs.mu.Lock()
		fs.ranges = append(fs.ranges, r.Header.Get("Range"))
		fs.auth = append(fs.auth, r.Header.Get("Authorization"))
		fs.mu.Unlock()
		cw := &countingWriter{ResponseWriter: w, n: &fs.sent}
		http.ServeContent(cw, r, "model.gguf", time.Time{}, bytes.NewReader(fs.content))
	}))
	t.Cleanup(fs.Close)
	return fs
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// loopback lets the tests' servers be reached, and retries wait a moment, not seconds.
var loopback = Options{AllowPrivate: true, RetryBackoff: 5 * time.Millisecond}

func TestFetchVerifiesAndRenames(t *testing.T) {
	content, sum := blob(3 << 20)
	srv := newFileServer(t, content)
	dest := filepath.Join(t.TempDir(), "models", "m.gguf")

	var calls [][2]int64
	err := Fetch(t.Context(), srv.URL+"/m.gguf", dest, Want{SHA256: sum}, loopback, func(done, total int64) {
		calls = append(calls, [2]int64{done, total})
	})
	require.NoError(t, err)
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(content, got), "downloaded bytes differ")
	assert.NoFileExists(t, dest+PartialSuffix)
	require.NotEmpty(t, calls)
	assert.Equal(t, [2]int64{0, int64(len(content))}, calls[0])
	assert.Equal(t, [2]int64{int64(len(content)), int64(len(content))}, calls[len(calls)-1])
	for i := 1; i < len(calls); i++ {
		assert.GreaterOrEqual(t, calls[i][0], calls[i-1][0], "progress went backwards")
	}

	// A second fetch finds the verified file and asks the server nothing.
	before := len(srv.ranges)
	require.NoError(t, Fetch(t.Context(), srv.URL+"/m.gguf", dest, Want{SHA256: sum}, loopback, nil))
	assert.Len(t, srv.ranges, before)
}

func TestGuardRefusesLoopbackByDefault(t *testing.T) {
	content, _ := blob(1024)
	srv := newFileServer(t, content)
	dest := filepath.Join(t.TempDir(), "m.gguf")

	err := Fetch(t.Context(), srv.URL+"/m.gguf", dest, Want{}, Options{}, nil)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "127.0.0.1")
	assert.Contains(t, err.Error(), "a loopback address")
	assert.Contains(t, err.Error(), "started with --allow-private-downloads", "the refusal names the flag that allows it")
	assert.NotContains(t, err.Error(), "allowlist", "no flag sets one")
	assert.Empty(t, srv.ranges, "the server must not be reached")
	assert.NoFileExists(t, dest)
	assert.NoFileExists(t, dest+PartialSuffix, "a refused download leaves nothing behind")
}

// A name is checked by the address it resolves to at dial time, not by how it looks.
func TestGuardChecksResolvedAddress(t *testing.T) {
	content, _ := blob(1024)
	srv := newFileServer(t, content)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	err := Fetch(t.Context(), "http://localhost:"+port+"/m.gguf", filepath.Join(t.TempDir(), "m.gguf"), Want{}, Options{}, nil)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "localhost resolves to")
	assert.Contains(t, err.Error(), "loopback")
	assert.Empty(t, srv.ranges)
}

func TestClassify(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1":        "loopback",
		"::1":              "loopback",
		"::ffff:127.0.0.1": "loopback",
		"10.1.2.3":         "private",
		"172.20.0.1":       "private",
		"192.168.1.10":     "private",
		"fd00::1":          "private",
		"169.254.169.254":  "link-local",
		"fe80::1":          "link-local",
		"100.100.1.1":      "carrier-grade NAT (tailnet)",
		"0.0.0.0":          "unspecified",
		"224.0.0.251":      "multicast",
		"8.8.8.8":          "",
		"2606:4700::1111":  "",
		"172.32.0.1":       "",
	} {
		assert.Equal(t, want, classify(netip.MustParseAddr(addr)), addr)
	}
}

func TestAllowHosts(t *testing.T) {
	content, sum := blob(4096)
	srv := newFileServer(t, content)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	dir := t.TempDir()

	// Naming the host is consent to its loopback address, without AllowPrivate.
	opts := Options{AllowHosts: []string{"127.0.0.1"}}
	require.NoError(t, Fetch(t.Context(), srv.URL+"/m.gguf", filepath.Join(dir, "a.gguf"), Want{SHA256: sum}, opts, nil))

	// Any other host is refused before a connection is made.
	err := Fetch(t.Context(), "http://localhost:"+port+"/m.gguf", filepath.Join(dir, "b.gguf"), Want{}, opts, nil)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "host localhost is not on the download allowlist (127.0.0.1)")
	assert.NotContains(t, err.Error(), "; ", "no reason given, none said")

	// The reason for the list follows the refusal.
	opts.AllowHostsWhy = "this mesh is offline"
	err = Fetch(t.Context(), "http://localhost:"+port+"/m.gguf", filepath.Join(dir, "b.gguf"), Want{}, opts, nil)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "not on the download allowlist (127.0.0.1); this mesh is offline")

	assert.True(t, hostAllowed("cdn-lfs.hf.co", []string{".hf.co"}))
	assert.False(t, hostAllowed("evilhf.co", []string{".hf.co"}))
	assert.True(t, hostAllowed("HuggingFace.co.", []string{"huggingface.co"}))
}

func TestRefusesOtherSchemes(t *testing.T) {
	for _, u := range []string{"file:///etc/passwd", "ftp://example.com/m.gguf", "http:///nohost", "://bad"} {
		err := Fetch(t.Context(), u, filepath.Join(t.TempDir(), "m.gguf"), Want{}, loopback, nil)
		require.ErrorIs(t, err, ErrRefused, u)
	}
}

func TestResume(t *testing.T) {
	content, sum := blob(2 << 20)
	srv := newFileServer(t, content)
	dest := filepath.Join(t.TempDir(), "m.gguf")
	half := len(content) / 2
	require.NoError(t, os.WriteFile(dest+PartialSuffix, content[:half], 0o640))

	var first int64 = -1
	require.NoError(t, Fetch(t.Context(), srv.URL+"/m.gguf", dest, Want{SHA256: sum}, loopback, func(done, total int64) {
		if first < 0 {
			first = done
		}
		assert.Equal(t, int64(len(content)), total)
	}))
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(content, got))
	assert.Equal(t, []string{"bytes=" + strconv.Itoa(half) + "-"}, srv.ranges)
	assert.Equal(t, int64(len(content)-half), srv.sent.Load(), "only the missing half is sent")
	assert.Equal(t, int64(half), first, "progress starts where the partial ended")
}

// A server that ignores Range answers 200 with the whole file: the partial is replaced.
func TestResumeServerIgnoresRange(t *testing.T) {
	content, sum := blob(64 << 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(content)))
		w.Write(content)
	}))
	t.Cleanup(srv.Close)
	dest := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, os.WriteFile(dest+PartialSuffix, []byte("stale bytes from another file"), 0o640))

	require.NoError(t, Fetch(t.Context(), srv.URL, dest, Want{SHA256: sum}, loopback, nil))
	got, _ := os.ReadFile(dest)
	assert.True(t, bytes.Equal(content, got))
}

// A complete partial that was never renamed (a crash between the two) gets a 416: it is
// verified and renamed without fetching again.
func TestResumeCompletePartial(t *testing.T) {
	content, sum := blob(8 << 10)
	srv := newFileServer(t, content)
	dest := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, os.WriteFile(dest+PartialSuffix, content, 0o640))

	require.NoError(t, Fetch(t.Context(), srv.URL, dest, Want{SHA256: sum}, loopback, nil))
	got, _ := os.ReadFile(dest)
	assert.True(t, bytes.Equal(content, got))
	assert.Equal(t, []string{"bytes=" + strconv.Itoa(len(content)) + "-"}, srv.ranges)
	assert.Less(t, srv.sent.Load(), int64(100), "only the 416's short message was sent")
	assert.NoFileExists(t, dest+PartialSuffix)
}

// A connection cut halfway keeps what arrived; the next fetch resumes from there.
// cutServer serves content with ranges, but cuts the connection after cutAt bytes on the
// first cuts requests.
func cutServer(t *testing.T, content []byte, cutAt, cuts int) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var ranges []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ranges = append(ranges, r.Header.Get("Range"))
		n := len(ranges)
		mu.Unlock()
		if n <= cuts {
			from := 0
			if rg := r.Header.Get("Range"); rg != "" {
				from, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
				w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, len(content)-1, len(content)))
				w.Header().Set("Content-Length", strconv.Itoa(len(content)-from))
				w.WriteHeader(http.StatusPartialContent)
			} else {
				w.Header().Set("Content-Length", strconv.Itoa(len(content)))
				w.WriteHeader(http.StatusOK)
			}
			w.Write(content[from : from+cutAt])
			w.(http.Flusher).Flush()
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		http.ServeContent(w, r, "m.gguf", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ranges)
	}
}

// A transfer cut mid-way is resumed after a backoff, from the byte it stopped at.
func TestCutConnectionIsRetried(t *testing.T) {
	content, sum := blob(1 << 20)
	srv, ranges := cutServer(t, content, 300_000, 2)
	dest := filepath.Join(t.TempDir(), "m.gguf")

	require.NoError(t, Fetch(t.Context(), srv.URL, dest, Want{SHA256: sum, Bytes: int64(len(content))}, loopback, nil))
	got, _ := os.ReadFile(dest)
	assert.True(t, bytes.Equal(content, got))
	assert.Equal(t, []string{"", "bytes=300000-", "bytes=600000-"}, ranges())
}

// When the retries are spent the partial is kept, and a later Fetch resumes it.
func TestCutConnectionRetriesSpent(t *testing.T) {
	content, sum := blob(1 << 20)
	srv, ranges := cutServer(t, content, 300_000, 2)
	dest := filepath.Join(t.TempDir(), "m.gguf")
	opts := loopback
	opts.Retries = 1

	err := Fetch(t.Context(), srv.URL, dest, Want{SHA256: sum}, opts, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kept for resuming")
	fi, err := os.Stat(dest + PartialSuffix)
	require.NoError(t, err)
	assert.Equal(t, int64(600_000), fi.Size())
	assert.NoFileExists(t, dest)

	require.NoError(t, Fetch(t.Context(), srv.URL, dest, Want{SHA256: sum}, opts, nil))
	got, _ := os.ReadFile(dest)
	assert.True(t, bytes.Equal(content, got))
	assert.Equal(t, []string{"", "bytes=300000-", "bytes=600000-"}, ranges())
}

// A refusal (here a 404) is not retried.
func TestRefusalIsNotRetried(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	err := Fetch(t.Context(), srv.URL, filepath.Join(t.TempDir(), "m"), Want{}, loopback, nil)
	require.Error(t, err)
	assert.Equal(t, int64(1), hits.Load())
}

// A server that offers another length than the file sized is refused before its body is read.
func TestOtherLengthThanSizedIsRefused(t *testing.T) {
	content, _ := blob(1 << 20)
	srv := newFileServer(t, content)
	dest := filepath.Join(t.TempDir(), "m.gguf")
	err := Fetch(t.Context(), srv.URL, dest, Want{Bytes: 300_000}, loopback, nil)
	require.ErrorIs(t, err, ErrNotSized)
	assert.NoFileExists(t, dest)
	assert.NoFileExists(t, dest+PartialSuffix, "nothing of the other file stays on disk")
}

// endless announces nothing and sends bytes for as long as the client reads.
func endless(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A small header followed by endless bytes cannot fill the disk: the download stops at the
// length sized and deletes what it got.
func TestEndlessBodyStopsAtTheSizedLength(t *testing.T) {
	srv := endless(t)
	dest := filepath.Join(t.TempDir(), "m.gguf")
	err := Fetch(t.Context(), srv.URL, dest, Want{Bytes: 1 << 20}, loopback, nil)
	require.ErrorIs(t, err, ErrNotSized)
	assert.Contains(t, err.Error(), "sent more than the 1048576 bytes due")
	assert.NoFileExists(t, dest+PartialSuffix)
	assert.NoFileExists(t, dest)
}

// The disk's free space is checked before the body (against what is announced) and while it is
// written (here with nothing announced: the check during the pull is what stops it).
func TestFreeSpaceIsChecked(t *testing.T) {
	dir := t.TempDir()
	free, err := freeSpace(dir)
	require.NoError(t, err)

	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.FormatInt(free+1<<40, 10))
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(huge.Close)
	err = Fetch(t.Context(), huge.URL, filepath.Join(dir, "a"), Want{}, loopback, nil)
	require.ErrorIs(t, err, ErrNoSpace)
	assert.NoFileExists(t, filepath.Join(dir, "a"+PartialSuffix))

	// No free space would be enough once the pull is under way: it stops within one check.
	opts := loopback
	opts.MinFree = free + 1<<40
	err = Fetch(t.Context(), endless(t).URL, filepath.Join(dir, "b"), Want{}, opts, nil)
	require.ErrorIs(t, err, ErrNoSpace)
	fi, err := os.Stat(filepath.Join(dir, "b"+PartialSuffix))
	require.NoError(t, err, "the partial is kept for a resume once there is room")
	assert.LessOrEqual(t, fi.Size(), int64(spaceCheckEvery+256<<10))
}

func TestChecksumMismatch(t *testing.T) {
	content, _ := blob(64 << 10)
	srv := newFileServer(t, content)
	dest := filepath.Join(t.TempDir(), "m.gguf")
	wrong := strings.Repeat("ab", 32)

	err := Fetch(t.Context(), srv.URL, dest, Want{SHA256: wrong}, loopback, nil)
	require.ErrorIs(t, err, ErrChecksum)
	sum := sha256.Sum256(content)
	assert.Contains(t, err.Error(), "got "+hex.EncodeToString(sum[:]))
	assert.Contains(t, err.Error(), "want "+wrong)
	assert.Contains(t, err.Error(), "the partial file was deleted")
	assert.NoFileExists(t, dest)
	assert.NoFileExists(t, dest+PartialSuffix)
}

func TestBadChecksumArgument(t *testing.T) {
	err := Fetch(t.Context(), "http://127.0.0.1:1/m", filepath.Join(t.TempDir(), "m"), Want{SHA256: "xyz"}, loopback, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"xyz" is not a sha256`)
}

// redirector sends /r/N to /r/N-1 and serves content at /r/0.
func redirector(t *testing.T, content []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		if n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/r/%d", n-1), http.StatusFound)
			return
		}
		w.Write(content)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRedirectLimit(t *testing.T) {
	content, sum := blob(1024)
	srv := redirector(t, content)
	dir := t.TempDir()

	require.NoError(t, Fetch(t.Context(), srv.URL+"/r/5", filepath.Join(dir, "five"), Want{SHA256: sum}, loopback, nil))

	err := Fetch(t.Context(), srv.URL+"/r/6", filepath.Join(dir, "six"), Want{SHA256: sum}, loopback, nil)
	require.ErrorIs(t, err, ErrTooManyRedirects)
	assert.Contains(t, err.Error(), "too many redirects: more than 5")
	assert.NoFileExists(t, filepath.Join(dir, "six"))

	opts := loopback
	opts.MaxRedirects = 1
	err = Fetch(t.Context(), srv.URL+"/r/2", filepath.Join(dir, "two"), Want{SHA256: sum}, opts, nil)
	require.ErrorIs(t, err, ErrTooManyRedirects)
	assert.Contains(t, err.Error(), "more than 1")
}

func TestCredentialsStayOnTheirHost(t *testing.T) {
	content, sum := blob(1024)
	other := newFileServer(t, content)
	_, otherPort, _ := net.SplitHostPort(other.Listener.Addr().String())
	same := newFileServer(t, content)

	var firstAuth []string
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		firstAuth = append(firstAuth, r.Header.Get("Authorization"))
		switch r.URL.Path {
		case "/away": // another host (by name and port)
			http.Redirect(w, r, "http://localhost:"+otherPort+"/m.gguf", http.StatusFound)
		case "/here": // the same host
			http.Redirect(w, r, "/file", http.StatusFound)
		case "/file":
			w.Write(content)
		}
	}))
	t.Cleanup(first.Close)
	opts := Options{AllowPrivate: true, Header: http.Header{"Authorization": {"Bearer secret"}}}
	dir := t.TempDir()

	require.NoError(t, Fetch(t.Context(), first.URL+"/away", filepath.Join(dir, "a"), Want{SHA256: sum}, opts, nil))
	assert.Equal(t, []string{"Bearer secret"}, firstAuth)
	assert.Equal(t, []string{""}, other.auth, "the token must not follow a redirect to another host")

	firstAuth = nil
	require.NoError(t, Fetch(t.Context(), first.URL+"/here", filepath.Join(dir, "b"), Want{SHA256: sum}, opts, nil))
	assert.Equal(t, []string{"Bearer secret", "Bearer secret"}, firstAuth, "same host keeps it")
	assert.Empty(t, same.auth)
}

// A redirect to a private address is refused even when the first host was public-looking:
// each hop is checked at dial time.
func TestRedirectToRefusedHost(t *testing.T) {
	content, _ := blob(1024)
	target := newFileServer(t, content)
	_, port, _ := net.SplitHostPort(target.Listener.Addr().String())
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+port+"/m.gguf", http.StatusFound)
	}))
	t.Cleanup(first.Close)

	err := Fetch(t.Context(), first.URL, filepath.Join(t.TempDir(), "m"), Want{}, Options{AllowHosts: []string{"127.0.0.1"}}, nil)
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "host localhost is not on the download allowlist")
	assert.Empty(t, target.ranges)
}

func TestHTTPError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such file", http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	dest := filepath.Join(t.TempDir(), "m")
	err := Fetch(t.Context(), srv.URL, dest, Want{}, loopback, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTP 404")
	assert.NotContains(t, err.Error(), "no such file", "a remote body never comes back in the error")
	assert.NoFileExists(t, dest+PartialSuffix)
}

func TestBusy(t *testing.T) {
	content, _ := blob(1024)
	srv := newFileServer(t, content)
	dest := filepath.Join(t.TempDir(), "m.gguf")
	f, err := os.OpenFile(dest+PartialSuffix, os.O_RDWR|os.O_CREATE, 0o640)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))

	err = Fetch(t.Context(), srv.URL, dest, Want{}, loopback, nil)
	require.ErrorIs(t, err, ErrBusy)
	assert.Contains(t, err.Error(), "m.gguf")
	assert.FileExists(t, dest+PartialSuffix, "the other download's partial is left alone")
	assert.Empty(t, srv.ranges)
}

func TestCancelKeepsPartial(t *testing.T) {
	content, _ := blob(1 << 20)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(content)))
		w.Write(content[:1000])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	dest := filepath.Join(t.TempDir(), "m.gguf")
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		// Cancel once the first bytes are on disk.
		assert.Eventually(t, func() bool {
			fi, err := os.Stat(dest + PartialSuffix)
			return err == nil && fi.Size() == 1000
		}, 10*time.Second, 5*time.Millisecond)
		cancel()
	}()
	err := Fetch(ctx, srv.URL, dest, Want{}, loopback, nil)
	require.ErrorIs(t, err, context.Canceled)
	fi, err := os.Stat(dest + PartialSuffix)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), fi.Size())
}

func TestCustomTransportRefused(t *testing.T) {
	opts := Options{HTTP: &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, errors.New("unused")
	})}}
	err := Fetch(t.Context(), "https://example.com/m.gguf", filepath.Join(t.TempDir(), "m"), Want{}, opts, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must be an *http.Transport")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-9/10", "bytes 5-9/*", "bytes */10", "", "bytes -1-2/3", "bytes 1-2/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		first, size, ok := ParseContentRange(s)
		if ok && (first < 0 || size < -1) {
			t.Fatalf("%q: first %d size %d", s, first, size)
		}
	})
}
