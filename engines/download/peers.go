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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Peer is another host of the mesh that holds a file, as the caller reaches it: URL is the
// file's address on that host and Client the transport to it (the agent's sealed channel, which
// checks the host is the mesh member it names). A peer is trusted for nothing: every byte it
// sends is checked against the digest.
type Peer struct {
	Name   string
	URL    string
	Client *http.Client
}

// Peers finds the hosts that hold a file by its SHA-256. The agent makes one before its drivers
// and sets its finder once its mesh is up; a nil *Peers, or one not set, finds none.
type Peers struct {
	mu        sync.RWMutex
	find      func(sha256 string) []Peer
	manifests func(ref string) []Peer
	agents    func(path string) []Peer
}

// UseAgents sets how the mesh's other live agents are found, each Peer's URL path on that host:
// for what a peer answers from its records, which no gossip names (a Hailo library's digests).
func (p *Peers) UseAgents(find func(path string) []Peer) {
	p.mu.Lock()
	p.agents = find
	p.mu.Unlock()
}

// Agents are the mesh's other live agents, each with path on that host.
func (p *Peers) Agents(path string) []Peer {
	return p.ask(func() func(string) []Peer { return p.agents }, path)
}

// UseManifests sets how the hosts whose Ollama daemon holds a model by name are found, each
// Peer's URL that model's manifest on the host.
func (p *Peers) UseManifests(find func(ref string) []Peer) {
	p.mu.Lock()
	p.manifests = find
	p.mu.Unlock()
}

// Manifests are the peers whose Ollama daemon holds the model ref ("name:tag"), best first.
func (p *Peers) Manifests(ref string) []Peer {
	return p.ask(func() func(string) []Peer { return p.manifests }, ref)
}

// ask calls the finder which() reads under the lock, if one is set.
func (p *Peers) ask(which func() func(string) []Peer, arg string) []Peer {
	if p == nil {
		return nil
	}
	p.mu.RLock()
	find := which()
	p.mu.RUnlock()
	if find == nil {
		return nil
	}
	return find(arg)
}

// Use sets how holders are found.
func (p *Peers) Use(find func(sha256 string) []Peer) {
	p.mu.Lock()
	p.find = find
	p.mu.Unlock()
}

// Holders are the peers that hold the file with digest sum, best first.
func (p *Peers) Holders(sum string) []Peer {
	return p.ask(func() func(string) []Peer { return p.find }, sum)
}

// Defaults for copies from peers.
const (
	// DefaultPeerStall is how long a peer may send nothing before it is left for the next one:
	// on a LAN a live peer's bytes arrive within milliseconds.
	DefaultPeerStall = 15 * time.Second
	// splitAbove is the size from which a copy is split across several peers: below it one
	// peer's link is busy for too short a time for a second to pay off.
	splitAbove = 64 << 20
	// maxSplit bounds how many peers one copy reads from at once.
	maxSplit = 4
)

// Progress is a download's progress as FetchWith reports it.
type Progress struct {
	Done, Total int64 // bytes; Total 0 when not known yet
	// From says where the bytes come from now, for people: "pi5-a over the LAN, 92 MB/s";
	// "" from the origin.
	From string
}

// errPeersFailed is wrapped when no peer delivered the file: the origin is next.
var errPeersFailed = errors.New("no peer delivered the file")

