package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/dialect"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/agent/route"
	"github.com/llmkube/mesh/engines"
)

func (g *Gateway) openAICompletions(w http.ResponseWriter, r *http.Request) {
	g.chat(w, r, dialect.Completions)
}

func (g *Gateway) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	g.chat(w, r, dialect.Anthropic)
}

func (g *Gateway) openAIResponses(w http.ResponseWriter, r *http.Request) {
	g.chat(w, r, dialect.Responses)
}

func (g *Gateway) openAIChat(w http.ResponseWriter, r *http.Request) {
	g.chat(w, r, dialect.OpenAI)
}

func (g *Gateway) ollamaChat(w http.ResponseWriter, r *http.Request) {
	g.chat(w, r, dialect.OllamaChat)
}

func (g *Gateway) ollamaGenerate(w http.ResponseWriter, r *http.Request) {
	g.chat(w, r, dialect.OllamaGenerate)
}

// chat answers a chat in any dialect: parse, find the replicas, serve from the least busy one
// (locally or by forwarding), failing over to the next only while nothing has been written.
// Errors come in a fixed order: 401 (the middleware), 400 and 413 (the request), 404 (no such
// model for this token), 503 (not ready), then the engine's.
//
// A prompt longer than the context is the engine's to refuse: only its tokenizer, with the
// model's chat template applied, knows the prompt's length (a rule of thumb such as four bytes
// per token refused prompts that fit, and asking llama-server's /tokenize first would cost a
// round trip per chat while still missing the template's tokens). The engine's refusal is
// answered as a clear context-length error (400, context_length_exceeded), after trying any
// replica with a larger context.
func (g *Gateway) chat(w http.ResponseWriter, r *http.Request, d dialect.Dialect) {
	start := time.Now()
	in, ok := g.receive(w, r, d)
	if !ok {
		return
	}
	body := in.body
	// Routing needs the model alone. The whole request is parsed where it is answered: served
	// here, or refused here (a malformed request is answered 400 before an unknown model's
	// 404); one forwarded is parsed by its owner, which answers a malformed one the same 400.
	// One forwarded here is served here or not at all: it is parsed whole at once.
	var call *dialect.Call
	parse := func() *dialect.Failure {
		if call == nil {
			c, f := dialect.Parse(d, body)
			if f != nil {
				return f
			}
			call = c
		}
		return nil
	}
	parsed := func() bool {
		if f := parse(); f != nil {
			g.fail(w, d, f)
			return false
		}
		return true
	}
	var model string
	ok = false
	if !in.forwarded {
		model, ok = dialect.ModelName(body)
	}
	if !ok {
		if !parsed() {
			return
		}
		model = call.Model
	}
	// begun is the answer's encoder when it began while the model was placed on demand (its
	// keep-alives went out): the answer goes on in it, a failure too.
	var begun dialect.Encoder
	keep := func() (dialect.Encoder, *dialect.Failure) {
		if f := parse(); f != nil {
			return nil, f
		}
		if !call.Stream {
			return nil, nil
		}
		if enc := dialect.NewEncoder(call, w, g.cfg.StallTimeout, start); canKeepAlive(enc) {
			begun = enc
		}
		return begun, nil
	}
	defer func() {
		if begun != nil {
			begun.Stop()
		}
	}()
	rt, f := g.replicas(in, model, keep)
	if f != nil {
		if parsed() {
			g.failBegun(w, d, begun, f)
		}
		return
	}
	refused := 0 // the largest context an engine found the prompt too long for
	err := route.Failover(r.Context(), rt.cands, route.Policy{
		// Only a replica with a larger context can take a prompt one found too long.
		Skip: func(c route.Replica) bool { return refused > 0 && c.P.Context <= refused },
		Judge: func(c route.Replica, err error) (error, bool) {
			f := dialect.FailureOf(err)
			if c.Local != nil {
				f = explain(f, c.P, call)
			}
			if f.Code == api.CodeContextLimit && c.P.Context > 0 {
				refused = c.P.Context
				return f, true
			}
			return f, f.Retryable()
		},
		Log: g.log,
	}, func(c route.Replica, final bool) (bool, error) {
		if c.Local == nil {
			return g.forward(w, r, d, body, c, rt.v, final, begun != nil, start)
		}
		if !parsed() {
			return true, nil
		}
		if call.Load {
			return g.load(w, r, call, c)
		}
		return g.serveLocal(w, r, call, c, start, begun)
	})
	if err != nil && begun != nil && r.Context().Err() == nil {
		g.failBegun(w, d, begun, dialect.FailureOf(err))
		return
	}
	g.failedOver(w, r, d, err)
}

