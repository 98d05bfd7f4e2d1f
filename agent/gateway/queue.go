package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/dialect"
)

// serial reports whether a runtime serves one request at a time. hailo-ollama has one
// generator on one device and one pending request per connection; llama-server has slots and
// Ollama its own scheduler, so the gateway lets those take requests in parallel.
func serial(r api.Runtime) bool { return r == api.RuntimeHailoOllama }

// queue admits one request at a time to an engine, with a bounded number waiting behind it.
type queue struct {
	waitingGauge prometheus.Gauge
	slot         chan struct{}
	waiting      atomic.Int64
	depth        int64
	avg          atomic.Int64 // rolling time one request holds the engine, ns: for Retry-After
}

func newQueue(depth int, waiting prometheus.Gauge) *queue {
	return &queue{slot: make(chan struct{}, 1), depth: int64(depth), waitingGauge: waiting}
}

// queueFor returns the queue of the engine serving p, or nil when the engine takes requests in
// parallel. Placements on one daemon share its queue: it is one device.
func (g *Gateway) queueFor(p api.Placement) *queue {
	if !serial(p.Runtime) {
		return nil
	}
	key := string(p.Runtime) + " " + p.Engine
	g.mu.Lock()
	defer g.mu.Unlock()
	q, ok := g.queues[key]
	if !ok {
		q = newQueue(g.cfg.QueueDepth, g.m.queued.WithLabelValues(string(p.Runtime), p.Engine))
		g.queues[key] = q
	}
	return q
}

// acquire waits for the engine. It fails at once with 429 and a Retry-After estimate when the
// queue is full, and with the context's error when the client leaves while waiting.
func (q *queue) acquire(ctx context.Context) (release func(), err error) {
	select {
	case q.slot <- struct{}{}:
		return q.releaser(), nil
	default:
	}
	if n := q.waiting.Add(1); n > q.depth {
		q.waiting.Add(-1)
		return nil, &dialect.Failure{Status: http.StatusTooManyRequests, Code: api.CodeTooBusy, OACode: "rate_limit_exceeded",
			Msg:        fmt.Sprintf("the engine serves one request at a time and %d are already waiting; retry later", q.depth),
			RetryAfter: q.retryAfter(n)}
	}
	q.waitingGauge.Inc()
	defer func() {
		q.waiting.Add(-1)
		q.waitingGauge.Dec()
	}()
	select {
	case q.slot <- struct{}{}:
		return q.releaser(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (q *queue) releaser() func() {
	start := time.Now()
	return func() {
		took := int64(time.Since(start))
		if old := q.avg.Load(); old > 0 {
			took = (7*old + 3*took) / 10
		}
		q.avg.Store(took)
		<-q.slot
	}
}

// retryAfter is the time in whole seconds (at least 1) until the queue has likely room: the
// requests ahead times how long one usually takes.
func (q *queue) retryAfter(ahead int64) int {
	s := math.Ceil(float64(ahead) * float64(q.avg.Load()) / float64(time.Second))
	return int(max(1, min(s, 3600)))
}