// fromPeers fills the locked partial with the file whose digest is want.SHA256 from holders,
// verified, and returns the peer names it came from. A peer that sends bytes of another file is
// dropped for this file and logged by name; one that fails or stalls is left for the next, which
// resumes after the bytes in place. errPeersFailed when none delivered: what failed peers left
// is unverified (FetchWith empties it before asking the origin).
func (d *fetch) fromPeers(ctx context.Context, holders []Peer, log *slog.Logger) (string, error) {
	good := slices.Clone(holders)
	drop := func(p Peer) {
		good = slices.DeleteFunc(good, func(q Peer) bool { return q.Name == p.Name })
	}
	for len(good) > 0 {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		use := good
		if len(use) > maxSplit {
			use = use[:maxSplit]
		}
		have, err := d.file.Seek(0, io.SeekEnd)
		if err != nil {
			return "", fmt.Errorf("download: %w", err)
		}
		total, err := d.peerSize(ctx, use[0], have)
		if err != nil {
			log.Warn("a peer could not serve a file; trying the next", "peer", use[0].Name, "sha256", d.want.SHA256, "err", err)
			drop(use[0])
			continue
		}
		if total-have < splitAbove {
			use = use[:1]
		}
		res := d.copySplit(ctx, use, have, total)
		if res.fatal != nil {
			return "", res.fatal
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		for _, p := range res.failed {
			log.Warn("a peer failed mid-copy; trying the others", "peer", p.Name, "sha256", d.want.SHA256, "err", res.why[p.Name])
			drop(p)
		}
		if len(res.failed) > 0 {
			continue // the ranges that arrived stay: the next round resumes after them
		}
		got := hex.EncodeToString(d.hash.Sum(nil))
		if got == d.want.SHA256 {
			return names(use), nil
		}
		// Wrong bytes. From one peer that started from nothing, it is that peer's doing; from
		// several, or after a partial of unknown origin, each is tried alone.
		if err := d.file.Truncate(0); err != nil {
			return "", fmt.Errorf("download: %w", err)
		}
		if len(use) == 1 && have == 0 {
			log.Warn("a peer served bytes that are not the file: dropped for this file", "peer", use[0].Name, "sha256", d.want.SHA256, "got", got)
			drop(use[0])
			continue
		}
		log.Warn("a copy from several peers was not the file: one of them served wrong bytes; copying from each alone", "peers", names(use), "sha256", d.want.SHA256)
		return d.oneByOne(ctx, good, log)
	}
	return "", errPeersFailed
}

// oneByOne fetches the whole file from each peer alone in turn until one delivers it, dropping
// (by name, in the log) each that sends another file's bytes.
func (d *fetch) oneByOne(ctx context.Context, peers []Peer, log *slog.Logger) (string, error) {
	for _, p := range peers {
		if err := d.file.Truncate(0); err != nil {
			return "", fmt.Errorf("download: %w", err)
		}
		total, err := d.peerSize(ctx, p, 0)
		if err != nil {
			log.Warn("a peer could not serve a file; trying the next", "peer", p.Name, "sha256", d.want.SHA256, "err", err)
			continue
		}
		res := d.copySplit(ctx, []Peer{p}, 0, total)
		if res.fatal != nil {
			return "", res.fatal
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if len(res.failed) > 0 {
			log.Warn("a peer failed mid-copy; trying the next", "peer", p.Name, "sha256", d.want.SHA256, "err", res.why[p.Name])
			continue
		}
		if got := hex.EncodeToString(d.hash.Sum(nil)); got == d.want.SHA256 {
			return p.Name, nil
		}
		log.Warn("a peer served bytes that are not the file: dropped for this file", "peer", p.Name, "sha256", d.want.SHA256)
	}
	if err := d.file.Truncate(0); err != nil {
		return "", fmt.Errorf("download: %w", err)
	}
	return "", errPeersFailed
}

func names(ps []Peer) string {
	var n []string
	for _, p := range ps {
		n = append(n, p.Name)
	}
	return strings.Join(n, " and ")
}

// peerSize asks p for the file's length with a one-byte range from have (or its first byte),
// and checks it against the length sized.
func (d *fetch) peerSize(ctx context.Context, p Peer, have int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, d.stall())
	defer cancel()
	resp, err := peerGet(ctx, p, max(have-1, 0), max(have-1, 0))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("answered HTTP %d to a range", resp.StatusCode)
	}
	_, total, ok := ParseContentRange(resp.Header.Get("Content-Range"))
	if !ok || total <= 0 {
		return 0, fmt.Errorf("answered a range with Content-Range %.80q", resp.Header.Get("Content-Range"))
	}
	if d.want.Bytes > 0 && total != d.want.Bytes {
		return 0, fmt.Errorf("%w: it has %d bytes, %d were sized", ErrNotSized, total, d.want.Bytes)
	}
	if total < have {
		return 0, fmt.Errorf("it has %d bytes, fewer than the %d already here", total, have)
	}
	return total, nil
}

// peerGet asks p for bytes first..last of the file.
func peerGet(ctx context.Context, p Peer, first, last int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Range", "bytes="+strconv.FormatInt(first, 10)+"-"+strconv.FormatInt(last, 10))
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := p.Client.Do(req)
	if err != nil {
		return nil, Redact(err)
	}
	return resp, nil
}

