// Package ollama drives an Ollama daemon (default 127.0.0.1:11434): pulls with NDJSON progress,
// loads and unloads with keep_alive, confirms with /api/ps, and streams chats through
// /api/chat. Its Client speaks the protocol Ollama shares with hailo-ollama and is reused by the
// hailo driver.
package ollama

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/engines"
)

// DefaultURL is where Ollama listens unless told otherwise.
const DefaultURL = "http://127.0.0.1:11434"

// probeTimeout bounds each request a Detect makes, so a hung daemon cannot hang start-up.
const probeTimeout = 5 * time.Second

// Probe runs one of Detect's requests, bounded by probeTimeout.
func Probe(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return f(ctx)
}

// Config is how to reach the daemon. The hailo driver takes the same one.
type Config struct {
	URL  string       // the daemon's base URL; the driver's DefaultURL when empty
	HTTP *http.Client // nil: a client without proxy or overall timeout
}

// Setup is what every driver of a daemon speaking this protocol does first: the client of the
// daemon cfg names (defaultURL when cfg.URL is empty; daemon names it in messages), and log
// (a discarding one when nil) tagged with runtime r. It fails only on a malformed URL.
func Setup(cfg Config, defaultURL, daemon string, r api.Runtime, log *slog.Logger) (*Client, *slog.Logger, error) {
	if cfg.URL == "" {
		cfg.URL = defaultURL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c, err := NewClient(cfg.URL, daemon, cfg.HTTP)
	if err != nil {
		return nil, nil, err
	}
	return c, log.With("runtime", string(r)), nil
}

// Driver runs models on an Ollama daemon. It is safe for concurrent use.
type Driver struct {
	c      *Client
	log    *slog.Logger
	mirror Mirror // set before use: UseMirror
	// mirrored counts the pulls through the mirror in progress: Done waits for the last.
	mirrored atomic.Int32
}

// Mirror is the agent's mirror of the registry API, which serves the daemon the models the
// mesh's peers hold (their manifests and blobs, verified), then the origin registry's.
type Mirror struct {
	// Addr is the mirror's host:port as the daemon reaches it: it pulls
	// <Addr>/<namespace>/<model>:<tag> over plain HTTP.
	Addr string
	// Held reports whether a peer's daemon holds the model: only then does a pull go through
	// the mirror. A model no peer holds is pulled from the registry as it always was.
	Held func(ref string) bool
	// Status, when not nil, is what the mirror is copying for the daemon (bytes, and From:
	// which peers, how fast), for the placement's progress; false when nothing.
	Status func() (engines.Progress, bool)
	// Done, when not nil, is called when the last pull through the mirror in progress ended,
	// however it did: the mirror's own copies of the blobs are then the daemon's, and may go.
	Done func()
}

// UseMirror pulls the models peers hold through m. Call it before the driver is used.
func (d *Driver) UseMirror(m Mirror) { d.mirror = m }

var _ engines.Driver = (*Driver)(nil)

// New returns a driver for the daemon cfg names. It fails only on a malformed URL; an absent
// daemon is found by Detect.
func New(cfg Config, log *slog.Logger) (*Driver, error) {
	c, log, err := Setup(cfg, DefaultURL, "Ollama", api.RuntimeOllama, log)
	if err != nil {
		return nil, err
	}
	// An answer the agent ends itself (a stop sequence) is read to its end rather than cut
	// (Client.finishAnswer says why), for 10 s at most: a bound on the daemon's time spent
	// for nobody, past which the cut's small risk is the lesser cost.
	c.finish = 10 * time.Second
	return &Driver{c: c, log: log}, nil
}

// Client is the driver's protocol client.
func (d *Driver) Client() *Client { return d.c }

// Runtime is api.RuntimeOllama.
func (d *Driver) Runtime() api.Runtime { return api.RuntimeOllama }

// Detect reports whether an Ollama daemon answers at the URL, its version and pulled models.
// A daemon that answers /hailo/v1/list is hailo-ollama, and is reported as not Ollama.
func (d *Driver) Detect(ctx context.Context) api.Engine {
	e := api.Engine{Runtime: api.RuntimeOllama, Address: d.c.URL()}
	if err := Probe(ctx, func(ctx context.Context) error { _, err := d.c.Root(ctx); return err }); err != nil {
		e.Detail = fmt.Sprintf("no Ollama daemon answers at %s (%v); install it from https://ollama.com/download and start it with `ollama serve`, or point the agent at its address", d.c.URL(), RootCause(err))
		return e
	}
	var isHailo bool
	if err := Probe(ctx, func(ctx context.Context) (err error) { _, isHailo, err = d.c.HailoList(ctx); return err }); err == nil && isHailo {
		e.Detail = fmt.Sprintf("the daemon at %s is hailo-ollama (it answers /hailo/v1/list), not Ollama: select the hailo-ollama runtime for it", d.c.URL())
		return e
	}
	e.Present = true
	if err := Probe(ctx, func(ctx context.Context) (err error) { e.Version, err = d.c.Version(ctx); return err }); err != nil {
		e.Detail = fmt.Sprintf("Ollama answers / but not /api/version: %v", RootCause(err))
		return e
	}
	var tags []string
	if err := Probe(ctx, func(ctx context.Context) (err error) { tags, err = d.c.TagNames(ctx); return err }); err != nil {
		e.Detail = fmt.Sprintf("Ollama answers / but not /api/tags: %v", RootCause(err))
		return e
	}
	e.Models = append(e.Models, tags...) // nil when none are pulled
	e.Healthy = true
	return e
}

// RootCause drops the *engines.Error wrapper for messages that already say what failed.
func RootCause(err error) error {
	var ee *engines.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// Health checks that the daemon answers GET / (Ollama has no /health) and that m is still
// loaded: a daemon that restarted, or dropped the model, would otherwise leave the placement
// shown ready with nothing behind it. A model the daemon no longer holds is loaded again, as
// the placement asked: Ollama also drops a model for a while when another client (Open WebUI,
// the ollama CLI) asks for it with other options, which is no failure of the placement.
func (d *Driver) Health(ctx context.Context, m engines.Model) error {
	if _, err := d.c.Root(ctx); err != nil {
		return err
	}
	ref, err := d.ref(m)
	if err != nil {
		return err
	}
	running, err := d.c.PS(ctx)
	if err != nil {
		return err
	}
	if Listed(running, ref) {
		return nil
	}
	d.log.Info("no longer loaded in the daemon (it restarted, or another client had it reloaded); loading it again", "model", ref)
	if err := d.c.Load(ctx, ref, loadOptions(m)); err != nil {
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("%s is no longer loaded in Ollama at %s (the daemon restarted or unloaded it), and loading it again failed: %v", ref, d.c.URL(), RootCause(err))}
	}
	return nil
}

// ref is the name Ollama knows m by. The source, when given, must be an ollama:// one.
func (d *Driver) ref(m engines.Model) (string, error) {
	return Ref(m, api.RuntimeOllama)
}

// Ref is the engine-side name of m on runtime r (Ollama or hailo-ollama): m.Ref, or the name
// its source gives. A source the runtime cannot run is refused with RuntimeMismatch.
func Ref(m engines.Model, r api.Runtime) (string, error) {
	ref := m.Ref
	if m.Source != "" {
		s, err := source.Parse(m.Source)
		if err != nil {
			return "", asEngineError(err)
		}
		if err := s.CheckRuntime(r); err != nil {
			return "", asEngineError(err)
		}
		if ref == "" {
			ref = s.Ref()
		}
	}
	if ref == "" {
		return "", &engines.Error{Code: api.CodeBadRequest, Err: fmt.Errorf("model %q names neither a source nor an engine-side name", m.ID)}
	}
	return ref, nil
}

// asEngineError carries an *api.Error's code into an *engines.Error.
func asEngineError(err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return &engines.Error{Code: ae.Code, Err: errors.New(ae.Message)}
	}
	return err
}

