package download

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/sim/simtest"
)

// peerServer is a peer serving content by range; corrupt flips a byte of what it sends, stall
// answers nothing until the test ends, cutAt closes the connection after that many bytes of the
// body, once.
type peerServer struct {
	*httptest.Server
	sent   atomic.Int64
	served atomic.Int32
}

type peerBehaviour struct {
	corrupt bool
	stall   bool
	cutAt   int64
}

func newPeer(t *testing.T, content []byte, b peerBehaviour) *peerServer {
	p := &peerServer{}
	var cut atomic.Bool
	quit := make(chan struct{})
	body := content
	if b.corrupt {
		body = bytes.Clone(content)
		body[len(body)/2] ^= 0xff
		body[0] ^= 0xff
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.served.Add(1)
		if b.stall && r.Header.Get("Range") != "bytes=0-0" {
			select {
			case <-quit:
			case <-r.Context().Done():
			}
			return
		}
		if b.cutAt > 0 && r.Header.Get("Range") != "bytes=0-0" && cut.CompareAndSwap(false, true) {
			w = &cutWriter{ResponseWriter: w, left: b.cutAt}
		}
		out := &countingWriter{ResponseWriter: w, n: &p.sent}
		http.ServeContent(out, r, "", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(func() { close(quit); p.Close() })
	return p
}

// cutWriter sends left bytes of the body, then breaks the connection.
type cutWriter struct {
	http.ResponseWriter
	left int64
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if int64(len(b)) > c.left {
		c.ResponseWriter.Write(b[:c.left])
		c.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	c.left -= int64(len(b))
	return c.ResponseWriter.Write(b)
}

func asPeer(name string, p *peerServer) Peer {
	return Peer{Name: name, URL: p.URL + "/v1/files/x", Client: p.Client()}
}

func peerOpts(t *testing.T, ps ...Peer) (Options, *simtest.Buffer) {
	var l simtest.Buffer
	opts := loopback
	opts.Peers = &Peers{}
	opts.Peers.Use(func(string) []Peer { return ps })
	opts.Log = slog.New(slog.NewTextHandler(&l, nil))
	opts.PeerStall = 2 * time.Second // far above a loopback copy's pauses, even under -race
	return opts, &l
}

// unreachable is an origin that cannot be reached: a closed port.
func unreachable(t *testing.T) string {
	s := httptest.NewServer(http.NotFoundHandler())
	u := s.URL
	s.Close()
	return u + "/model.gguf"
}

// copyFromPeers fetches the file with no origin reachable, and returns what landed.
func copyFromPeers(t *testing.T, opts Options, sum string, log *simtest.Buffer) []byte {
	dest := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, FetchWith(t.Context(), unreachable(t), dest, Want{SHA256: sum}, opts, nil), log.String())
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	return got
}

func TestFetchFromAPeerWithNoOrigin(t *testing.T) {
	content, sum := blob(3 << 20)
	a := newPeer(t, content, peerBehaviour{})
	opts, _ := peerOpts(t, asPeer("pi5-a", a))
	dest := filepath.Join(t.TempDir(), "m.gguf")
	var froms []string
	err := FetchWith(t.Context(), unreachable(t), dest, Want{SHA256: sum}, opts, func(p Progress) {
		if p.From != "" {
			froms = append(froms, p.From)
		}
	})
	require.NoError(t, err)
	got, _ := os.ReadFile(dest)
	assert.Equal(t, content, got)
	rec, ok := ReadDigest(dest)
	require.True(t, ok, "a verified copy records its digest beside it")
	assert.Equal(t, sum, rec.SHA256)
	require.NotEmpty(t, froms, "progress says where the bytes come from")
	for _, f := range froms {
		assert.Regexp(t, `^pi5-a over the LAN, \d+ MB/s$`, f)
	}
}

func TestCorruptingPeerIsDroppedAndAnotherUsed(t *testing.T) {
	content, sum := blob(2 << 20)
	bad := newPeer(t, content, peerBehaviour{corrupt: true})
	good := newPeer(t, content, peerBehaviour{})
	opts, log := peerOpts(t, asPeer("evil", bad), asPeer("pi5-b", good))
	got := copyFromPeers(t, opts, sum, log)
	assert.Equal(t, content, got)
	assert.Contains(t, log.String(), "peer=evil")
	assert.Contains(t, log.String(), "not the file")
}

func TestCorruptingPeersAloneLandNothing(t *testing.T) {
	content, sum := blob(1 << 20)
	bad := newPeer(t, content, peerBehaviour{corrupt: true})
	opts, _ := peerOpts(t, asPeer("evil", bad))
	dest := filepath.Join(t.TempDir(), "m.gguf")
	err := FetchWith(t.Context(), unreachable(t), dest, Want{SHA256: sum}, opts, nil)
	require.Error(t, err, "no peer delivered, and the origin is unreachable")
	assert.NoFileExists(t, dest)
}

func TestSplitAcrossPeersCatchesACorruptOne(t *testing.T) {
	content, sum := blob(splitAbove + 3<<20)
	good := newPeer(t, content, peerBehaviour{})
	bad := newPeer(t, content, peerBehaviour{corrupt: true})
	opts, log := peerOpts(t, asPeer("a-good", good), asPeer("b-evil", bad))
	got := copyFromPeers(t, opts, sum, log)
	assert.True(t, bytes.Equal(content, got))
	assert.Contains(t, log.String(), "b-evil")
}

func TestSplitAcrossTwoPeers(t *testing.T) {
	content, sum := blob(splitAbove + 5<<20)
	a := newPeer(t, content, peerBehaviour{})
	b := newPeer(t, content, peerBehaviour{})
	opts, log := peerOpts(t, asPeer("a", a), asPeer("b", b))
	got := copyFromPeers(t, opts, sum, log)
	assert.True(t, bytes.Equal(content, got))
	assert.Greater(t, a.sent.Load(), int64(len(content)/3), "each peer sent a share")
	assert.Greater(t, b.sent.Load(), int64(len(content)/3), "each peer sent a share")
}

func TestCutCopyResumesFromTheNextPeer(t *testing.T) {
	content, sum := blob(4 << 20)
	cut := newPeer(t, content, peerBehaviour{cutAt: 1 << 20})
	other := newPeer(t, content, peerBehaviour{})
	opts, log := peerOpts(t, asPeer("a-cut", cut), asPeer("b", other))
	got := copyFromPeers(t, opts, sum, log)
	assert.True(t, bytes.Equal(content, got))
	assert.Contains(t, log.String(), "peer=a-cut")
	assert.Less(t, other.sent.Load(), int64(len(content)), "the second peer sent only the rest: the copy resumed with a range")
}

func TestStallingPeerTimesOutToTheNext(t *testing.T) {
	content, sum := blob(1 << 20)
	stall := newPeer(t, content, peerBehaviour{stall: true})
	good := newPeer(t, content, peerBehaviour{})
	opts, log := peerOpts(t, asPeer("a-stall", stall), asPeer("b", good))
	dest := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, FetchWith(t.Context(), unreachable(t), dest, Want{SHA256: sum}, opts, nil))
	assert.Contains(t, log.String(), "peer=a-stall")
}

func TestNoPeerHoldsItTheOriginServes(t *testing.T) {
	content, sum := blob(1 << 20)
	origin := newFileServer(t, content)
	opts, log := peerOpts(t) // nobody holds it
	dest := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, FetchWith(t.Context(), origin.URL, dest, Want{SHA256: sum}, opts, nil))
	assert.NotContains(t, log.String(), "peer=")

	// A peer that has no such file (404) is left, and the origin serves.
	missing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(missing.Close)
	opts, log = peerOpts(t, Peer{Name: "empty", URL: missing.URL, Client: missing.Client()})
	dest = filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, FetchWith(t.Context(), origin.URL, dest, Want{SHA256: sum}, opts, nil))
	assert.Contains(t, log.String(), "peer=empty")
	assert.Contains(t, log.String(), "asking the origin")
}

