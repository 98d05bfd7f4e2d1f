package dialect

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/llmkube/mesh/engines"
)

// Embeddings: OpenAI's POST /v1/embeddings, Ollama's POST /api/embed and its older
// /api/embeddings, read and answered in their clients' shapes.

// EmbedForm is the route an embeddings request came by.
type EmbedForm int

const (
	EmbedOpenAI       EmbedForm = iota // /v1/embeddings
	EmbedOllama                        // /api/embed
	EmbedOllamaLegacy                  // /api/embeddings
)

// EmbedCall is a parsed embeddings request.
type EmbedCall struct {
	Form   EmbedForm
	Model  string
	Inputs []string
	Base64 bool // OpenAI encoding_format "base64" (the OpenAI JS SDK's default)
}

// Dialect is the dialect the route's errors are written in.
func (f EmbedForm) Dialect() Dialect {
	if f == EmbedOpenAI {
		return OpenAI
	}
	return OllamaChat
}

// ParseEmbed reads an embeddings request that came by form.
func ParseEmbed(form EmbedForm, body []byte) (*EmbedCall, *Failure) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		Prompt         *string         `json:"prompt"` // /api/embeddings
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     *int            `json:"dimensions"`
	}
	if f := DecodeJSON(body, &req); f != nil {
		return nil, f
	}
	if req.Model == "" {
		return nil, BadRequest("model is required")
	}
	if req.Dimensions != nil {
		return nil, BadRequest("dimensions is not supported: the engines answer with the model's own")
	}
	c := &EmbedCall{Form: form, Model: req.Model}
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		c.Base64 = true
	default:
		return nil, BadRequest(fmt.Sprintf("encoding_format %q: want float or base64", req.EncodingFormat))
	}
	if form == EmbedOllamaLegacy {
		if req.Prompt == nil {
			return nil, BadRequest("prompt is required")
		}
		c.Inputs = []string{*req.Prompt}
		return c, nil
	}
	if !present(req.Input) {
		return nil, BadRequest("input is required")
	}
	var err error
	if c.Inputs, err = textInputs(req.Input); err != nil {
		return nil, BadRequest(err.Error())
	}
	return c, nil
}

// EmbedAnswer is the answer to call in its client's dialect, the engine's vectors res, took
// since the request arrived (Ollama's total_duration).
func EmbedAnswer(call *EmbedCall, res engines.Embeddings, took time.Duration) any {
	switch call.Form {
	case EmbedOpenAI:
		data := make([]oaEmbedding, len(res.Vectors))
		for i, v := range res.Vectors {
			data[i] = oaEmbedding{Object: "embedding", Index: i, Embedding: v}
			if call.Base64 {
				data[i].Embedding = base64Floats(v)
			}
		}
		return oaEmbeddings{Object: "list", Data: data, Model: call.Model,
			Usage: oaEmbedUsage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}}
	case EmbedOllama:
		return map[string]any{"model": call.Model, "embeddings": res.Vectors, "total_duration": took.Nanoseconds(),
			"load_duration": 0, "prompt_eval_count": res.PromptTokens}
	default:
		return map[string]any{"embedding": res.Vectors[0]}
	}
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
