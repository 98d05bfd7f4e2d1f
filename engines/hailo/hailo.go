// Package hailo drives hailo-ollama, Hailo's Ollama-like server for the Hailo-10H (default
// 127.0.0.1:8000). It speaks the Ollama protocol through engines/ollama's Client, with the
// dialect hailo-ollama needs:
//   - the daemon is recognised by GET /hailo/v1/list; one that lacks it is not hailo-ollama, and
//     pulls and loads on it are refused with RuntimeMismatch;
//   - load and unload requests carry no prompt field, every request a JSON Content-Type, and a
//     200 answer with an "error" body is an error (all in the shared Client);
//   - one model at a time: loading a second model replaces the first, and the Instance says which
//     (Replaced); unloading a model that is no longer on the device leaves the device alone
//     (keep_alive 0 takes off whatever is loaded);
//   - chats stream through /api/chat, since its /v1/chat/completions cannot stream;
//   - tools go to a daemon of a release that parses them (5.3 and later, by the version it
//     reports) and are refused before any other; a model whose template cannot take them is
//     refused by the daemon itself, and its words pass through;
//   - a model a later release renamed (5.1.1's qwen2.5-instruct:1.5b is 5.3.0's
//     qwen2.5:1.5b) runs under the name the daemon lists, and the driver says which it used
//     (package hailozoo).
//
// Requests that use the device (load, unload, chat, /api/ps) are serialised in the driver, one
// at a time. The device runs one anyway, so nothing is lost, and it makes the driver's
// check-then-act steps atomic: a load knows which model it replaces, an unload never takes off
// another placement's model, and a chat never swaps a replaced model back in behind the
// agent's back. Waiting requests give up with their context.
package hailo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/internal/hailozoo"
)

// DefaultURL is where hailo-ollama listens by default (its config says 0.0.0.0:8000; the agent
// reaches it on loopback).
const DefaultURL = "http://127.0.0.1:8000"

// Config is how to reach the daemon, as for Ollama; the URL defaults to DefaultURL.
type Config = ollama.Config

// Driver runs models on hailo-ollama. It is safe for concurrent use.
type Driver struct {
	c      *ollama.Client
	log    *slog.Logger
	device chan struct{} // held by the one request using the device
	pulls  atomic.Int32  // pulls in progress
	served sync.Map      // a model's ref → the name the daemon lists it by, when they differ

	// The swap defect (hailozoo.Release.SwapDefect): version is what the daemon last reported,
	// loadedBefore that it has loaded a model since the driver first saw it or last restarted
	// it, and restart, when set, how to restart it.
	version      atomic.Value // string
	loadedBefore atomic.Bool
	restart      func(context.Context) error
}

// RestartBetweenModels gives the driver a way to restart hailo-ollama (the agent's
// --hailo-restart-command, or a test's). On a release with the swap defect the driver then
// restarts the daemon before loading a model after another one, so every load is the first of
// its process; without it the swap goes ahead and SwapCost says what it costs. Call it before
// the driver is used.
func (d *Driver) RestartBetweenModels(restart func(context.Context) error) { d.restart = restart }

// SwapCost says what replacing the model on the device costs beyond the load, for the
// release the daemon last reported; "" when nothing is known to.
func (d *Driver) SwapCost() string {
	v, _ := d.version.Load().(string)
	rel := hailozoo.ReleaseOf(v)
	switch {
	case !rel.SwapDefect():
		return ""
	case d.restart != nil:
		return "hailo-ollama " + v + " keeps the device between loads and answers degrade after a swap (hailo-rpi5-examples #197), so the agent restarts it first: the swap also costs the daemon's restart"
	default:
		return "hailo-ollama " + v + " keeps the device between loads: answers degrade after this swap until hailo-ollama restarts (hailo-rpi5-examples #197); restart it after the swap, or give the agent --hailo-restart-command"
	}
}

