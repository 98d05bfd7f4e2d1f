package simserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// WriteJSON writes v as the body with a Content-Length, so the body is complete once flushed.
// Should v not encode, the answer is a 500 with failed as its body, in the engine's error shape.
func WriteJSON(w http.ResponseWriter, code int, v any, failed string) {
	body, err := json.Marshal(v)
	if err != nil {
		code, body = http.StatusInternalServerError, []byte(failed)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(code)
	w.Write(body)
}

// Key is how a request is counted: "METHOD /path".
func Key(r *http.Request) string { return r.Method + " " + r.URL.Path }

// Requests counts a listener's requests by Key, as GET /_sim/stats reports them. The zero value
// is ready to use.
type Requests struct {
	mu sync.Mutex
	n  map[string]int
}

// Add counts one request under key.
func (c *Requests) Add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
}

// Snapshot is a copy of the counts, empty (never nil, so it encodes as {}) before any request.
func (c *Requests) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// WithStats serves a simulator whose own routes live under /_sim/: GET /_sim/stats answers
// stats() as JSON, any other /_sim/ path is net/http's 404 (405 for another method on
// /_sim/stats), and none of them is counted. Every other request is counted in reqs, then served
// by engine.
func WithStats(reqs *Requests, stats func() any, engine http.Handler) http.Handler {
	sim := http.NewServeMux()
	sim.HandleFunc("GET /_sim/stats", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, stats(), `{"error":"encoding failed"}`)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/_sim/") {
			sim.ServeHTTP(w, r)
			return
		}
		reqs.Add(Key(r))
		engine.ServeHTTP(w, r)
	})
}
