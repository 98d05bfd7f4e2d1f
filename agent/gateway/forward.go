package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/dialect"
	"github.com/llmkube/mesh/agent/hop"
	"github.com/llmkube/mesh/agent/route"
	"github.com/llmkube/mesh/internal/seal"
)

// copyBufs are the buffers forwarded answers are copied through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// retryableStatus is an owner's answer another replica may do better with: it lost the model
// (a view a moment stale), is full, or its engine is down.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusNotFound, http.StatusTooManyRequests, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// forward sends the original request (same path, same body, the caller's own token) to the
// agent that owns placement c, marked as a hop so it is never forwarded again, and streams the
// answer back, flushing each read: bytes reach the client as the owner writes them. The
// client's leaving cancels the forwarded request, which cancels the owner's engine request.
//
// An owner that fails before answering (no connection, no answer within the response-header
// timeout, lost from the mesh, or a retryable status while this is not the last replica) leaves
// nothing written, so the caller can fail over; otherwise the owner's answer, error or not, is
// the client's. An owner lost mid-answer (see Config.Liveness) ends the answer with an error in
// the stream's own form, instead of leaving the client on a silent socket.
//
// begun says the client's stream began here already (keep-alives while the model was placed
// on demand: see keepAlive): the owner's status and headers are not passed on, an error status
// is a failure for the caller to tell in the stream, and an Anthropic stream's message_start,
// which the client has, is dropped from the owner's answer.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, d dialect.Dialect, body []byte, c route.Replica, v View, final, begun bool, start time.Time) (committed bool, err error) {
	mb, ok := v.Member(c.P.Host)
	if !ok || mb.Host == nil || mb.Host.APIAddr == "" {
		return false, &dialect.Failure{Status: http.StatusBadGateway, Code: api.CodeUnreachable,
			Msg: fmt.Sprintf("host %s serves %q but the mesh view has no API address for it", c.P.Host, c.P.Model)}
	}
	c.Busy.Add(1)
	defer c.Busy.Add(-1)
	// The request ends with the client's leaving, or with its owner's loss, for which the
	// owners watch gives the reason (a *failure).
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer g.owners.watch(cancel, c.P.Host, c.P.Model)()
	lost := func() *dialect.Failure {
		f, _ := context.Cause(ctx).(*dialect.Failure)
		return f
	}
	req, err := hop.Request(ctx, r, g.hop.Scheme(), mb.Host.APIAddr, body)
	if err != nil {
		return false, dialect.BadRequest(err.Error())
	}
	resp, err := g.hop.Do(g.sealHop(req, r), seal.PeerNamed(mb.Name, mb.SealKey))
	if err != nil {
		if r.Context().Err() != nil {
			return false, r.Context().Err()
		}
		if f := lost(); f != nil {
			return false, f
		}
		if headTimeout(err) {
			return false, &dialect.Failure{Status: http.StatusGatewayTimeout, Code: api.CodeUnreachable, RetryAfter: 1,
				Msg: fmt.Sprintf("agent %s (%s) serving %q did not begin its answer within %s", c.P.Host, mb.Host.APIAddr, c.P.Model, g.cfg.ResponseHeaderTimeout)}
		}
		return false, &dialect.Failure{Status: http.StatusBadGateway, Code: api.CodeUnreachable, RetryAfter: 1,
			Msg: fmt.Sprintf("agent %s (%s) serving %q did not answer: %v", c.P.Host, mb.Host.APIAddr, c.P.Model, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 {
		// A protocol switch, or an interim answer nothing here asked for.
		return false, &dialect.Failure{Status: http.StatusBadGateway, Code: api.CodeUnreachable,
			Msg: fmt.Sprintf("agent %s answered with status %d, which the gateway does not pass on", c.P.Host, resp.StatusCode)}
	}
	if (begun && resp.StatusCode >= 400) || (!final && retryableStatus(resp.StatusCode)) {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096)) // bounded by the owner's watch too
		return false, &dialect.Failure{Status: resp.StatusCode, Code: api.CodeUnreachable,
			Msg: fmt.Sprintf("agent %s answered %d: %s", c.P.Host, resp.StatusCode, strings.TrimSpace(string(msg)))}
	}

	if resp.StatusCode >= 400 {
		// The owner counted it by its code; here it is one of the owner's refusals passed on.
		g.m.fail(&dialect.Failure{Status: resp.StatusCode, Code: "Forwarded"})
	}
	var cut startCut
	if !begun {
		hop.CopyHeaders(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		cut.done = true
	} else if d != dialect.Anthropic {
		cut.done = true
	}
	o := dialect.NewOut(w, g.cfg.StallTimeout)
	defer o.Stop()
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var first time.Time
	served := func() {
		if resp.StatusCode >= 400 {
			return
		}
		var ttft time.Duration
		if !first.IsZero() {
			ttft = first.Sub(start)
		}
		g.m.served(c.P.Model, routeForward, ttft, time.Since(start), 0, 0)
	}
	var sent tail
	for {
		n, rerr := resp.Body.Read(buf)
		p := buf[:n]
		if !cut.done {
			p = cut.pass(p, rerr != nil)
		}
		if len(p) > 0 {
			if first.IsZero() {
				first = time.Now()
			}
			send := o.Send
			if rerr == io.EOF {
				// The owner's last bytes, read with its answer's end: they go out with the
				// chunked body's terminator as the handler returns, in one write (see Out.End).
				send = o.End
			}
			if send(p) != nil {
				g.m.clientGone()
				return true, nil // returning closes the owner's answer: its engine stops
			}
			sent.add(p)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if r.Context().Err() != nil {
				if sent.ended() {
					served() // the client had the whole answer and closed it at its last event
				} else {
					g.m.clientGone()
				}
				return true, nil
			}
			f := lost()
			if f == nil {
				f = &dialect.Failure{Status: http.StatusBadGateway, Code: api.CodeUnreachable,
					Msg: fmt.Sprintf("agent %s broke off its answer: %v", c.P.Host, rerr)}
			}
			g.m.fail(f)
			g.log.Warn("forwarded answer broke off", "host", c.P.Host, "model", c.P.Model, "err", rerr)
			dialect.StreamFailure(&o, d, resp.Header.Get("Content-Type"), f)
			return true, nil
		}
	}
	served()
	return true, nil
}

// startCut drops the first event of an owner's Anthropic stream, its message_start, for a
// client that has one already (keepAlive's, while the model was placed on demand): one stream
// has one message_start. The owner's first event is held until its end is read.
type startCut struct {
	held []byte
	done bool
}

// pass is what of p goes on to the client; last says the owner's answer ends with p.
func (s *startCut) pass(p []byte, last bool) []byte {
	s.held = append(s.held, p...)
	end := bytes.Index(s.held, []byte("\n\n"))
	if end < 0 && !last && len(s.held) < maxEvent {
		return nil
	}
	s.done = true
	if end >= 0 && bytes.HasPrefix(s.held, []byte("event: message_start\n")) {
		return s.held[end+2:]
	}
	return s.held
}

// maxEvent bounds what startCut holds: a message_start is a few hundred bytes.
const maxEvent = 64 << 10

// headTimeout reports whether err is the transport's wait for an answer's head running out:
// a timeout that is not the dial's.
func headTimeout(err error) bool {
	var ne net.Error
	var op *net.OpError
	return errors.As(err, &ne) && ne.Timeout() && !(errors.As(err, &op) && op.Op == "dial")
}

// sseEnd is the last event of an OpenAI stream (chat and completions). The OpenAI SDKs close
// the answer on reading it, before the body's own end (the last, empty chunk) arrives: the
// client's leaving then cancels the forwarder's read of the owner's end, and the answer, though
// complete, would be counted as one the client left.
var sseEnd = []byte("data: [DONE]\n\n")

// tail is the end of what a forward passed on, as long as sseEnd.
type tail struct {
	b [len("data: [DONE]\n\n")]byte
	n int
}

func (t *tail) add(p []byte) {
	if len(p) >= len(t.b) {
		t.n = copy(t.b[:], p[len(p)-len(t.b):])
		return
	}
	keep := min(t.n, len(t.b)-len(p))
	copy(t.b[:], t.b[t.n-keep:t.n])
	t.n = keep + copy(t.b[keep:], p)
}

// ended reports whether what was passed on ends with an OpenAI stream's last event.
func (t *tail) ended() bool { return bytes.Equal(t.b[:t.n], sseEnd) }

// ownerPoll is how often the owners of forwarded requests are looked up in the mesh view: a
// map look-up per owner, so a tenth of a second costs nothing and ends a request within that of
// its owner's death (or grace).
const ownerPoll = 100 * time.Millisecond

// owners watches the owners of the forwarded requests in flight (see Config.Liveness), with
// one goroutine for them all that ticks while any is in flight. A goroutine and a ticker per
// request, as before, cost every relayed chat a goroutine's start and end, and at 256 relayed
// streams woke 2,560 times a second to look up the same few owners.
type owners struct {
	g       *Gateway
	mu      sync.Mutex
	hosts   map[string]*owner
	running bool
}

// owner is one owner's forwarded requests in flight.
type owner struct {
	since time.Time // first seen suspect or unreachable
	reqs  map[*watched]struct{}
}

type watched struct {
	cancel func(cause error)
	model  string
}

// watch watches host's liveness until the returned function is called, and cancels the
// forwarded request with the reason once its owner is dead, left, forgotten by the view, or
// suspect or unreachable for longer than the grace.
func (o *owners) watch(cancel func(cause error), host, model string) (stop func()) {
	if o.g.cfg.Liveness == nil {
		return func() {}
	}
	w := &watched{cancel: cancel, model: model}
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hosts[host]
	if h == nil {
		h = &owner{reqs: map[*watched]struct{}{}}
		o.hosts[host] = h
	}
	h.reqs[w] = struct{}{}
	if !o.running {
		o.running = true
		go o.run()
	}
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(h.reqs, w)
		if len(h.reqs) == 0 && o.hosts[host] == h {
			delete(o.hosts, host)
		}
	}
}