// restartIfDegrading restarts the daemon before a load that would follow another one in the
// same daemon process (one this driver made, or the model found on the device), on a release
// with the swap defect, when the driver has the means; it waits until the daemon answers
// again. The device lock is held.
func (d *Driver) restartIfDegrading(ctx context.Context, deviceHeld bool) error {
	if d.restart == nil || !(d.loadedBefore.Load() || deviceHeld) {
		return nil
	}
	reported, err := d.c.Version(ctx)
	if err != nil {
		return err
	}
	d.version.Store(reported)
	if !hailozoo.ReleaseOf(reported).SwapDefect() {
		return nil
	}
	d.log.Warn("restarting hailo-ollama before loading another model: this release keeps the device between loads (hailo-rpi5-examples #197)", "version", reported)
	if err := d.restart(ctx); err != nil {
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("restarting hailo-ollama before a swap: %w", err)}
	}
	for {
		if _, err := d.c.Root(ctx); err == nil {
			d.loadedBefore.Store(false)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(restartPoll):
		}
	}
}

// restartPoll is how often a restarting daemon is asked whether it answers again.
const restartPoll = 100 * time.Millisecond

var _ engines.Driver = (*Driver)(nil)

// New returns a driver for the daemon cfg names. It fails only on a malformed URL.
func New(cfg Config, log *slog.Logger) (*Driver, error) {
	c, log, err := ollama.Setup(cfg, DefaultURL, "hailo-ollama", api.RuntimeHailoOllama, log)
	if err != nil {
		return nil, err
	}
	return &Driver{c: c, log: log, device: make(chan struct{}, 1)}, nil
}

// Client is the driver's protocol client.
func (d *Driver) Client() *ollama.Client { return d.c }

// Runtime is api.RuntimeHailoOllama.
func (d *Driver) Runtime() api.Runtime { return api.RuntimeHailoOllama }

// lock takes the device for one request, or gives up with ctx.
func (d *Driver) lock(ctx context.Context) error {
	select {
	case d.device <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *Driver) unlock() { <-d.device }

// onDevice runs fn holding the device, with the models /api/ps lists (at most one).
func (d *Driver) onDevice(ctx context.Context, fn func(loaded []string) error) error {
	if err := d.lock(ctx); err != nil {
		return err
	}
	defer d.unlock()
	loaded, err := d.c.PSNames(ctx)
	if err != nil {
		return err
	}
	return fn(loaded)
}

// name is what the daemon calls ref: the name a load or pull found it listed by.
func (d *Driver) name(ref string) string {
	if n, ok := d.served.Load(ref); ok {
		return n.(string)
	}
	return ref
}

// resolve finds the name the daemon lists ref by (list is its zoo) and remembers it, logging a
// rename once so the owner sees which name ran.
func (d *Driver) resolve(ref string, list []string) string {
	n := hailozoo.ServedName(ref, list)
	if n == ref {
		d.served.Delete(ref)
		return ref
	}
	if old, ok := d.served.Swap(ref, n); !ok || old != n {
		d.log.Warn("this hailo-ollama lists the model under another name; using the daemon's", "model", ref, "served_as", n)
	}
	return n
}

// zoo returns the daemon's model list, refusing a daemon that is not hailo-ollama.
func (d *Driver) zoo(ctx context.Context) ([]string, error) {
	models, isHailo, err := d.c.HailoList(ctx)
	if err != nil {
		return nil, err
	}
	if !isHailo {
		return nil, &engines.Error{Code: api.CodeRuntimeMismatch, Err: fmt.Errorf(
			"the daemon at %s is not hailo-ollama: it has no /hailo/v1/list (is it plain Ollama?); hailo:// models run only on hailo-ollama with a Hailo-10H", d.c.URL())}
	}
	return models, nil
}

// Detect reports whether hailo-ollama answers at the URL, its version and its zoo (Models);
// Detail says which zoo models are downloaded.
func (d *Driver) Detect(ctx context.Context) api.Engine {
	e := api.Engine{Runtime: api.RuntimeHailoOllama, Address: d.c.URL()}
	if err := ollama.Probe(ctx, func(ctx context.Context) error { _, err := d.c.Root(ctx); return err }); err != nil {
		e.Detail = fmt.Sprintf("no hailo-ollama answers at %s (%v); it comes with Hailo's GenAI model zoo for the Hailo-10H (AI HAT+ 2 on a Raspberry Pi 5): install it and start `hailo-ollama`, or point the agent at its address", d.c.URL(), ollama.RootCause(err))
		return e
	}
	var listed []string
	if err := ollama.Probe(ctx, func(ctx context.Context) (err error) { listed, err = d.zoo(ctx); return err }); err != nil {
		e.Detail = ollama.RootCause(err).Error()
		return e
	}
	e.Present = true
	e.Models = listed
	if err := ollama.Probe(ctx, func(ctx context.Context) (err error) { e.Version, err = d.c.Version(ctx); return err }); err != nil {
		e.Detail = fmt.Sprintf("hailo-ollama answers / but not /api/version: %v", ollama.RootCause(err))
		return e
	}
	d.version.Store(e.Version)
	var have []string
	if err := ollama.Probe(ctx, func(ctx context.Context) (err error) { have, err = d.c.TagNames(ctx); return err }); err != nil {
		e.Detail = fmt.Sprintf("hailo-ollama answers / but not /api/tags: %v", ollama.RootCause(err))
		return e
	}
	e.Healthy = true
	if len(have) == 0 {
		e.Detail = "no zoo model downloaded yet"
	} else {
		e.Detail = "downloaded: " + strings.Join(have, ", ")
	}
	return e
}

// Downloaded lists the zoo models whose HEF is on this host (/api/tags), which load without a pull.
func (d *Driver) Downloaded(ctx context.Context) ([]string, error) { return d.c.TagNames(ctx) }

// Health checks that the daemon answers GET / (hailo-ollama has no /health) and that m is the
// model on the device: a daemon that restarted, or a swap, would otherwise leave the placement
// shown ready. While one of this driver's requests is using the device the model is working,
// and the check is skipped: hailo-ollama serves one request at a time, so a probe would only
// wait behind it. For the same reason a probe that times out while a pull is running counts
// as busy, not dead; a daemon that is gone refuses the connection at once.
func (d *Driver) Health(ctx context.Context, m engines.Model) error {
	ref, err := ollama.Ref(m, api.RuntimeHailoOllama)
	if err != nil {
		return err
	}
	ref = d.name(ref)
	select {
	case d.device <- struct{}{}:
	default:
		return nil
	}
	defer d.unlock()
	if _, err := d.c.Root(ctx); err != nil {
		if d.pulls.Load() > 0 && errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		return err
	}
	loaded, err := d.c.PSNames(ctx)
	if err != nil {
		return err
	}
	switch {
	case len(loaded) == 0:
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("no model is on the Hailo-10H: hailo-ollama at %s lost %s (restarted?)", d.c.URL(), ref)}
	case !ollama.SameModel(loaded[0], ref):
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("%s is no longer on the Hailo-10H: %s replaced it", ref, loaded[0])}
	}
	return nil
}