func (d *fetch) stall() time.Duration {
	if d.opts.PeerStall > 0 {
		return d.opts.PeerStall
	}
	return DefaultPeerStall
}

// splitResult is how a copy from peers went: the peers that failed (and why), or what stopped it.
type splitResult struct {
	failed []Peer
	why    map[string]error
	fatal  error // the copy cannot go on: no room on the disk, or the partial unreadable or unwritable
}

// copySplit copies bytes have..total-1 into the partial, split in contiguous ranges across use
// (one range each), and hashes the whole file as it arrives: the first range as it is received,
// each later one from the page cache once the ranges before it are done. When a peer fails, the
// partial is cut back to the bytes known to be in place without a hole, for the next round.
func (d *fetch) copySplit(ctx context.Context, use []Peer, have, total int64) splitResult {
	res := splitResult{why: map[string]error{}}
	if total-have > 0 {
		if err := d.room(total-have, removed); err != nil {
			d.discardForSpace()
			res.fatal = err
			return res
		}
	}
	d.hash = sha256.New()
	if _, err := io.Copy(d.hash, io.NewSectionReader(d.file, 0, have)); err != nil {
		res.fatal = fmt.Errorf("download: reading the partial file: %w", err)
		return res
	}
	n := int64(len(use))
	span := (total - have + n - 1) / n
	type rng struct{ first, end int64 }
	ranges := make([]rng, 0, n)
	for i := range n {
		first := have + i*span
		ranges = append(ranges, rng{first, min(first+span, total)})
	}
	got := make([]atomic.Int64, len(ranges)) // bytes in place, per range
	var done atomic.Int64
	done.Store(have)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stopErr atomic.Pointer[error] // no room on the disk, or a write to it failed
	var sinceCheck atomic.Int64
	errs := make([]error, len(ranges))
	var wg sync.WaitGroup
	for i, r := range ranges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var h hash.Hash
			if i == 0 {
				h = d.hash // the first range continues the prefix: hashed as it arrives
			}
			errs[i] = d.copyRange(ctx, use[i], r.first, r.end, h, func(k int64) {
				got[i].Add(k)
				done.Add(k)
				if sinceCheck.Add(k) >= spaceCheckEvery {
					sinceCheck.Store(0)
					if err := d.room(0, removed); err != nil {
						stopErr.CompareAndSwap(nil, &err)
						cancel()
					}
				}
			})
			if disk := (diskError{}); errors.As(errs[i], &disk) {
				// The disk, not the peer, failed: no other peer would do better.
				err := disk.error
				stopErr.CompareAndSwap(nil, &err)
				cancel()
			}
			if errs[i] != nil && ctx.Err() == nil && stopErr.Load() == nil {
				// The others go on: their bytes are kept for the next round.
				return
			}
		}()
	}
	stopReport := d.report(&done, total, names(use))
	wg.Wait()
	stopReport()
	if p := stopErr.Load(); p != nil {
		d.discardForSpace()
		res.fatal = *p
		return res
	}
	// The contiguous prefix: ranges complete in order, then the first incomplete one's bytes.
	end := have
	for i, r := range ranges {
		end = r.first + got[i].Load()
		if errs[i] != nil || end != r.end {
			break
		}
	}
	failed := false
	for i, err := range errs {
		if err != nil {
			res.failed = append(res.failed, use[i])
			res.why[use[i].Name] = err
			failed = true
		}
	}
	if failed {
		if err := d.file.Truncate(end); err != nil {
			res.fatal = fmt.Errorf("download: %w", err)
		}
		return res
	}
	// Later ranges: hashed from the file, in order, after the first.
	for _, r := range ranges[1:] {
		if _, err := io.Copy(d.hash, io.NewSectionReader(d.file, r.first, r.end-r.first)); err != nil {
			res.fatal = fmt.Errorf("download: reading the partial file: %w", err)
			return res
		}
	}
	return res
}

// removed is what becomes of the partial when the disk fills during a copy from peers: a peer
// copy is cheap to start over, and the space is what the host needs now.
const removed = "the partial file was removed"

// discardForSpace empties the partial (the deferred cleanup of FetchWith removes it).
func (d *fetch) discardForSpace() {
	d.file.Truncate(0)
}