// Pull makes m available on the daemon: a model it already has (/api/tags) is used as it is,
// and only a missing one is pulled, with its NDJSON progress. Ollama's own /api/pull always asks
// the registry, even for a model it has: offline, or for a model made with `ollama create`, it
// fails.
func (d *Driver) Pull(ctx context.Context, m engines.Model, progress func(engines.Progress)) error {
	ref, err := d.ref(m)
	if err != nil {
		return err
	}
	size, ok, err := d.c.Has(ctx, ref)
	if err != nil {
		return asPull(err)
	}
	if ok {
		d.log.Info("already on the daemon; not pulled", "model", ref, "size", size)
		if progress != nil {
			progress(engines.Progress{Status: "success", Completed: size, Total: size})
		}
		return nil
	}
	if d.mirror.Held != nil && d.mirror.Held(ref) {
		err := d.pullMirrored(ctx, ref, progress)
		if err == nil || ctx.Err() != nil {
			return err
		}
		d.log.Warn("a peer holds the model, but the pull through the agent's mirror failed; pulling from the registry", "model", ref, "err", err)
	}
	d.log.Info("pulling", "model", ref)
	return d.c.Pull(ctx, ref, progress)
}

// pullMirrored pulls ref through the mirror, under the mirror's name, then names it ref (a copy,
// sharing the blobs) and drops the mirror's name, so clients see the usual one.
func (d *Driver) pullMirrored(ctx context.Context, ref string, progress func(engines.Progress)) error {
	n, err := ParseName(ref)
	if err != nil {
		return &engines.Error{Code: api.CodeBadRequest, Err: err}
	}
	d.mirrored.Add(1)
	defer func() {
		if d.mirrored.Add(-1) == 0 && d.mirror.Done != nil {
			d.mirror.Done()
		}
	}()
	via := d.mirror.Addr + "/" + n.Namespace + "/" + n.Model + ":" + n.Tag
	d.log.Info("pulling from the mesh's peers through the agent's registry mirror", "model", ref, "as", via)
	report, stop := d.mirrorProgress(progress)
	err = d.c.PullInsecure(ctx, via, report)
	stop(err == nil)
	if err != nil {
		return err
	}
	if err := d.c.Copy(ctx, via, ref); err != nil {
		return err
	}
	if err := d.c.Delete(ctx, via); err != nil {
		d.log.Warn("the mirror's name of a pulled model could not be deleted (the model is there under its own name too)", "model", via, "err", err)
	}
	return nil
}