// Pull downloads m's HEF through the daemon, reporting its progress.
func (d *Driver) Pull(ctx context.Context, m engines.Model, progress func(engines.Progress)) error {
	ref, err := ollama.Ref(m, api.RuntimeHailoOllama)
	if err != nil {
		return err
	}
	listed, err := d.zoo(ctx)
	if err != nil {
		return err
	}
	ref = d.resolve(ref, listed)
	d.log.Info("pulling", "model", ref)
	// Pulls do not hold the device: the blob download does not use it, and a model on the
	// device keeps answering meanwhile.
	d.pulls.Add(1)
	err = d.c.Pull(ctx, ref, progress)
	d.pulls.Add(-1)
	if errors.Is(err, ollama.ErrNoLastChunk) && ctx.Err() == nil {
		// hailo-ollama 5.1.1 closes a pull's stream without its "success" line: the pull is done
		// when the model is listed as downloaded.
		if size, ok := d.listed(ctx, ref); ok {
			d.log.Info("the pull's stream ended without success, and the model is listed: pulled", "model", ref)
			if progress != nil {
				progress(engines.Progress{Status: "success", Completed: size, Total: size})
			}
			return nil
		}
	}
	if errors.Is(err, engines.ErrNotFound) {
		// /hailo/v1/list is not always the whole zoo, so the daemon decides; the list helps.
		return &engines.Error{Code: api.CodePullFailed, Err: fmt.Errorf("%w; this hailo-ollama lists: %s", ollama.RootCause(err), strings.Join(listed, ", "))}
	}
	return err
}