func TestPeerOfferingAnotherLengthIsLeft(t *testing.T) {
	content, sum := blob(1 << 20)
	short := newPeer(t, content[:len(content)/2], peerBehaviour{})
	good := newPeer(t, content, peerBehaviour{})
	opts, log := peerOpts(t, asPeer("a-short", short), asPeer("b", good))
	dest := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, FetchWith(t.Context(), unreachable(t), dest, Want{SHA256: sum, Bytes: int64(len(content))}, opts, nil))
	assert.True(t, strings.Contains(log.String(), "peer=a-short"))
}

func TestPeerCopyChecksSpace(t *testing.T) {
	content, sum := blob(1 << 20)
	a := newPeer(t, content, peerBehaviour{})
	opts, _ := peerOpts(t, asPeer("a", a))
	dir := t.TempDir()
	free, err := freeSpace(dir)
	require.NoError(t, err)
	opts.MinFree = free + 1<<40
	dest := filepath.Join(dir, "m.gguf")
	err = FetchWith(t.Context(), unreachable(t), dest, Want{SHA256: sum}, opts, nil)
	require.ErrorIs(t, err, ErrNoSpace)
	assert.Contains(t, err.Error(), "the partial file was removed")
	assert.NoFileExists(t, dest+PartialSuffix, "the partial is removed")
	assert.NoFileExists(t, dest)
}

