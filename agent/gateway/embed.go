package gateway

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
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

type embedForm int

const (
	embedOpenAI       embedForm = iota // /v1/embeddings
	embedOllama                        // /api/embed
	embedOllamaLegacy                  // /api/embeddings
)

type embedCall struct {
	form   embedForm
	model  string
	inputs []string
	base64 bool // OpenAI encoding_format "base64" (the OpenAI JS SDK's default)
}

func (f embedForm) dialect() dialect.Dialect {
	if f == embedOpenAI {
		return dialect.OpenAI
	}
	return dialect.OllamaChat
}

func parseEmbed(form embedForm, body []byte) (*embedCall, *dialect.Failure) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		Prompt         *string         `json:"prompt"` // /api/embeddings
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     *int            `json:"dimensions"`
	}
	if f := dialect.DecodeJSON(body, &req); f != nil {
		return nil, f
	}
	if req.Model == "" {
		return nil, dialect.BadRequest("model is required")
	}
	if req.Dimensions != nil {
		return nil, dialect.BadRequest("dimensions is not supported: the engines answer with the model's own")
	}
	c := &embedCall{form: form, model: req.Model}
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		c.base64 = true
	default:
		return nil, dialect.BadRequest(fmt.Sprintf("encoding_format %q: want float or base64", req.EncodingFormat))
	}
	if form == embedOllamaLegacy {
		if req.Prompt == nil {
			return nil, dialect.BadRequest("prompt is required")
		}
		c.inputs = []string{*req.Prompt}
		return c, nil
	}
	if !dialect.Present(req.Input) {
		return nil, dialect.BadRequest("input is required")
	}
	var err error
	if c.inputs, err = dialect.TextInputs(req.Input); err != nil {
		return nil, dialect.BadRequest(err.Error())
	}
	return c, nil
}

func (g *Gateway) openAIEmbeddings(w http.ResponseWriter, r *http.Request) {
	g.embed(w, r, embedOpenAI)
}
func (g *Gateway) ollamaEmbed(w http.ResponseWriter, r *http.Request) { g.embed(w, r, embedOllama) }
func (g *Gateway) ollamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	g.embed(w, r, embedOllamaLegacy)
}

// embed answers an embeddings request from the least busy replica that can embed, locally or
// by forwarding, failing over while nothing is written.
func (g *Gateway) embed(w http.ResponseWriter, r *http.Request, form embedForm) {
	start := time.Now()
	d := form.dialect()
	in, ok := g.receive(w, r, d)
	if !ok {
		return
	}
	body := in.body
	call, f := parseEmbed(form, body)
	if f != nil {
		g.fail(w, d, f)
		return
	}
	rt, f := g.replicas(in, call.model)
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
		return g.forward(w, r, d, body, c, rt.v, final, start)
	})
	g.failedOver(w, r, d, err)
}

// embedLocal embeds on a local placement's engine and writes the whole answer.
func (g *Gateway) embedLocal(w http.ResponseWriter, r *http.Request, call *embedCall, c route.Replica, start time.Time) (bool, error) {
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
	res, err := emb.Embed(r.Context(), c.Local.Model, call.inputs)
	if err != nil {
		return false, err
	}
	if res.PromptTokens == 0 { // the engine gave no count: the estimate
		msgs := make([]engines.Message, len(call.inputs))
		for i, in := range call.inputs {
			msgs[i].Content = in
		}
		res.PromptTokens = dialect.EstimateTokens(msgs)
	}
	var body any
	switch call.form {
	case embedOpenAI:
		data := make([]oaEmbedding, len(res.Vectors))
		for i, v := range res.Vectors {
			data[i] = oaEmbedding{Object: "embedding", Index: i, Embedding: v}
			if call.base64 {
				data[i].Embedding = base64Floats(v)
			}
		}
		body = oaEmbeddings{Object: "list", Data: data, Model: call.model,
			Usage: oaEmbedUsage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}}
	case embedOllama:
		body = map[string]any{"model": call.model, "embeddings": res.Vectors, "total_duration": time.Since(start).Nanoseconds(),
			"load_duration": 0, "prompt_eval_count": res.PromptTokens}
	default:
		body = map[string]any{"embedding": res.Vectors[0]}
	}
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

type oaEmbedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type oaEmbedUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type oaEmbeddings struct {
	Object string        `json:"object"`
	Data   []oaEmbedding `json:"data"`
	Model  string        `json:"model"`
	Usage  oaEmbedUsage  `json:"usage"`
}

// base64Floats is OpenAI's encoding_format "base64": the vector's float32s, little-endian.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