// listed reports whether /api/tags lists model as downloaded, and its size.
func (d *Driver) listed(ctx context.Context, model string) (int64, bool) {
	tags, err := d.c.Tags(ctx)
	if err != nil {
		return 0, false
	}
	for _, t := range tags {
		if ollama.SameModel(t.Name, model) || ollama.SameModel(t.Model, model) {
			return max(t.Size, 0), true
		}
	}
	return 0, false
}

// Load puts m on the Hailo-10H with keep_alive -1 and confirms with /api/ps. A model already on
// the device is replaced: the returned *Instance's Replaced names it, and the swap is logged.
func (d *Driver) Load(ctx context.Context, m engines.Model) (engines.Instance, error) {
	ref, err := ollama.Ref(m, api.RuntimeHailoOllama)
	if err != nil {
		return nil, err
	}
	listed, err := d.zoo(ctx)
	if err != nil {
		return nil, err
	}
	asked := ref
	ref = d.resolve(ref, listed)
	inst := &Instance{Instance: ollama.NewInstance(d.c.URL())}
	if ref != asked {
		inst.servedAs = ref
	}
	err = d.onDevice(ctx, func(before []string) error {
		inst.switched = len(before) == 0 || !ollama.SameModel(before[0], ref)
		if inst.switched {
			if err := d.restartIfDegrading(ctx, len(before) > 0); err != nil {
				return err
			}
		}
		// hailo-ollama takes no num_ctx: every zoo HEF has its context built in.
		if err := d.c.Load(ctx, ref, nil); err != nil {
			return err
		}
		d.loadedBefore.Store(true)
		after, err := d.c.PSNames(ctx)
		if err != nil {
			return err
		}
		if len(after) != 1 || !ollama.SameModel(after[0], ref) {
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("hailo-ollama said it loaded %s but /api/ps lists %v", ref, after)}
		}
		if len(before) > 0 && !ollama.SameModel(before[0], ref) {
			inst.replaced = before[0]
			d.log.Warn("swapped the model on the Hailo-10H", "loaded", ref, "replaced", inst.replaced)
		} else {
			d.log.Info("loaded", "model", ref)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return inst, nil
}

// Unload takes m off the device and confirms with /api/ps. When m is not the model on the
// device (a swap replaced it) there is nothing to free, and the device is left alone.
func (d *Driver) Unload(ctx context.Context, m engines.Model) error {
	ref, err := ollama.Ref(m, api.RuntimeHailoOllama)
	if err != nil {
		return err
	}
	ref = d.name(ref)
	return d.onDevice(ctx, func(before []string) error {
		if len(before) == 0 || !ollama.SameModel(before[0], ref) {
			d.log.Info("not on the device; nothing to unload", "model", ref, "loaded", before)
			return nil
		}
		if err := d.c.Unload(ctx, ref); err != nil {
			return err
		}
		after, err := d.c.PSNames(ctx)
		if err != nil {
			return err
		}
		if len(after) > 0 {
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("hailo-ollama said it unloaded %s but /api/ps lists %v", ref, after)}
		}
		d.log.Info("unloaded", "model", ref)
		return nil
	})
}

// Loaded lists the model on the device (at most one).
func (d *Driver) Loaded(ctx context.Context) (loaded []string, err error) {
	err = d.onDevice(ctx, func(l []string) error { loaded = l; return nil })
	return loaded, err
}

// Chat streams an answer from m through /api/chat (NDJSON). It is refused when another model is
// on the device: hailo-ollama would swap m back in, silently evicting the other placement. The
// request carries keep_alive -1 so it does not shorten the model's stay. "stop" is not sent:
// hailo-ollama does not honour it.
func (d *Driver) Chat(ctx context.Context, m engines.Model, req engines.ChatRequest, emit func(engines.ChatChunk) error) error {
	ref, err := ollama.Ref(m, api.RuntimeHailoOllama)
	if err != nil {
		return err
	}
	ref = d.name(ref)
	if err := d.unsupported(ctx, req); err != nil {
		return err
	}
	return d.onDevice(ctx, func(loaded []string) error {
		if len(loaded) > 0 && !ollama.SameModel(loaded[0], ref) {
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf(
				"%s is not on the Hailo-10H (%s is); answering would swap it back in, so the chat is refused", ref, loaded[0])}
		}
		opts := ollama.Options(req)
		delete(opts, "stop")
		tokens, calls := 0, 0
		err := d.c.Chat(ctx, ref, req, opts, func(c engines.ChatChunk) error {
			if c.Content != "" {
				tokens++
			}
			calls += len(c.ToolCalls)
			return emit(c)
		})
		if errors.Is(err, ollama.ErrNoLastChunk) && tokens+calls > 0 && ctx.Err() == nil {
			// hailo-ollama 5.1.1 closes every streamed answer without its last chunk (its public
			// clients take that as the end): an answer that came is complete. It streams one
			// token per line, so the lines count the tokens, and an answer as long as the limit
			// stopped for it; one that called tools ended for them.
			last := engines.ChatChunk{Done: true, FinishReason: "stop", CompletionTokens: tokens}
			switch {
			case calls > 0:
				last.FinishReason = "tool_calls"
			case req.MaxTokens > 0 && tokens >= req.MaxTokens:
				last.FinishReason = "length"
			}
			return emit(last)
		}
		return err
	})
}

