package sizing

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/sim/gguf"
)

const mib = 1 << 20

// allowLoopback is the guard for tests whose servers are on loopback: the agent's
// --allow-private-downloads. c is the test server's client (its TLS settings), or nil.
func allowLoopback(c *http.Client) download.Options {
	return download.Options{AllowPrivate: true, HTTP: c}
}

// writeModel writes a sim GGUF of the named preset into a temporary folder.
func writeModel(t *testing.T, preset string, mutate func(*gguf.Spec)) (string, gguf.Spec) {
	t.Helper()
	spec, ok := gguf.Preset(preset)
	require.True(t, ok, preset)
	if mutate != nil {
		mutate(&spec)
	}
	path := filepath.Join(t.TempDir(), preset+".gguf")
	require.NoError(t, gguf.Write(path, spec))
	return path, spec
}

func parse(t *testing.T, s string) source.Source {
	t.Helper()
	src, err := source.Parse(s)
	require.NoError(t, err)
	return src
}

func requireCode(t *testing.T, err error, code api.Code, msg string) {
	t.Helper()
	require.Error(t, err)
	var ae *api.Error
	require.True(t, errors.As(err, &ae), "error %v is not an *api.Error", err)
	assert.Equal(t, code, ae.Code, ae.Message)
	assert.Contains(t, ae.Message, msg)
}

func TestLocalGGUFFromHeader(t *testing.T) {
	path, spec := writeModel(t, "sim-0.5b", nil)
	s := &Sizer{}
	est, err := s.Estimate(context.Background(), parse(t, path), 0)
	require.NoError(t, err)

	assert.Equal(t, api.SizeHeader, est.Method)
	assert.Equal(t, api.DeviceHost, est.Device)
	assert.Equal(t, spec.TensorBytes(), est.Weights, "weights are the tensors' bytes")
	// K and V × 24 layers × 2048 (the default context) × 128 (2 KV heads of 64) × 2 bytes.
	assert.Equal(t, int64(2*24*2048*128*2), est.KV)
	assert.Equal(t, kvBytes(24, 2048, 896, 14, 2), est.KV, "the header's KV agrees with the formula")
	assert.Positive(t, est.Compute)
	assert.Equal(t, Overhead, est.Overhead)
	assert.Equal(t, est.KV, est.Cache, "the prompt cache is bounded by one KV cache's worth (24 MiB here)")
	assert.Equal(t, spec.ContextLength, est.TrainContext, "the header's context_length")
	assert.Equal(t, est.Weights+est.KV+est.Compute+est.Cache+est.Overhead, est.Bytes)
	assert.Contains(t, est.Detail, "24 layers × 2048 ctx, f16")
	assert.Contains(t, est.Detail, "prompt cache 24 MiB")
	assert.Contains(t, est.Detail, "overhead 512 MiB")
	assert.Contains(t, est.Detail, "header read from "+path)
}

func TestLocalGGUFScalesWithContext(t *testing.T) {
	path, _ := writeModel(t, "sim-tiny", nil)
	s := &Sizer{}
	small, err := s.Estimate(context.Background(), parse(t, "file://"+path), 2048)
	require.NoError(t, err)
	big, err := s.Estimate(context.Background(), parse(t, path), 16384)
	require.NoError(t, err)
	assert.Equal(t, 8*small.KV, big.KV)
	assert.Equal(t, small.Weights, big.Weights)
	assert.Greater(t, big.Bytes, small.Bytes)
	assert.Contains(t, big.Detail, "× 16384 ctx")
}

func TestLocalGGUFRefusals(t *testing.T) {
	dir := t.TempDir()
	s := &Sizer{}
	ctx := context.Background()

	_, err := s.Estimate(ctx, parse(t, filepath.Join(dir, "absent.gguf")), 0)
	requireCode(t, err, api.CodeNotFound, "absent.gguf does not exist")

	notGGUF := filepath.Join(dir, "text.gguf")
	require.NoError(t, os.WriteFile(notGGUF, []byte("hello, world"), 0o600))
	_, err = s.Estimate(ctx, parse(t, notGGUF), 0)
	requireCode(t, err, api.CodeInvalidSource, `is not a GGUF file: it does not start with "GGUF"`)

	short := filepath.Join(dir, "short.gguf")
	require.NoError(t, os.WriteFile(short, []byte("GG"), 0o600))
	_, err = s.Estimate(ctx, parse(t, short), 0)
	requireCode(t, err, api.CodeInvalidSource, "too short to hold a header")

	folder := filepath.Join(dir, "folder.gguf")
	require.NoError(t, os.Mkdir(folder, 0o700))
	_, err = s.Estimate(ctx, parse(t, folder), 0)
	requireCode(t, err, api.CodeInvalidSource, "is not a regular file")
}

func TestLocalGGUFDamagedHeaderFallsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "damaged.gguf")
	// The magic, then an unknown version and garbage: a GGUF, but not one anyone can read.
	data := append([]byte("GGUF"), 0xff, 0xff, 0, 0)
	data = append(data, make([]byte, 4096)...)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	require.NoError(t, os.Truncate(path, 100*mib))

	est, err := (&Sizer{}).Estimate(context.Background(), parse(t, path), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeFallback, est.Method)
	assert.Equal(t, int64(120*mib)+Overhead, est.Bytes)
	assert.Contains(t, est.Detail, "could not be parsed")
	assert.Contains(t, est.Detail, "fallback 1.2 × file 100 MiB = 120 MiB + overhead 512 MiB")
}

// countingServer serves a file and counts the body bytes it sends and the furthest offset
// any request reached.
type countingServer struct {
	*httptest.Server
	sent     atomic.Int64
	requests atomic.Int64
	mu       sync.Mutex
	ranges   []string
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

// serveFile serves path; with honourRanges false it answers every GET with the whole file,
// 200, the way a server that ignores Range does.
func serveFile(t *testing.T, path string, honourRanges bool) *countingServer {
	t.Helper()
	cs := &countingServer{}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.requests.Add(1)
		cs.mu.Lock()
		cs.ranges = append(cs.ranges, r.Method+" "+r.Header.Get("Range"))
		cs.mu.Unlock()
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		fi, _ := f.Stat()
		cw := countingWriter{w, &cs.sent}
		if honourRanges {
			http.ServeContent(cw, r, "", fi.ModTime(), f)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = io.Copy(cw, f)
		}
	}))
	t.Cleanup(cs.Close)
	return cs
}

func TestRemoteGGUFReadsOnlyTheHeader(t *testing.T) {
	// A vocabulary big enough that the header spans several range requests, in front of 1 GiB
	// of (sparse) weights.
	path, spec := writeModel(t, "sim-tiny", func(s *gguf.Spec) {
		s.VocabSize = 72000
		s.WeightBytes = 1 << 30
	})
	fi, err := os.Stat(path)
	require.NoError(t, err)
	srv := serveFile(t, path, true)

	s := &Sizer{Guard: allowLoopback(srv.Client())}
	est, err := s.Estimate(context.Background(), parse(t, "http://"+srv.Listener.Addr().String()+"/m/sim-tiny.gguf"), 4096)
	require.NoError(t, err)
	assert.Equal(t, api.SizeHeader, est.Method)
	assert.Equal(t, spec.TensorBytes(), est.Weights)
	assert.Contains(t, est.Detail, "header read by HTTP range requests")

	// The same figures as reading the file locally.
	local, err := s.Estimate(context.Background(), parse(t, path), 4096)
	require.NoError(t, err)
	assert.Equal(t, local.Bytes, est.Bytes)

	// The weights were never read: what the server sent is the header (the vocabulary, the
	// tensor infos) and at most one read-ahead buffer, a sliver of the 1 GiB file.
	sent := srv.sent.Load()
	header := fi.Size() - (1 << 30)
	t.Logf("file %d bytes, header %d, sent %d in %d requests: %v", fi.Size(), header, sent, srv.requests.Load(), srv.ranges)
	assert.GreaterOrEqual(t, srv.requests.Load(), int64(3), "the probe, then the header in several range requests")
	assert.Less(t, sent, header+remoteBufferSize)
	assert.Less(t, float64(sent), 0.005*float64(fi.Size()))
}