// failBegun answers a failure: in the stream when its answer began (begun, not nil), else as
// an error status.
func (g *Gateway) failBegun(w http.ResponseWriter, d dialect.Dialect, begun dialect.Encoder, f *dialect.Failure) {
	if begun == nil {
		g.fail(w, d, f)
		return
	}
	g.m.fail(f)
	begun.Fail(f)
}

// failedOver ends a request after its failover (route.Failover's err): nothing more when a
// replica answered, the client's leaving counted, or the last failure answered.
func (g *Gateway) failedOver(w http.ResponseWriter, r *http.Request, d dialect.Dialect, err error) {
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		g.m.clientGone()
	default:
		g.fail(w, d, dialect.FailureOf(err))
	}
}

// inbound is a model route's request as far as every such route reads it alike.
type inbound struct {
	who       api.Principal
	body      []byte
	forwarded bool // it made its hop already: served here or not at all
	ctx       context.Context
}

// receive reads what every model route reads first, refusing in the fixed order: no caller
// (401), a protocol upgrade (400), a body too large or unreadable (413, 400).
func (g *Gateway) receive(w http.ResponseWriter, r *http.Request, d dialect.Dialect) (inbound, bool) {
	who, ok := principal(r)
	if !ok {
		g.fail(w, d, &dialect.Failure{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Msg: "no authenticated caller"})
		return inbound{}, false
	}
	if r.Header.Get("Upgrade") != "" {
		g.fail(w, d, dialect.BadRequest("protocol upgrades are not served"))
		return inbound{}, false
	}
	body, f := dialect.ReadBody(w, r, g.cfg.MaxBody)
	if f != nil {
		g.fail(w, d, f)
		return inbound{}, false
	}
	return inbound{who: who, body: body, forwarded: r.Header.Get(hop.Header) != "", ctx: r.Context()}, true
}

// routing is where a request may go: its replicas, best first, and the view they came from.
type routing struct {
	cands []route.Replica
	v     View // nil for a forwarded request, or without a mesh
}

// replicas finds the replicas of model as the caller may name it — scoped first, so a name never
// resolves across namespaces — and says why it is not served (404, or why not ready) when there
// are none. The view is the mesh's, taken only if needed (empty for a forwarded request, which
// is served locally or not at all). keep, when not nil, is asked before a wait for a placement
// on demand for the encoder whose stream keepAlive keeps alive meanwhile (nil: none), or the
// failure that answers the request instead.
func (g *Gateway) replicas(in inbound, model string, keep func() (dialect.Encoder, *dialect.Failure)) (routing, *dialect.Failure) {
	var v View
	if !in.forwarded {
		v = g.router.View()
	}
	who, model := g.router.Scope(in.who, model, in.forwarded, v)
	name, cands := g.router.Lookup(who, model, in.forwarded, v)
	if len(cands) == 0 {
		u := g.router.NotServed(who, name, in.forwarded, v)
		if u.NotReady || in.forwarded || g.cfg.OnDemand == nil {
			return routing{}, unserved(u)
		}
		// Nothing runs it: the mesh may place it on demand, or wait for what it keeps
		// (agent/keeper), and serve it once ready.
		var enc dialect.Encoder
		if keep != nil {
			var f *dialect.Failure
			if enc, f = keep(); f != nil {
				return routing{}, f
			}
		}
		if err := keepAlive(enc, func() error { return g.cfg.OnDemand(in.ctx, who, name) }); err != nil {
			return routing{}, dialect.FailureOf(err)
		}
		v = g.router.View()
		if name, cands = g.router.Lookup(who, model, false, v); len(cands) == 0 {
			return routing{}, unserved(g.router.NotServed(who, name, false, v))
		}
	}
	return routing{cands: cands, v: v}, nil
}

// unserved is the client's answer when no replica takes a request: 503 while the caller's
// model is not ready, 404 when the caller may see none.
func unserved(u *route.Unserved) *dialect.Failure {
	if u.NotReady {
		return &dialect.Failure{Status: http.StatusServiceUnavailable, Code: api.CodeEngineUnavailable, OACode: "model_not_ready", Msg: u.Msg, RetryAfter: 1}
	}
	return &dialect.Failure{Status: http.StatusNotFound, Code: api.CodeNotFound, OACode: "model_not_found", Msg: u.Msg}
}

// fail answers an error and counts it.
func (g *Gateway) fail(w http.ResponseWriter, d dialect.Dialect, f *dialect.Failure) {
	g.m.fail(f)
	dialect.WriteFailure(w, d, f)
}

