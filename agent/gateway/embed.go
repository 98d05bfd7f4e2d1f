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

// Embeddings: OpenAI's POST /v1/embeddings, Ollama's POST /api/embed and its older
// /api/embeddings, served by the engines that embed (engines.Embedder: Ollama, llama-server
// started with --embeddings) and refused clearly by the others (hailo-ollama).

func (g *Gateway) openAIEmbeddings(w http.ResponseWriter, r *http.Request) {
	g.embed(w, r, dialect.EmbedOpenAI)
}
func (g *Gateway) ollamaEmbed(w http.ResponseWriter, r *http.Request) {
	g.embed(w, r, dialect.EmbedOllama)
}
func (g *Gateway) ollamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	g.embed(w, r, dialect.EmbedOllamaLegacy)
}

// embed answers an embeddings request from the least busy replica that can embed, locally or
// by forwarding, failing over while nothing is written.
func (g *Gateway) embed(w http.ResponseWriter, r *http.Request, form dialect.EmbedForm) {
	start := time.Now()
	d := form.Dialect()
	in, ok := g.receive(w, r, d)
	if !ok {
		return
	}
	body := in.body
	call, f := dialect.ParseEmbed(form, body)
	if f != nil {
		g.fail(w, d, f)
		return
	}
	rt, f := g.replicas(in, call.Model, nil)
	if f != nil {
		g.fail(w, d, f)
		return
	}
	err := route.Failover(r.Context(), rt.cands, route.Policy{
		Judge: func(_ route.Replica, err error) (error, bool) {
			f := dialect.FailureOf(err)
			return f, f.Retryable() || f.Code == api.CodeBadRequest // a replica that cannot embed may sit beside one that can
		},
		Log: g.log,
	}, func(c route.Replica, final bool) (bool, error) {
		if c.Local != nil {
			return g.embedLocal(w, r, call, c, start)
		}
		return g.forward(w, r, d, body, c, rt.v, final, false, start)
	})
	g.failedOver(w, r, d, err)
}

// embedLocal embeds on a local placement's engine and writes the whole answer.
func (g *Gateway) embedLocal(w http.ResponseWriter, r *http.Request, call *dialect.EmbedCall, c route.Replica, start time.Time) (bool, error) {
	emb, ok := c.Local.Driver.(engines.Embedder)
	if !ok {
		return false, dialect.BadRequest(fmt.Sprintf("model %q runs on %s, which cannot embed text: %v", c.P.Model, c.P.Runtime, engines.ErrUnsupported))
	}
	c.Busy.Add(1)
	defer c.Busy.Add(-1)
	c, done, err := g.acquire(r.Context(), c, nil)
	if err != nil {
		return false, err
	}
	defer done()
	if q := g.queueFor(c.P); q != nil {
		release, err := q.acquire(r.Context())
		if err != nil {
			return false, err
		}
		defer release()
	}
	res, err := emb.Embed(r.Context(), c.Local.Model, call.Inputs)
	if err != nil {
		return false, err
	}
	if res.PromptTokens == 0 { // the engine gave no count: the estimate
		msgs := make([]engines.Message, len(call.Inputs))
		for i, in := range call.Inputs {
			msgs[i].Content = in
		}
		res.PromptTokens = dialect.EstimateTokens(msgs)
	}
	body := dialect.EmbedAnswer(call, res, time.Since(start))
	b, err := json.Marshal(body)
	if err != nil {
		return false, &dialect.Failure{Status: http.StatusBadGateway, Code: api.CodeEngineError, Msg: "the engine's embeddings cannot be written: " + err.Error()}
	}
	g.m.served(c.P.Model, routeLocal, 0, time.Since(start), res.PromptTokens, 0)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(http.StatusOK)
	w.Write(append(b, '\n'))
	return true, nil
}
