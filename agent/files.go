package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/store"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/internal/seal"
)

// FilesPath is where an agent serves the model files in its store to the mesh's other agents:
// GET /v1/files/{sha256}, with ranges.
const FilesPath = "/v1/files/"

// DefaultServeUploads is how many copies an agent serves at once when Config.ServeUploads is 0:
// two saturate a LAN link, and more would take the disk and CPU from the engines.
const DefaultServeUploads = 2

// filesRescan is how often the store is walked for files to serve: a verified download records
// its digest as it lands, so a walk costs a stat and a small read per file.
const filesRescan = 5 * time.Second

// files serves the store's model files by content to the mesh's agents over the sealed channel,
// and knows which digests the store holds (gossiped in the host's state).
type files struct {
	store *store.Store
	log   *slog.Logger
	slots chan struct{} // one per copy in progress
	pace  *pacer        // nil: no rate limit
	rate  int64
	// changed is called when the set of files held changes, so the host's state is published.
	changed func()
	// kick asks run for a walk now (a file just landed), not at the next tick.
	kick chan struct{}

	// ollama is the Ollama daemon's models folder whose blobs are served too ("": none).
	ollama string

	mu    sync.Mutex
	held  map[string]store.Held // by SHA-256
	blobs map[string]store.Held // the daemon's, by the SHA-256 their names give
	sums  []string              // prefixes, sorted: what Host gossips
}

func newFiles(st *store.Store, uploads int, rate int64, log *slog.Logger, changed func()) *files {
	if uploads <= 0 {
		uploads = DefaultServeUploads
	}
	f := &files{store: st, log: log, slots: make(chan struct{}, uploads), rate: rate, changed: changed, held: map[string]store.Held{},
		kick: make(chan struct{}, 1)}
	if rate > 0 {
		f.pace = &pacer{rate: rate}
	}
	return f
}

// run keeps the list of held files current until ctx ends.
func (f *files) run(ctx context.Context) {
	t := time.NewTicker(filesRescan)
	defer t.Stop()
	for {
		f.rescan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.kick:
		}
	}
}

// landed says a file was just added to the store: the next walk is now.
func (f *files) landed() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// rescan walks the store and publishes a changed set of holdings.
func (f *files) rescan(ctx context.Context) {
	list := f.store.Holdings(ctx, f.log)
	held := make(map[string]store.Held, len(list))
	var sums []string
	for _, h := range list {
		held[h.SHA256] = h
		sums = append(sums, h.SHA256[:api.HoldPrefix])
	}
	blobs := map[string]store.Held{}
	for _, b := range ollama.Blobs(f.ollama) {
		blobs[b.SHA256] = store.Held{Path: b.Path, Size: b.Size, SHA256: b.SHA256}
		sums = append(sums, b.SHA256[:api.HoldPrefix])
	}
	slices.Sort(sums)
	sums = slices.Compact(sums)
	f.mu.Lock()
	same := slices.Equal(sums, f.sums)
	f.held, f.blobs, f.sums = held, blobs, sums
	f.mu.Unlock()
	if !same && f.changed != nil {
		f.changed()
	}
}

// service is what Host shows of the file service.
func (f *files) service() *api.FileService {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &api.FileService{Holds: slices.Clone(f.sums), MaxUploads: cap(f.slots), Rate: f.rate}
}

// lookup is the held file with digest sum, if its record still fits it.
func (f *files) lookup(sum string) (store.Held, bool) {
	f.mu.Lock()
	h, ok := f.held[sum]
	b, isBlob := f.blobs[sum]
	f.mu.Unlock()
	if !ok && isBlob {
		// The daemon's blob is named by its digest and never rewritten: still there at the
		// same length, it is the file (the receiver checks every byte anyway).
		fi, err := os.Stat(b.Path)
		return b, err == nil && fi.Mode().IsRegular() && fi.Size() == b.Size
	}
	if !ok {
		return h, false
	}
	if rec, fresh := download.ReadDigest(h.Path); !fresh || rec.SHA256 != sum {
		return h, false // changed since the walk: the next walk hashes it again
	}
	return h, true
}

// ServeHTTP answers GET /v1/files/{sha256}: only to an agent of the mesh over the sealed channel
// (its certificate checked at the handshake), never to a console or a bearer token, whatever its
// scope: a file is named by content, not by namespace, so the route is for the agents' copies
// alone (see README, Security).
func (f *files) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	who, ok := seal.PeerOf(r.TLS)
	if !ok || who.Role != seal.RoleAgent {
		WriteError(w, api.Errorf(api.CodeForbidden, "model files are served to the mesh's agents only, over the sealed channel"))
		return
	}
	sum, err := download.ParseSHA256(r.PathValue("sha256"))
	if err != nil {
		WriteError(w, api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	h, ok := f.lookup(sum)
	if !ok {
		WriteError(w, api.Errorf(api.CodeNotFound, "no file with sha256 %s here", sum))
		return
	}
	select {
	case f.slots <- struct{}{}:
		defer func() { <-f.slots }()
	default:
		w.Header().Set("Retry-After", "5")
		WriteError(w, api.Errorf(api.CodeTooBusy, "this host serves %d copies at once already", cap(f.slots)))
		return
	}
	file, err := os.Open(h.Path)
	if err != nil {
		WriteError(w, api.Errorf(api.CodeNotFound, "no file with sha256 %s here", sum))
		return
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil || fi.Size() != h.Size {
		WriteError(w, api.Errorf(api.CodeNotFound, "no file with sha256 %s here (it changed)", sum))
		return
	}
	f.log.Info("serving a file to a peer", "peer", who.Name, "sha256", sum, "range", r.Header.Get("Range"))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", strconv.Quote(sum))
	var out http.ResponseWriter = w
	if f.pace != nil {
		out = paced{ResponseWriter: w, p: f.pace, ctx: r.Context()}
	}
	http.ServeContent(out, r, "", fi.ModTime(), file)
}

// pacer spaces writes so that all copies together send at most rate bytes a second.
type pacer struct {
	rate int64
	mu   sync.Mutex
	next time.Time // when the bytes already allowed have gone out
}

// wait blocks until n more bytes may go.
func (p *pacer) wait(ctx context.Context, n int) error {
	p.mu.Lock()
	now := time.Now()
	start := now
	if p.next.After(now) {
		start = p.next
	}
	p.next = start.Add(time.Duration(float64(n) / float64(p.rate) * float64(time.Second)))
	p.mu.Unlock()
	if d := start.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// paced is a ResponseWriter whose body goes out at the pacer's rate, in pieces small enough
// that the rate holds over a fraction of a second.
type paced struct {
	http.ResponseWriter
	p   *pacer
	ctx context.Context
}

func (w paced) Write(b []byte) (int, error) {
	const piece = 64 << 10
	done := 0
	for done < len(b) {
		n := min(piece, len(b)-done)
		if err := w.p.wait(w.ctx, n); err != nil {
			return done, err
		}
		m, err := w.ResponseWriter.Write(b[done : done+n])
		done += m
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// ReadFrom hides the ResponseWriter's own, which would send the file unpaced.
func (w paced) ReadFrom(r io.Reader) (int64, error) {
	return io.CopyBuffer(writerOnly{w}, r, make([]byte, 64<<10))
}

type writerOnly struct{ io.Writer }

// ParseServeRate reads --serve-rate: a size a second ("50MB", "400Mbit" is not taken: bytes).
func ParseServeRate(s string) (int64, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	n, err := api.ParseBytes(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--serve-rate %q: want bytes a second, such as 50MB (0: unlimited)", s)
	}
	return n, nil
}