// explain names the likely cause of an engine failure that does not say it: hailo-ollama
// answers a prompt longer than its context with a bare HTTP 500, so a failure on a prompt that
// is over the context by the rough count is reported as a context-length error, saying that
// the count is rough.
func explain(f *dialect.Failure, p api.Placement, call *dialect.Call) *dialect.Failure {
	if f.Code != api.CodeEngineError || p.Runtime != api.RuntimeHailoOllama || p.Context <= 0 || call.PromptTokens <= p.Context {
		return f
	}
	return &dialect.Failure{Status: http.StatusBadRequest, Code: api.CodeContextLimit, OACode: "context_length_exceeded",
		Msg: fmt.Sprintf("the prompt is likely longer than the model's %d-token context: hailo-ollama failed without a reason (%s) on a prompt of about %d tokens by a rough count (%d bytes per token); shorten the conversation",
			p.Context, f.Msg, call.PromptTokens, dialect.BytesPerToken)}
}

// relay passes a driver's chunks to a chat's encoder and keeps what they tell: when the first
// piece came and the answer ended, how many pieces, and the last chunk. One value, so that the
// chat allocates it once (a variable each, captured by a closure, and a copy of the last chunk
// were five). The clock is read for the first piece and the last chunk, not for every piece
// (47 ns a read on this machine): the last chunk follows the last piece at once (Ollama's
// done line, llama-server's last event with its timings, hailo's end of stream).
type relay struct {
	enc         dialect.Encoder
	first, last time.Time
	count       int
	final       engines.ChatChunk
	done        bool // final is the last chunk
	// stops are the sequences that end the answer where they occur (dialect.Call.MatchStop);
	// held is the answer's tail that may begin one, not written yet; stopped is the one that
	// ended the answer.
	stops         []string
	held, stopped string
}

func newRelay(enc dialect.Encoder, stops []string) *relay {
	return &relay{enc: enc, stops: stops}
}

// errStopped ends the engine's answer once a stop sequence occurred in it.
var errStopped = fmt.Errorf("a stop sequence ended the answer: %w", engines.ErrEnough)

// matchStop adds piece to the held tail and returns the text that may be written now. When a
// stop sequence occurs, stopped names it and the text before it is the answer's last; otherwise
// the longest tail that begins a sequence is held back. (A held tail starts where a sequence's
// first byte does, a rune's start: no rune is split.)
func (run *relay) matchStop(piece string) string {
	s := run.held + piece
	at := -1
	for _, seq := range run.stops {
		if i := strings.Index(s, seq); i >= 0 && (at < 0 || i < at) {
			at, run.stopped = i, seq
		}
	}
	if at >= 0 {
		run.held = ""
		return s[:at]
	}
	keep := 0
	for _, seq := range run.stops {
		for n := min(len(seq)-1, len(s)); n > keep; n-- {
			if strings.HasSuffix(s, seq[:n]) {
				keep = n
				break
			}
		}
	}
	run.held = s[len(s)-keep:]
	return s[:len(s)-keep]
}

// flushHeld writes a held tail that no stop sequence followed.
func (run *relay) flushHeld() error {
	if run.held == "" {
		return nil
	}
	held := run.held
	run.held = ""
	return run.enc.Chunk(held)
}

// take is the driver's emit.
func (run *relay) take(ch engines.ChatChunk) error {
	enc := run.enc
	if run.done {
		return nil // nothing follows the last chunk
	}
	if !ch.More {
		if err := enc.Release(); err != nil {
			return err
		}
	}
	// The first piece always goes out at once: the time to it is what a client waits.
	enc.Hold(ch.More && !ch.Done && !run.first.IsZero())
	if ch.Content != "" {
		if run.first.IsZero() {
			run.first = time.Now()
		}
		run.count++
		text := ch.Content
		if len(run.stops) > 0 {
			text = run.matchStop(text)
		}
		if text != "" {
			if err := enc.Chunk(text); err != nil {
				return err
			}
		}
		if run.stopped != "" {
			run.last, run.done = time.Now(), true
			if ch.Done {
				run.final = ch // the engine's counts, which came with the sequence
				return nil
			}
			return errStopped // the engine is cut off: its counts are lost, the relay's stand in
		}
	}
	if ch.Done || len(ch.ToolCalls) > 0 {
		if err := run.flushHeld(); err != nil {
			return err
		}
	}
	if len(ch.ToolCalls) > 0 {
		if run.first.IsZero() {
			run.first = time.Now()
		}
		run.last = time.Now()
		if err := enc.ToolCalls(ch.ToolCalls); err != nil {
			return err
		}
	}
	if ch.Done {
		run.final, run.done = ch, true
		if !run.first.IsZero() {
			run.last = time.Now()
		}
	}
	return nil
}

