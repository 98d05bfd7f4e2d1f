package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/sim/gguf"
)

// A namespace token asking for an estimate of a loopback URL (it could as well be the cloud's
// metadata address or a router's page) makes the agent send nothing there, and learns nothing
// of what answers there.
func TestEstimateIsNoRequestForgery(t *testing.T) {
	var hits atomic.Int64
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Range", "bytes 0-7/100")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write([]byte("SECRET-INSIDE"))
	}))
	t.Cleanup(inner.Close)
	dir := t.TempDir()
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{llamaDriver(t, dir)}, func(c *Config) {
		c.AllowHTTP = true
		c.Sizer = &sizing.Sizer{} // the default guard: loopback, private and link-local refused
	})
	s := serve(t, a, nil)
	team := s.nsClient(t, "team-a")
	ctx := context.Background()

	e, err := team.Estimate(ctx, api.PlacementRequest{Source: inner.URL + "/m.gguf"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Verdict != api.VerdictRefused || e.Code != api.CodeInvalidSource || !strings.Contains(e.Reason, "loopback") {
		t.Fatalf("estimate of a loopback URL: %+v", e)
	}
	_, err = team.Place(ctx, api.PlacementRequest{Source: inner.URL + "/m.gguf"})
	if codeOfErr(err) != api.CodeInvalidSource {
		t.Fatalf("placing a loopback URL: %v", err)
	}
	if strings.Contains(e.Reason+err.Error(), "SECRET") {
		t.Fatalf("the refusal carries the remote's answer: %q / %v", e.Reason, err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached the loopback server", n)
	}
}

// twoModels writes two GGUFs of the same length whose estimates differ: the second has twice
// the KV heads (a larger KV cache and larger projections), padded to the same weight region.
func twoModels(t *testing.T, dir string) (small, large []byte) {
	t.Helper()
	spec, _ := gguf.Preset("sim-tiny")
	spec.WeightBytes = 16 << 20
	read := func(name string, kvHeads int) []byte {
		sp := spec
		sp.HeadCountKV = kvHeads
		p := filepath.Join(dir, name)
		if err := gguf.Write(p, sp); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	small, large = read("small.gguf", 1), read("large.gguf", 4)
	if len(small) != len(large) {
		t.Fatalf("the two models differ in length: %d and %d", len(small), len(large))
	}
	return small, large
}

// splitServer answers range requests (the sizer's header reads) from one file and whole GETs
// (the download) from another.
func splitServer(t *testing.T, ranged, whole []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		content := whole
		if r.Header.Get("Range") != "" {
			content = ranged
		}
		http.ServeContent(w, r, "m.gguf", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The file that becomes a model is the file that was sized: a server that gives the sizer a
// small model and the download another is refused, whether the other is longer (stopped
// before its body, by length) or of the same length (sized again once downloaded).
func TestDownloadIsTheFileSized(t *testing.T) {
	dir := t.TempDir()
	small, large := twoModels(t, dir)
	longer := append(bytes.Clone(large), make([]byte, 2*len(large))...)
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{llamaDriver(t, dir)}, func(c *Config) { c.AllowHTTP = true })
	s := serve(t, a, nil)
	ctx := context.Background()
	for _, c := range []struct {
		name, reason string
		whole        []byte
		code         api.Code
	}{
		{"longer", "not the file that was sized", longer, api.CodePullFailed},
		{"same-length", "the downloaded file is not the file that was sized", large, api.CodeMemoryCheckFailed},
	} {
		p, err := s.admin.Place(ctx, api.PlacementRequest{Source: splitServer(t, small, c.whole) + "/" + c.name + ".gguf"})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if p.Memory.FileBytes != int64(len(small)) {
			t.Fatalf("%s: the estimate records %d bytes sized, want %d", c.name, p.Memory.FileBytes, len(small))
		}
		p = waitState(t, s.admin, p.ID, api.StateFailed)
		if p.Code != c.code || !strings.Contains(p.Reason, c.reason) {
			t.Fatalf("%s: failed with %s %q, want %s %q", c.name, p.Code, p.Reason, c.code, c.reason)
		}
	}
}

// A placement whose pull failed keeps its partial file only as long as the placement: deleting
// it gives the disk space back (a full disk does not stay full until a restart).
func TestDeletedPlacementTakesItsPartial(t *testing.T) {
	dir := t.TempDir()
	content, err := os.ReadFile(tinyModel(t, dir, "cut"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The sizer reads closed ranges (bytes=a-b); the download asks for all or the rest.
		if rg := r.Header.Get("Range"); rg != "" && !strings.HasSuffix(rg, "-") {
			http.ServeContent(w, r, "m.gguf", time.Time{}, bytes.NewReader(content))
			return
		}
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
		_, _ = w.Write(content[from : from+len(content)/4])
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close() // the download is cut every time
		}
	}))
	t.Cleanup(srv.Close)
	ld, err := llamaserver.New(llamaserver.Config{
		Binary: llamaSimBin, ModelsDir: filepath.Join(dir, "models"), LogDir: filepath.Join(dir, "logs"),
		Download: download.Options{AllowPrivate: true, Retries: 1, RetryBackoff: time.Millisecond},
	}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{ld}, func(c *Config) { c.AllowHTTP = true })
	s := serve(t, a, nil)
	ctx := context.Background()
	p, err := s.admin.Place(ctx, api.PlacementRequest{Source: srv.URL + "/cut.gguf"})
	if err != nil {
		t.Fatal(err)
	}
	p = waitState(t, s.admin, p.ID, api.StateFailed)
	if p.Code != api.CodePullFailed || !strings.Contains(p.Reason, "kept for resuming") {
		t.Fatalf("failed with %s %q", p.Code, p.Reason)
	}
	dest, err := ld.LocalPath(a.placements[p.ID].model)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dest + download.PartialSuffix); err != nil {
		t.Fatalf("the failed pull left no partial: %v", err)
	}
	if err := s.admin.Delete(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		_, err := os.Stat(dest + download.PartialSuffix)
		return os.IsNotExist(err)
	}, "the partial to be deleted with its placement")
}

