package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/dialect"
	"github.com/llmkube/mesh/agent/route"
	"github.com/llmkube/mesh/engines"
)

// anthropicCountTokens answers POST /v1/messages/count_tokens with {"input_tokens":N}: the
// request's messages, system prompt and tools as the serving engine's own tokenizer counts
// them, with the model's chat template applied (engines.TokenCounter). An engine without a
// tokenizer the gateway can ask (Ollama, hailo-ollama) is answered 501 saying so: a count by
// the rule of thumb would be a guess passed off as the engine's.
func (g *Gateway) anthropicCountTokens(w http.ResponseWriter, r *http.Request) {
	const d = dialect.Anthropic
	start := time.Now()
	in, ok := g.receive(w, r, d)
	if !ok {
		return
	}
	// The body is a Messages request without max_tokens: parsed with a placeholder one.
	var call *dialect.Call
	parsed := func() *dialect.Failure {
		if call != nil {
			return nil
		}
		var req map[string]json.RawMessage
		if f := dialect.DecodeJSON(in.body, &req); f != nil {
			return f
		}
		if _, ok := req["max_tokens"]; !ok {
			req["max_tokens"] = json.RawMessage("1")
		}
		delete(req, "stream")
		body, _ := json.Marshal(req)
		var f *dialect.Failure
		call, f = dialect.ParseAnthropic(body)
		return f
	}
	model, ok := dialect.ModelName(in.body)
	if !ok || in.forwarded {
		if f := parsed(); f != nil {
			g.fail(w, d, f)
			return
		}
		model = call.Model
	}
	rt, f := g.replicas(in, model, nil)
	if f != nil {
		if pf := parsed(); pf != nil {
			f = pf // a malformed request is answered 400 before an unknown model's 404
		}
		g.fail(w, d, f)
		return
	}
	err := route.Failover(r.Context(), rt.cands, route.Policy{
		// Another replica may run on an engine that can count.
		Judge: func(_ route.Replica, err error) (error, bool) {
			f := dialect.FailureOf(err)
			return f, f.Retryable()
		},
		Log: g.log,
	}, func(c route.Replica, final bool) (bool, error) {
		if c.Local == nil {
			return g.forward(w, r, d, in.body, c, rt.v, final, false, start)
		}
		if f := parsed(); f != nil {
			return false, f
		}
		tc, ok := c.Local.Driver.(engines.TokenCounter)
		if !ok {
			return false, &dialect.Failure{Status: http.StatusNotImplemented, Code: api.CodeEngineError,
				Msg: fmt.Sprintf("count_tokens: model %q runs on %s, whose tokenizer the gateway cannot ask; only llama-server's can be", c.P.Model, c.P.Runtime)}
		}
		c, release, err := g.acquire(r.Context(), c, nil) // the tokenizer is the engine's: a sleeping one wakes
		if err != nil {
			return false, err
		}
		defer release()
		n, err := tc.CountTokens(r.Context(), c.Local.Model, call.Req)
		if err != nil {
			return false, err
		}
		b := strconv.AppendInt([]byte(`{"input_tokens":`), int64(n), 10)
		b = append(b, "}\n"...)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		w.Write(b)
		return true, nil
	})
	g.failedOver(w, r, d, err)
}