// serveLocal runs a chat on a local placement's engine through its driver, writing each chunk
// as it comes. It returns committed once anything reached the client (the request is then
// answered, error or not); otherwise err says why, and another replica may be tried.
func (g *Gateway) serveLocal(w http.ResponseWriter, r *http.Request, call *dialect.Call, c route.Replica, start time.Time, begun dialect.Encoder) (committed bool, err error) {
	if f := dialect.RefuseImages(call, c.Local.Driver, c.Local.Model, c.P); f != nil {
		return false, f
	}
	if f := dialect.FetchImages(r.Context(), call, g.images); f != nil {
		return false, f
	}
	c.Busy.Add(1)
	defer c.Busy.Add(-1)
	ctx := r.Context()
	req := call.Req
	if call.Dialect == dialect.Responses {
		who, _ := principal(r)
		scope := itemScope(who.Namespace, who.Admin)
		msgs, f := g.withReferences(call, scope)
		if f != nil {
			return false, f
		}
		req.Messages = msgs
		withItems := *call
		withItems.Remember = func(id, text string) { g.items.put(scope, id, text) }
		call = &withItems
	}
	enc := begun
	if enc == nil {
		enc = dialect.NewEncoder(call, w, g.cfg.StallTimeout, start)
		defer enc.Stop()
	}
	// Once ": loading" went out (a sleeping model woke, or one was placed on demand: begun),
	// the answer is committed: a failure goes in the stream.
	refused := func(err error) (bool, error) {
		if !enc.Started() {
			return false, err
		}
		if ctx.Err() == nil {
			f := dialect.FailureOf(err)
			g.m.fail(f)
			enc.Fail(f)
		}
		return true, nil
	}
	c, release, err := g.acquire(ctx, c, enc)
	if err != nil {
		return refused(err)
	}
	defer release()
	p := c.P
	if q := g.queueFor(p); q != nil {
		release, err := q.acquire(ctx)
		if err != nil {
			return refused(err)
		}
		defer release()
	}
	if call.KeepAlive != nil {
		g.a.SetTTL(p.ID, *call.KeepAlive)
	}

	engineStart := time.Now()
	run := newRelay(enc, call.MatchStop)
	err = c.Local.Driver.Chat(ctx, c.Local.Model, req, run.take)
	enc.Hold(false) // what follows is the end or an error: it goes out at once, with anything held
	if run.stopped != "" && ctx.Err() == nil && !enc.WriteFailed() {
		err = nil // the relay ended the answer (errStopped), whatever the driver made of it
	}
	if err == nil && !run.done {
		err = &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("%s ended the answer without its last chunk", p.Runtime)}
	}
	if err != nil {
		if ctx.Err() != nil || enc.WriteFailed() {
			g.m.clientGone()
			g.log.Debug("client left mid-answer; engine request cancelled", "model", p.Model, "placement", p.ID, "client", hop.ClientAddr(r))
			return true, nil
		}
		if !enc.Started() {
			return false, err
		}
		f := dialect.FailureOf(err)
		g.m.fail(f)
		enc.Fail(f)
		g.log.Warn("engine failed mid-answer", "model", p.Model, "placement", p.ID, "err", err)
		return true, nil
	}

	st := dialect.Stats{
		StopSequence:     run.stopped,
		Finish:           run.final.FinishReason,
		PromptTokens:     run.final.PromptTokens,
		CompletionTokens: run.final.CompletionTokens,
		Total:            time.Since(start),
	}
	if st.Finish == "" {
		st.Finish = "stop"
	}
	if st.PromptTokens == 0 {
		st.PromptTokens = call.PromptTokens // the engine gave no count: the estimate
	}
	if st.CompletionTokens == 0 {
		st.CompletionTokens = run.count
	}
	var ttft time.Duration
	var tps float64
	if !run.first.IsZero() {
		ttft = run.first.Sub(engineStart)
		st.PromptEval, st.Eval = ttft, run.last.Sub(run.first)
		// Speed over the tokens after the first: the first one's wait is the TTFT.
		if st.CompletionTokens > 1 && st.Eval > 0 {
			tps = float64(st.CompletionTokens-1) / st.Eval.Seconds()
		}
	}
	// Measured before the last write, so that whoever sees the answer end sees its figures too.
	g.speedOf(p.ID).add(ttft, tps)
	var clientTTFT time.Duration
	if !run.first.IsZero() {
		clientTTFT = run.first.Sub(start)
	}
	g.m.served(p.Model, routeLocal, clientTTFT, time.Since(start), st.PromptTokens, st.CompletionTokens)
	if err := enc.Finish(st); err != nil {
		g.m.clientGone()
	}
	return true, nil
}