// A namespace token places file:// sources from the GGUF folders and the store only; the admin
// token may name any file.
func TestFileSourcesConfined(t *testing.T) {
	dir := t.TempDir()
	served := filepath.Join(dir, "gguf")
	outside := filepath.Join(dir, "elsewhere")
	for _, d := range []string{served, outside} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	inside := tinyModel(t, served, "inside")
	secret := tinyModel(t, outside, "secret")
	link := filepath.Join(served, "link.gguf")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{llamaDriver(t, dir)}, func(c *Config) { c.GGUFDirs = []string{served} })
	s := serve(t, a, nil)
	team := s.nsClient(t, "team-a")
	ctx := context.Background()

	for _, path := range []string{secret, "file://" + secret, link, filepath.Join(served, "..", "elsewhere", "secret.gguf")} {
		e, err := team.Estimate(ctx, api.PlacementRequest{Source: path})
		if err != nil {
			t.Fatal(err)
		}
		if e.Verdict != api.VerdictRefused || e.Code != api.CodeInvalidSource || !strings.Contains(e.Reason, "outside the folders") {
			t.Fatalf("%s: estimate %+v", path, e)
		}
		if _, err := team.Place(ctx, api.PlacementRequest{Source: path}); codeOfErr(err) != api.CodeInvalidSource {
			t.Fatalf("%s: a namespace token placed it: %v", path, err)
		}
	}
	if e, err := team.Estimate(ctx, api.PlacementRequest{Source: inside}); err != nil || e.Verdict != api.VerdictFits {
		t.Fatalf("a file in a GGUF folder: %+v %v", e, err)
	}
	if e, err := s.admin.Estimate(ctx, api.PlacementRequest{Source: secret}); err != nil || e.Verdict != api.VerdictFits {
		t.Fatalf("the admin names any file: %+v %v", e, err)
	}
}

// mustNotName fails when text names any of the given placements (model name or id).
func mustNotName(t *testing.T, what, text string, ps ...api.Placement) {
	t.Helper()
	for _, p := range ps {
		if strings.Contains(text, p.ID) || strings.Contains(text, p.Model) {
			t.Fatalf("%s names another namespace's placement %s (%s): %q", what, p.Model, p.ID, text)
		}
	}
}