func TestDigestRecords(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("hello"), 0o600))
	_, ok := ReadDigest(p)
	assert.False(t, ok, "no record yet")
	rec, err := HashFile(p)
	require.NoError(t, err)
	assert.Equal(t, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", rec.SHA256)
	got, ok := ReadDigest(p)
	require.True(t, ok)
	assert.Equal(t, rec, got)
	// A file that changed makes its record stale.
	require.NoError(t, os.WriteFile(p, []byte("hello, world"), 0o600))
	_, ok = ReadDigest(p)
	assert.False(t, ok)
}

func TestParseSHA256(t *testing.T) {
	good := strings.Repeat("0123456789abcdef", 4)
	s, err := ParseSHA256(good)
	require.NoError(t, err)
	assert.Equal(t, good, s)
	for _, bad := range []string{"", good[:63], good + "0", strings.ToUpper(good), good[:63] + "g", "../" + good[3:], good[:62] + "%2"} {
		_, err := ParseSHA256(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func FuzzParseSHA256(f *testing.F) {
	f.Add(strings.Repeat("ab", 32))
	f.Add("")
	f.Add(strings.Repeat("AB", 32))
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSHA256(s)
		if err != nil {
			return
		}
		if got != s || len(s) != 64 || strings.Trim(s, "0123456789abcdef") != "" {
			t.Fatalf("accepted %q", s)
		}
	})
}

func TestLFSDigestFromTheLinkedEtag(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	hf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/o/r/resolve/main/m.gguf":
			assert.Equal(t, http.MethodHead, r.Method)
			w.Header().Set("X-Linked-Etag", `"`+strings.ToUpper(sum)+`"`)
			w.Header().Set("Location", "https://cdn.invalid/blob")
			w.WriteHeader(http.StatusFound)
		case "/o/r/resolve/main/README.md":
			w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef01234567"`) // a git blob's SHA-1
		default:
			w.WriteHeader(http.StatusFound)
			w.Header().Set("X-Linked-Etag", `"nothex"`)
		}
	}))
	t.Cleanup(hf.Close)
	got, err := LFSDigest(t.Context(), hf.URL+"/o/r/resolve/main/m.gguf", loopback)
	require.NoError(t, err)
	assert.Equal(t, sum, got, "the redirect is not followed: its header names the content")
	got, err = LFSDigest(t.Context(), hf.URL+"/o/r/resolve/main/README.md", loopback)
	require.NoError(t, err)
	assert.Empty(t, got)
	got, err = LFSDigest(t.Context(), hf.URL+"/other", loopback)
	require.NoError(t, err)
	assert.Empty(t, got)
	_, err = LFSDigest(t.Context(), hf.URL+"/o/r/resolve/main/m.gguf", Options{})
	assert.ErrorIs(t, err, ErrRefused, "the guard applies")
}

// A peer that sends wrong bytes and then breaks leaves a partial; the origin starts over rather
// than finish it, so the download succeeds.
func TestTheOriginDoesNotFinishABadPeersBytes(t *testing.T) {
	content, sum := blob(2 << 20)
	bad := newPeer(t, content, peerBehaviour{corrupt: true, cutAt: 1 << 20})
	origin := newFileServer(t, content)
	opts, log := peerOpts(t, asPeer("evil", bad))
	dest := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, FetchWith(t.Context(), origin.URL, dest, Want{SHA256: sum}, opts, nil), log.String())
	got, _ := os.ReadFile(dest)
	assert.True(t, bytes.Equal(content, got))
	assert.Equal(t, "", origin.ranges[len(origin.ranges)-1], "the origin was asked for the whole file")
}