// unsupported refuses what the daemon cannot do and would answer in free text as though it had
// not been asked: a JSON format and raw completions on every release (the record shows no
// release that takes them), tools before 5.3 (by the version the daemon reports). Asking the
// version costs a request, made only when the chat has tools in it.
func (d *Driver) unsupported(ctx context.Context, req engines.ChatRequest) error {
	var what []string
	usesTools := len(req.Tools) > 0
	for _, m := range req.Messages {
		usesTools = usesTools || m.Role == "tool" || len(m.ToolCalls) > 0
	}
	if usesTools {
		reported, err := d.c.Version(ctx)
		if err != nil {
			return err
		}
		if rel := hailozoo.ReleaseOf(reported); !rel.ToolsByTemplate() {
			return &engines.Error{Code: api.CodeBadRequest, Err: fmt.Errorf(
				"hailo-ollama cannot do tools at the version %s reports, %s (5.3 and later parse tool calls, for models whose template has a tools branch): %w; upgrade hailo-ollama, or place the model on llama-server or Ollama for tools",
				d.c.URL(), rel.Name(), engines.ErrUnsupported)}
		}
	}
	if req.Format != nil {
		what = append(what, "a JSON response format")
	}
	if req.Prompt != "" {
		what = append(what, "raw completions")
	}
	if len(what) == 0 {
		return nil
	}
	return &engines.Error{Code: api.CodeBadRequest, Err: fmt.Errorf("hailo-ollama cannot do %s: %w; place the model on llama-server or Ollama for that", strings.Join(what, " or "), engines.ErrUnsupported)}
}

// Instance is a model on the Hailo-10H. It has no process of its own (Done never closes).
type Instance struct {
	*ollama.Instance
	replaced string
	servedAs string
	switched bool
}

// Switched reports whether this load put the model on the device (which held none or another),
// so its time is what a swap costs; false when the model was there already.
func (i *Instance) Switched() bool { return i.switched }

// ServedAs is the name the daemon runs the model by when it is not the one asked for (a known
// rename across releases: a restored hailo://qwen2.5-instruct:1.5b runs as qwen2.5:1.5b on
// 5.3.0), "" when they are the same.
func (i *Instance) ServedAs() string { return i.servedAs }

// Replaced names the model this load took off the device, "" when the device was free or
// already held this model. The agent marks that model's placement replaced.
func (i *Instance) Replaced() string { return i.replaced }

// Describe is what hailo-ollama lists of m in /api/tags (a HEF's family, parameter size and
// quantisation come from its manifest), asked holding the device: hailo-ollama takes one
// request at a time.
func (d *Driver) Describe(ctx context.Context, m engines.Model) (api.ModelDetails, error) {
	ref, err := ollama.Ref(m, api.RuntimeHailoOllama)
	if err != nil {
		return api.ModelDetails{}, err
	}
	ref = d.name(ref)
	if err := d.lock(ctx); err != nil {
		return api.ModelDetails{}, err
	}
	defer d.unlock()
	return d.c.Describe(ctx, ref)
}
