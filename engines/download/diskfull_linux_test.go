package download

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallDisk mounts an 8 MiB tmpfs for the test: a disk that a few megabytes fill.
func smallDisk(t *testing.T) string {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	return dir
}

// pausingServer serves content by range and, in the first body it sends (not a one-byte size
// probe), stops after pauseAt bytes: it closes paused once those bytes are flushed and goes on
// when the test calls resume, so the test can act while a copy is under way.
func pausingServer(t *testing.T, content []byte, pauseAt int64) (srv *httptest.Server, paused <-chan struct{}, resume func()) {
	p := make(chan struct{})
	r := make(chan struct{})
	resume = sync.OnceFunc(func() { close(r) })
	var once sync.Once
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Range") != "bytes=0-0" {
			once.Do(func() {
				w = &pausingWriter{ResponseWriter: w, left: pauseAt, pause: func() {
					close(p)
					select {
					case <-r:
					case <-req.Context().Done():
					}
				}}
			})
		}
		http.ServeContent(w, req, "", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(func() { resume(); srv.Close() })
	return srv, p, resume
}

// pausingWriter sends left bytes of the body, flushes them, calls pause, then sends the rest.
type pausingWriter struct {
	http.ResponseWriter
	left  int64
	pause func()
}

func (w *pausingWriter) Write(b []byte) (int, error) {
	if w.pause == nil || int64(len(b)) < w.left {
		w.left -= int64(len(b))
		return w.ResponseWriter.Write(b)
	}
	n, err := w.ResponseWriter.Write(b[:w.left])
	if err != nil {
		return n, err
	}
	w.ResponseWriter.(http.Flusher).Flush()
	w.pause()
	w.pause = nil
	m, err := w.ResponseWriter.Write(b[w.left:])
	return n + m, err
}

// fillDuringCopy fetches a 4 MiB file into an 8 MiB disk: it fits when the copy starts; once the
// first megabyte was written, the test writes a filler file that leaves only leave bytes free, then
// lets the copy go on. fromPeer says whether a peer serves it (no origin reachable) or the origin
// (no peer). It returns the destination and what FetchWith returned.
func fillDuringCopy(t *testing.T, fromPeer bool, leave int64) (string, error) {
	dir := smallDisk(t)
	content, sum := blob(4 << 20)
	srv, paused, resume := pausingServer(t, content, 1<<20)
	opts := loopback
	opts.MinFree = 1
	origin := srv.URL + "/m.gguf"
	if fromPeer {
		opts, _ = peerOpts(t, Peer{Name: "a", URL: srv.URL + "/v1/files/x", Client: srv.Client()})
		opts.MinFree = 1
		origin = unreachable(t)
	}
	dest := filepath.Join(dir, "m.gguf")
	done := make(chan error, 1)
	go func() {
		done <- FetchWith(t.Context(), origin, dest, Want{SHA256: sum, Bytes: int64(len(content))}, opts, nil)
	}()
	select {
	case <-paused:
	case err := <-done:
		t.Fatalf("the download ended before the copy was under way: %v", err)
	}
	// Once the first megabyte is on the disk, another writer takes the disk.
	require.Eventually(t, func() bool {
		fi, err := os.Stat(dest + PartialSuffix)
		return err == nil && fi.Size() == 1<<20
	}, 10*time.Second, time.Millisecond)
	free, err := freeSpace(dir)
	require.NoError(t, err)
	require.Greater(t, free, leave)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other.bin"), make([]byte, free-leave), 0o600))
	resume()
	return dest, <-done
}

// entries lists the files in dir.
func entries(t *testing.T, dir string) []string {
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var n []string
	for _, e := range es {
		n = append(n, e.Name())
	}
	return n
}

// A disk that fills during a copy from a peer (after the space was checked) stops the copy with
// ErrNoSpace naming the disk, not as the peer's failure, and the partial is removed; nothing
// lands. With room left, the same copy lands.
func TestStoreFillingDuringAPeerCopy(t *testing.T) {
	t.Run("full", func(t *testing.T) {
		dest, err := fillDuringCopy(t, true, 256<<10)
		require.ErrorIs(t, err, ErrNoSpace)
		assert.Contains(t, err.Error(), "the disk of "+filepath.Dir(dest)+" filled up during the copy")
		assert.Contains(t, err.Error(), "the partial file was removed")
		assert.Equal(t, []string{"other.bin"}, entries(t, filepath.Dir(dest)), "no partial, nothing unverified landed")
	})
	t.Run("room", func(t *testing.T) {
		dest, err := fillDuringCopy(t, true, 5<<20)
		require.NoError(t, err)
		assert.FileExists(t, dest)
		assert.NoFileExists(t, dest+PartialSuffix)
	})
}

// From the origin, a disk that fills during the copy is ErrNoSpace too, and the partial is kept
// for resuming once there is room (what Options.MinFree's checks do as well); nothing lands.
func TestStoreFillingDuringAnOriginCopy(t *testing.T) {
	t.Run("full", func(t *testing.T) {
		dest, err := fillDuringCopy(t, false, 256<<10)
		require.ErrorIs(t, err, ErrNoSpace)
		assert.Contains(t, err.Error(), "the disk of "+filepath.Dir(dest)+" filled up during the copy (kept for resuming)")
		assert.NoFileExists(t, dest)
		fi, err := os.Stat(dest + PartialSuffix)
		require.NoError(t, err)
		assert.Less(t, fi.Size(), int64(4<<20))
	})
	t.Run("room", func(t *testing.T) {
		dest, err := fillDuringCopy(t, false, 5<<20)
		require.NoError(t, err)
		assert.FileExists(t, dest)
		assert.NoFileExists(t, dest+PartialSuffix)
	})
}