// run looks the owners up every ownerPoll until none has a request in flight.
func (o *owners) run() {
	t := time.NewTicker(ownerPoll)
	defer t.Stop()
	for now := range t.C {
		if !o.check(now) {
			return
		}
	}
}

// check ends the requests of the owners lost by now; false when none is left to watch.
func (o *owners) check(now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.hosts) == 0 {
		o.running = false
		return false
	}
	for host, h := range o.hosts {
		live, known := o.g.cfg.Liveness(host)
		var why string
		switch {
		case !known:
			why = "is no longer in the mesh view"
		case live == api.Dead || live == api.Left:
			why = "is " + string(live)
		case live == api.Suspect || live == api.Unreachable:
			if h.since.IsZero() {
				h.since = now
			}
			if held := now.Sub(h.since); held >= o.g.cfg.OwnerGrace {
				why = fmt.Sprintf("has been %s for %s", live, held.Round(100*time.Millisecond))
			}
		default:
			h.since = time.Time{}
		}
		if why == "" {
			continue
		}
		for w := range h.reqs {
			o.g.log.Warn("owner of a forwarded request lost; ending the request", "host", host, "model", w.model, "liveness", live)
			w.cancel(&dialect.Failure{Status: http.StatusBadGateway, Code: api.CodeUnreachable, RetryAfter: 1,
				Msg: fmt.Sprintf("agent %s serving %q %s in the mesh: the request to it was ended", host, w.model, why)})
		}
		delete(o.hosts, host)
	}
	return true
}

// sealHop fits req for the sealed channel, when the gateway has one: the caller's principal is
// asserted in place of its credentials, which stay here (DESIGN.md §4, "Sealed channel").
func (g *Gateway) sealHop(req, r *http.Request) *http.Request {
	if !g.hop.Sealed() {
		return req
	}
	agent.AssertOn(r.Context(), req.Header)
	return req
}