// A namespace token's refusals and estimates name nothing of other namespaces, and its
// placements evict nothing of theirs, whatever priority they ask; protection is the admin's.
func TestNamespaceRightsStayInTheNamespace(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "models")
	if err := os.MkdirAll(store, 0o750); err != nil {
		t.Fatal(err)
	}
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{unmeasured{llamaDriver(t, dir)}}, func(c *Config) {
		c.Budget = tinyEstimate * 3 / 2
		c.Evict = true
		c.IdleAfter = time.Millisecond
	})
	s := serve(t, a, nil)
	ctx := context.Background()
	mine, err := s.admin.Place(ctx, api.PlacementRequest{Source: tinyModel(t, store, "admins-model"), Priority: api.PriorityLow})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s.admin, mine.ID, api.StateReady)
	team := s.nsClient(t, "team-b")
	req := api.PlacementRequest{Source: tinyModel(t, store, "teams-model"), Priority: api.PriorityCritical}

	e, err := team.Estimate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if e.Verdict != api.VerdictRefused || e.Code != api.CodeInsufficientMemory {
		t.Fatalf("estimate: %+v", e)
	}
	mustNotName(t, "the estimate", e.Reason, mine)
	_, err = team.Place(ctx, req)
	if codeOfErr(err) != api.CodeInsufficientMemory {
		t.Fatalf("a critical placement of team-b: %v", err)
	}
	mustNotName(t, "the refusal", err.Error()+err.(*api.Error).Fix, mine)
	if p, err := s.admin.Placement(ctx, mine.ID); err != nil || p.State != api.StateReady {
		t.Fatalf("the admin's placement after team-b's attempt: %+v %v", p, err)
	}
	req.Priority, req.Protected = "", true
	if _, err := team.Place(ctx, req); codeOfErr(err) != api.CodeForbidden {
		t.Fatalf("a namespace token marked its placement protected: %v", err)
	}

	// The admin's critical placement may evict the namespace's: the reason given to the
	// namespace does not name it.
	if err := s.admin.Delete(ctx, mine.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := s.admin.Placement(ctx, mine.ID); return codeOfErr(err) == api.CodeNotFound }, "the deletion")
	theirs, err := team.Place(ctx, api.PlacementRequest{Source: tinyModel(t, store, "teams-model"), Priority: api.PriorityLow})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, team, theirs.ID, api.StateReady)
	boss, err := s.admin.Place(ctx, api.PlacementRequest{Source: tinyModel(t, store, "bosses-model"), Priority: api.PriorityCritical})
	if err != nil {
		t.Fatal(err)
	}
	evicted := waitState(t, team, theirs.ID, api.StateEvicted)
	mustNotName(t, "the eviction reason", evicted.Reason, boss)
}