// mirrorStatusEvery spaces the progress said while the mirror copies a blob from peers (the
// daemon says nothing while it waits for the blob's size).
const mirrorStatusEvery = time.Second

// mirrorProgress is progress for a pull through the mirror: the daemon's lines say where the
// bytes came from, and while the daemon waits on the mirror's copy, the copy is said (without
// byte counts, which are the daemon's). stop ends the latter once the pull has ended, and, when
// it succeeded, says the whole once more with where it came from (the daemon's lines may have
// gone by between two of the placement's progress events).
func (d *Driver) mirrorProgress(progress func(engines.Progress)) (report func(engines.Progress), stop func(ok bool)) {
	if progress == nil || d.mirror.Status == nil {
		return progress, func(bool) {}
	}
	var mu sync.Mutex
	var last time.Time         // the daemon's last line
	var lastP engines.Progress // and what it said
	say := func(p engines.Progress, daemon bool) {
		mu.Lock()
		defer mu.Unlock()
		if daemon {
			last, lastP = time.Now(), p
		} else if time.Since(last) < mirrorStatusEvery {
			return
		}
		progress(p)
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(mirrorStatusEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if st, ok := d.mirror.Status(); ok && st.Completed < st.Total {
					say(engines.Progress{Status: fmt.Sprintf("the agent is copying %s of %s", api.FormatBytes(st.Completed), api.FormatBytes(st.Total)), From: st.From}, false)
				}
			}
		}
	}()
	report = func(p engines.Progress) {
		if st, ok := d.mirror.Status(); ok {
			p.From = st.From
		}
		say(p, true)
	}
	return report, func(ok bool) {
		close(quit)
		wg.Wait()
		st, copied := d.mirror.Status()
		if !ok || !copied {
			return
		}
		p := lastP
		p.Completed, p.From = p.Total, st.From
		if p.Total == 0 { // the daemon gave no byte counts (it does not for blobs that come at once)
			p.Completed, p.Total = st.Completed, st.Total
		}
		progress(p)
	}
}

