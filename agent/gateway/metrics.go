package gateway

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmkube/mesh/agent/dialect"
)

// How a request was served, the "route" label.
const (
	routeLocal   = "local"   // by an engine on this host
	routeForward = "forward" // forwarded to the owner agent
)

// metrics are the gateway's Prometheus collectors. Model labels only ever carry names of
// placements that exist (a request for an unknown model is counted without one), so a client
// cannot grow the series without bound.
type metrics struct {
	ttft     *prometheus.HistogramVec
	duration *prometheus.HistogramVec
	tokens   *prometheus.CounterVec
	errors   *prometheus.CounterVec
	requests *prometheus.CounterVec
	queued   *prometheus.GaugeVec

	mu    sync.RWMutex // every answer reads the cache: under the shared lock
	cache map[[2]string]*observers
}

// observers are one (model, route) pair's series, looked up once.
type observers struct {
	ttft, duration            prometheus.Observer
	prompt, completion, count prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llmkube_gateway_ttft_seconds",
			Help:    "Time from a chat request's arrival to its first token (local) or first byte (forwarded), by model and route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"model", "route"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llmkube_gateway_request_duration_seconds",
			Help:    "Chat request duration, arrival to last byte, by model and route.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"model", "route"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmkube_gateway_tokens_total",
			Help: "Tokens served by local engines, by model and kind (prompt or completion)."}, []string{"model", "kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmkube_gateway_errors_total",
			Help: "Chat and listing requests that ended in an error, by stable code and HTTP status (client_gone: the client left mid-answer)."}, []string{"code", "status"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llmkube_gateway_requests_total",
			Help: "Chat requests answered, by model and route."}, []string{"model", "route"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "llmkube_gateway_queued_requests",
			Help: "Requests waiting for an engine that serves one at a time, by runtime and engine address."}, []string{"runtime", "engine"}),
		cache: map[[2]string]*observers{},
	}
	for _, c := range []prometheus.Collector{m.ttft, m.duration, m.tokens, m.errors, m.requests, m.queued} {
		if err := reg.Register(c); err != nil {
			if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
				return nil, errors.New("gateway: metrics already registered (one gateway per registry)")
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) of(model, route string) *observers {
	key := [2]string{model, route}
	m.mu.RLock()
	o, ok := m.cache[key]
	m.mu.RUnlock()
	if ok {
		return o
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok = m.cache[key]; !ok {
		o = &observers{
			ttft:       m.ttft.WithLabelValues(model, route),
			duration:   m.duration.WithLabelValues(model, route),
			prompt:     m.tokens.WithLabelValues(model, "prompt"),
			completion: m.tokens.WithLabelValues(model, "completion"),
			count:      m.requests.WithLabelValues(model, route),
		}
		m.cache[key] = o
	}
	return o
}

func (m *metrics) fail(f *dialect.Failure) {
	m.errors.WithLabelValues(string(f.Code), strconv.Itoa(f.Status)).Inc()
}

func (m *metrics) clientGone() {
	m.errors.WithLabelValues("client_gone", "").Inc()
}

// served records one answered request.
func (m *metrics) served(model, route string, ttft, took time.Duration, prompt, completion int) {
	o := m.of(model, route)
	o.count.Inc()
	if ttft > 0 {
		o.ttft.Observe(ttft.Seconds())
	}
	o.duration.Observe(took.Seconds())
	if prompt > 0 {
		o.prompt.Add(float64(prompt))
	}
	if completion > 0 {
		o.completion.Add(float64(completion))
	}
}