// On a Hailo-10H, a namespace token cannot swap out another namespace's model, nor learn its
// name from the refusal.
func TestNamespaceCannotSwapAnotherNamespacesHailoModel(t *testing.T) {
	_, s, _ := hailoRig(t, nil)
	ctx := context.Background()
	first, err := s.admin.Place(ctx, api.PlacementRequest{Source: "hailo://qwen2:1.5b"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s.admin, first.ID, api.StateReady)
	team := s.nsClient(t, "team-b")
	e, err := team.Estimate(ctx, api.PlacementRequest{Source: "hailo://llama3.2:3b"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Verdict != api.VerdictRefused {
		t.Fatalf("estimate: %+v", e)
	}
	mustNotName(t, "the estimate", e.Reason, first)
	_, err = team.Place(ctx, api.PlacementRequest{Source: "hailo://llama3.2:3b"})
	if codeOfErr(err) != api.CodeInsufficientMemory {
		t.Fatalf("team-b swapping the admin's model: %v", err)
	}
	mustNotName(t, "the refusal", err.Error()+err.(*api.Error).Fix, first)
	if p, err := s.admin.Placement(ctx, first.ID); err != nil || p.State != api.StateReady {
		t.Fatalf("the admin's model after team-b's attempt: %+v %v", p, err)
	}
}

// openStream opens GET /v1/events with token and returns the status; a 200 stream stays open
// until the test ends.
func openStream(t *testing.T, url, token string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return resp.StatusCode
}

// Namespace tokens cannot hold all the event streams: one token gets a few, all of them
// together leave the admin's share, and the admin still gets a stream.
func TestEventStreamsCappedPerToken(t *testing.T) {
	a := newBareAgent(t, "x86-nvidia", nil)
	s := serve(t, a, nil)
	token := func(ns string) string {
		tok, err := api.NamespaceToken(api.AdminToken(s.secret), ns)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for i := 0; i < maxNamespaceStreams; i++ {
		if code := openStream(t, s.url, token("team-0")); code != http.StatusOK {
			t.Fatalf("stream %d of team-0: %d", i, code)
		}
	}
	if code := openStream(t, s.url, token("team-0")); code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests {
		t.Fatalf("stream %d of one token: %d, want refused", maxNamespaceStreams+1, code)
	}
	opened := maxNamespaceStreams
	for ns := 1; opened < maxEventSubs-adminStreams; ns++ {
		for i := 0; i < maxNamespaceStreams && opened < maxEventSubs-adminStreams; i++ {
			if code := openStream(t, s.url, token(fmt.Sprintf("team-%d", ns))); code != http.StatusOK {
				t.Fatalf("stream %d: %d", opened, code)
			}
			opened++
		}
	}
	if code := openStream(t, s.url, token("team-last")); code == http.StatusOK {
		t.Fatal("namespace tokens took the admin's share of the event streams")
	}
	for i := 0; i < adminStreams; i++ {
		if code := openStream(t, s.url, api.AdminToken(s.secret)); code != http.StatusOK {
			t.Fatalf("admin stream %d: %d", i, code)
		}
	}
}

// However many placements fail, a namespace keeps a bounded number of records, and the state
// file the agent writes always loads again: records of failures give way first.
func TestFailedRecordsBounded(t *testing.T) {
	dir := t.TempDir()
	model := tinyModel(t, dir, "m")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The header is read (closed ranges); the download is forbidden.
		if rg := r.Header.Get("Range"); rg == "" || strings.HasSuffix(rg, "-") {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		http.ServeFile(w, r, model)
	}))
	t.Cleanup(srv.Close)
	a := engineAgent(t, dir, "x86-nvidia", []engines.Driver{llamaDriver(t, dir)}, func(c *Config) { c.AllowHTTP = true })
	s := serve(t, a, nil)
	team := s.nsClient(t, "team-b")
	ctx := context.Background()
	for i := 0; i < maxRecordsPerNamespace+8; i++ {
		p, err := team.Place(ctx, api.PlacementRequest{Source: fmt.Sprintf("%s/m%d.gguf", srv.URL, i)})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, team, p.ID, api.StateFailed)
	}
	ps, err := team.Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != maxRecordsPerNamespace {
		t.Fatalf("team-b keeps %d failed records, want %d", len(ps), maxRecordsPerNamespace)
	}
	if ps[0].Source != fmt.Sprintf("%s/m8.gguf", srv.URL) {
		t.Fatalf("the oldest record kept is %s, want the 9th", ps[0].Source)
	}
	// The failure is saved just after it is shown.
	waitFor(t, func() bool {
		saved, ok, err := a.cfg.State.Load()
		if err != nil {
			t.Fatal(err)
		}
		return ok && len(saved.Placements) == maxRecordsPerNamespace
	}, "the state file to hold the namespace's latest records only")
}

// Records the agent holds in memory beyond what a state file can carry (many namespaces, long
// reasons) are dropped from the file, oldest failures first; what runs is kept.
func TestStateFileAlwaysLoads(t *testing.T) {
	a := newBareAgent(t, "x86-nvidia", nil)
	now := time.Now().UTC()
	long := strings.Repeat("r", maxReason)
	a.mu.Lock()
	running := &placement{p: api.Placement{ID: "p-running", Model: "m", Source: "/m.gguf", Runtime: api.RuntimeLlamaServer,
		Namespace: "default", Priority: api.PriorityNormal, Context: 2048, State: api.StatePulling, CreatedAt: now}}
	a.placements[running.p.ID] = running
	for i := 0; i < 8000; i++ {
		id := fmt.Sprintf("p-%06d", i)
		a.placements[id] = &placement{p: api.Placement{ID: id, Model: "m", Source: "/" + strings.Repeat("s", 2000) + ".gguf",
			Runtime: api.RuntimeLlamaServer, Priority: api.PriorityNormal, Context: 2048, Namespace: fmt.Sprintf("ns-%d", i%300), State: api.StateFailed, Reason: long, CreatedAt: now.Add(time.Duration(i) * time.Millisecond)}}
	}
	a.mu.Unlock()
	if err := a.save(); err != nil {
		t.Fatal(err)
	}
	saved, ok, err := a.cfg.State.Load()
	if err != nil || !ok {
		t.Fatalf("the agent wrote a state file that does not load: ok=%v err=%v", ok, err)
	}
	if !slices.ContainsFunc(saved.Placements, func(p api.Placement) bool { return p.ID == "p-running" }) {
		t.Fatal("the running placement was not saved")
	}
	if n := len(saved.Placements); n >= 8001 || n < 1000 {
		t.Fatalf("%d placements saved", n)
	}
}