// loadOptions are the options a placement loads with and every chat repeats: Ollama reloads a
// model whose load-time options (num_ctx) change between requests.
func loadOptions(m engines.Model) map[string]any {
	if m.Context <= 0 {
		return nil
	}
	return map[string]any{"num_ctx": m.Context}
}

// Load loads m with keep_alive -1 (see KeepForever) and its context size, then confirms with
// /api/ps that the daemon holds it.
func (d *Driver) Load(ctx context.Context, m engines.Model) (engines.Instance, error) {
	ref, err := d.ref(m)
	if err != nil {
		return nil, err
	}
	if err := d.c.Load(ctx, ref, loadOptions(m)); err != nil {
		return nil, err
	}
	running, err := d.c.PS(ctx)
	if err != nil {
		return nil, err
	}
	if !Listed(running, ref) {
		return nil, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("Ollama said it loaded %s but /api/ps does not list it", ref)}
	}
	d.log.Info("loaded", "model", ref, "context", m.Context)
	return NewInstance(d.c.URL()), nil
}

// unloadWait bounds how long Unload waits for /api/ps to drop the model: Ollama answers the
// keep_alive 0 request at once and stops the runner just after.
const unloadWait = 10 * time.Second

// Unload unloads m (keep_alive 0) and waits until /api/ps no longer lists it. A model the
// daemon does not know is already unloaded.
func (d *Driver) Unload(ctx context.Context, m engines.Model) error {
	ref, err := d.ref(m)
	if err != nil {
		return err
	}
	if err := d.c.Unload(ctx, ref); err != nil && !errors.Is(err, engines.ErrNotFound) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, unloadWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		running, err := d.c.PS(ctx)
		if err == nil && !Listed(running, ref) {
			d.log.Info("unloaded", "model", ref)
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("Ollama still lists %s in /api/ps after unloading it", ref)
			}
			return &engines.Error{Code: api.CodeEngineError, Err: RootCause(err)}
		case <-tick.C:
		}
	}
}

// Loaded lists the models /api/ps reports.
func (d *Driver) Loaded(ctx context.Context) ([]string, error) { return d.c.PSNames(ctx) }

// Chat streams an answer from m through /api/chat, with keep_alive -1 and m's context size so
// the chat neither shortens the model's stay nor reloads it.
func (d *Driver) Chat(ctx context.Context, m engines.Model, req engines.ChatRequest, emit func(engines.ChatChunk) error) error {
	ref, err := d.ref(m)
	if err != nil {
		return err
	}
	opts := Options(req)
	for k, v := range loadOptions(m) {
		opts[k] = v
	}
	return d.c.Chat(ctx, ref, req, opts, emit)
}

// Instance is a model served by a daemon: it has no process of its own, so Done never closes
// and health checks find failures instead.
type Instance struct {
	endpoint string
	done     chan struct{}
}

// NewInstance returns the instance of a model served by the daemon at endpoint.
func NewInstance(endpoint string) *Instance {
	return &Instance{endpoint: endpoint, done: make(chan struct{})}
}

func (i *Instance) Endpoint() string      { return i.endpoint }
func (i *Instance) Done() <-chan struct{} { return i.done }
func (i *Instance) Err() error            { return nil }
func (i *Instance) LogPath() string       { return "" }

// Describe is what the daemon lists of m.
func (d *Driver) Describe(ctx context.Context, m engines.Model) (api.ModelDetails, error) {
	ref, err := d.ref(m)
	if err != nil {
		return api.ModelDetails{}, err
	}
	return d.c.Describe(ctx, ref)
}

// ReadsImages: Ollama takes images with any model, and refuses them itself for a model without
// vision (400, "model does not support multimodal requests"), which the client is told.
func (d *Driver) ReadsImages(engines.Model) error { return nil }

// Embed is the daemon's /api/embed for m.
func (d *Driver) Embed(ctx context.Context, m engines.Model, inputs []string) (engines.Embeddings, error) {
	ref, err := d.ref(m)
	if err != nil {
		return engines.Embeddings{}, err
	}
	return d.c.Embed(ctx, ref, inputs)
}