func TestRemoteGGUFServerIgnoringRangesIsNotDownloaded(t *testing.T) {
	path, _ := writeModel(t, "sim-tiny", func(s *gguf.Spec) { s.WeightBytes = 2 << 30 })
	fi, err := os.Stat(path)
	require.NoError(t, err)
	srv := serveFile(t, path, false)

	s := &Sizer{Guard: allowLoopback(srv.Client())}
	est, err := s.Estimate(context.Background(), parse(t, srv.URL+"/tiny.gguf"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeFallback, est.Method)
	assert.Equal(t, fi.Size()+fi.Size()/5+Overhead, est.Bytes)
	assert.Contains(t, est.Detail, "server ignores range requests; sized by Content-Length 2.0 GiB")
	assert.Contains(t, est.Detail, "(header not read)")

	// The body was closed after the magic: the server got out what the socket buffers hold
	// before the client hung up, a sliver of the 2 GiB.
	require.Eventually(t, func() bool { return srv.requests.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	srv.Close() // waits for the handler, so the count is final
	t.Logf("sent %d of %d bytes", srv.sent.Load(), fi.Size())
	assert.Less(t, srv.sent.Load(), int64(64*mib))
}

func TestHFSourceResolvesAgainstBaseAndFollowsRedirect(t *testing.T) {
	path, spec := writeModel(t, "sim-tiny", nil)
	var sent atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/sim/tiny-GGUF/resolve/main/Q8_0/sim-tiny.gguf", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/cdn/blob-1234", http.StatusFound)
	})
	mux.HandleFunc("/cdn/blob-1234", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		http.ServeContent(countingWriter{w, &sent}, r, "", time.Time{}, f)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	s := &Sizer{Guard: allowLoopback(srv.Client()), HFBase: srv.URL}
	est, err := s.Estimate(context.Background(), parse(t, "hf://sim/tiny-GGUF/Q8_0/sim-tiny.gguf"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeHeader, est.Method)
	assert.Equal(t, spec.TensorBytes(), est.Weights)
}

func TestRemoteGGUFRefusals(t *testing.T) {
	path, _ := writeModel(t, "sim-tiny", nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/missing.gguf", http.NotFound)
	mux.HandleFunc("/broken.gguf", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "disk on fire", http.StatusInternalServerError)
	})
	mux.HandleFunc("/html.gguf", func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader("<html>login</html>"))
	})
	// A GGUF magic in front of garbage: the header cannot be read, the total is known.
	mux.HandleFunc("/garbled.gguf", func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader("GGUF\x03\x00\x00\x00"+strings.Repeat("\xff", 4096)))
	})
	// Honours ranges on GET but refuses HEAD: the header is read by range GETs alone.
	mux.HandleFunc("/nohead.gguf", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		f, _ := os.Open(path)
		defer f.Close()
		http.ServeContent(w, r, "", time.Time{}, f)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s := &Sizer{Guard: allowLoopback(srv.Client())}
	ctx := context.Background()

	_, err := s.Estimate(ctx, parse(t, srv.URL+"/missing.gguf"), 0)
	requireCode(t, err, api.CodeNotFound, "HTTP 404")

	// Remote bodies never come back in a refusal: only the status.
	_, err = s.Estimate(ctx, parse(t, srv.URL+"/broken.gguf"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "HTTP 500")
	assert.NotContains(t, err.Error(), "disk on fire")

	_, err = s.Estimate(ctx, parse(t, srv.URL+"/html.gguf"), 0)
	requireCode(t, err, api.CodeInvalidSource, `is not a GGUF file: it does not start with "GGUF"`)
	assert.NotContains(t, err.Error(), "<htm")

	est, err := s.Estimate(ctx, parse(t, srv.URL+"/garbled.gguf"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeFallback, est.Method)
	assert.Equal(t, int64(4104+4104/5)+Overhead, est.Bytes)
	assert.Contains(t, est.Detail, "GGUF header could not be read by range requests")

	est, err = s.Estimate(ctx, parse(t, srv.URL+"/nohead.gguf"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeHeader, est.Method)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fi.Size(), est.FileBytes, "the estimate records the length of the file it sized")

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, err = s.Estimate(ctx, parse(t, closed.URL+"/m.gguf"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "cannot size: GET "+closed.URL+"/m.gguf: "+download.ErrNoAnswer.Error())
}

func TestContentRangeTotal(t *testing.T) {
	for h, want := range map[string]int64{
		"bytes 0-0/1790000000": 1790000000,
		"bytes 0-7/8":          8,
		"bytes 0-7/*":          -1,
		"bytes */100":          100,
		"":                     -1,
		"items 0-1/2":          -1,
		"bytes 0-7/-5":         -1,
		"bytes 0-7/x":          -1,
	} {
		assert.Equal(t, want, contentRangeTotal(h), h)
	}
}