// diskError is a failed write to the partial during a copy from peers: the host's disk is at
// fault, not the peer, so the copy stops rather than dropping the peer and trying the next.
type diskError struct{ error }

// copyRange copies bytes first..end-1 from p into the partial at their place, hashing them into
// h when not nil. A peer that sends nothing for the stall time, or sends other bytes than the
// range asked, fails.
func (d *fetch) copyRange(parent context.Context, p Peer, first, end int64, h hash.Hash, wrote func(int64)) error {
	if first >= end {
		return nil
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	stall := time.AfterFunc(d.stall(), cancel)
	defer stall.Stop()
	resp, err := peerGet(ctx, p, first, end-1)
	if err != nil {
		if parent.Err() == nil && ctx.Err() != nil {
			return fmt.Errorf("did not answer within %s", d.stall())
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("answered HTTP %d to a range", resp.StatusCode)
	}
	if from, _, ok := ParseContentRange(resp.Header.Get("Content-Range")); !ok || from != first {
		return fmt.Errorf("answered range %.80q to a request from byte %d", resp.Header.Get("Content-Range"), first)
	}
	// The hash runs beside the copy, not in its loop: on a Pi the digest would otherwise take
	// its share of every read's time from the link.
	hashed := newHasher(h)
	defer hashed.wait()
	at := first
	body := io.LimitReader(resp.Body, end-first)
	for at < end {
		buf := hashed.buffer()
		n, rerr := body.Read(buf)
		if n > 0 {
			stall.Reset(d.stall())
			if _, err := d.file.WriteAt(buf[:n], at); err != nil {
				return diskError{d.writeErr(err, removed)}
			}
			at += int64(n)
			wrote(int64(n))
		}
		hashed.add(buf[:n])
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if err := parent.Err(); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return fmt.Errorf("sent nothing for %s at byte %d", d.stall(), at)
			}
			return Redact(rerr)
		}
	}
	if at != end {
		return fmt.Errorf("stopped at byte %d of %d", at, end)
	}
	return nil
}

// report calls the progress function every progressEvery, and once more when the returned stop
// is called, with the bytes done, where they come from and the rate.
func (d *fetch) report(done *atomic.Int64, total int64, from string) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	start, base := time.Now(), done.Load()
	say := func() {
		n := done.Load()
		rate := float64(n-base) / max(time.Since(start).Seconds(), 1e-3)
		d.progressFrom(n, total, fmt.Sprintf("%s over the LAN, %.0f MB/s", from, rate/1e6))
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				say()
			}
		}
	}()
	return func() { close(quit); wg.Wait(); say() }
}

// hasher hashes what a copy writes in a goroutine of its own, in order, through a few buffers
// passed back and forth; with no hash it only hands out one buffer.
type hasher struct {
	h    hash.Hash
	free chan []byte
	full chan []byte
	done chan struct{}
	one  []byte
}

func newHasher(h hash.Hash) *hasher {
	if h == nil {
		return &hasher{one: make([]byte, 256<<10)}
	}
	const buffers = 8
	x := &hasher{h: h, free: make(chan []byte, buffers), full: make(chan []byte, buffers), done: make(chan struct{})}
	for range buffers {
		x.free <- make([]byte, 256<<10)
	}
	go func() {
		defer close(x.done)
		for b := range x.full {
			x.h.Write(b)
			x.free <- b[:cap(b)]
		}
	}()
	return x
}

// buffer is one to read into next.
func (x *hasher) buffer() []byte {
	if x.h == nil {
		return x.one
	}
	return <-x.free
}

// add hashes b (a buffer from buffer, now written) after what was added before.
func (x *hasher) add(b []byte) {
	if x.h != nil {
		x.full <- b
	}
}

// wait returns once everything added is hashed.
func (x *hasher) wait() {
	if x.h != nil {
		close(x.full)
		<-x.done
	}
}

// PeerSize is the length of the file with digest sum as the first peer that holds it and
// answers says; false when none does. It answers a size asked for (a HEAD) without a copy.
func PeerSize(ctx context.Context, opts Options, sum string) (int64, bool) {
	d := &fetch{opts: opts}
	for _, p := range opts.Peers.Holders(sum) {
		if n, err := d.peerSize(ctx, p, 0); err == nil {
			return n, true
		}
	}
	return 0, false
}
