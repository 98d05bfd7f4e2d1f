package gateway_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
)

// TestRealLlamaServer runs the gateway against the real llama-server (enginetest finds it, and
// skips saying why when it is absent) with a tiny random-weight model: openai-go streaming and
// not, the Ollama dialect, the context refused by the engine's own count (a prompt the
// 4-bytes-per-token guess refused is served), the engine's own refusals passed on as the
// client's errors, and the official JS clients.
func TestRealLlamaServer(t *testing.T) {
	bin := enginetest.LlamaServer(t)
	model := enginetest.TinyGGUF(t)
	d, err := llamaserver.New(llamaserver.Config{Binary: bin, LogDir: t.TempDir(), ModelsDir: t.TempDir(),
		StopGrace: 5 * time.Second, HealthTimeout: 2 * time.Minute}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.StopAll(context.Background()) })
	n := newNode(t, nodeOpts{name: "box", drivers: []engines.Driver{d}})
	place(t, n, api.PlacementRequest{Source: model, Name: "tiny", Context: 512})
	client := openAIClient(n, adminToken)

	params := userChat("tiny", "Hello, llama.")
	params.MaxTokens = openai.Int(6)
	// Greedy: sampled, the random-weight model ends some answers early (finish "stop" after 4
	// tokens, seen once in make test); greedy, it writes the same 6 tokens every time.
	params.Temperature = openai.Float(0)
	whole, err := client.Chat.Completions.New(t.Context(), params)
	require.NoError(t, err)
	assert.NotEmpty(t, whole.Choices[0].Message.Content)
	assert.Positive(t, whole.Usage.PromptTokens, "the engine's own count")
	assert.Equal(t, int64(6), whole.Usage.CompletionTokens)

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	assert.NotEmpty(t, acc.Choices[0].Message.Content)
	assert.Equal(t, "length", acc.Choices[0].FinishReason)
	assert.Equal(t, int64(6), acc.Usage.CompletionTokens)

	// ~3,150 bytes the engine counts at ~300 tokens: the old guess (788 "tokens") refused it.
	fits := strings.Repeat("internationalization ", 150)
	resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("tiny", fits, false, `"max_tokens":2`))
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var usage struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &usage))
	assert.Less(t, usage.Usage.PromptTokens, 512)
	assert.Greater(t, len(fits)/4, 512)
	// Really too long: the engine's refusal, as a context-length error.
	resp, b = call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("tiny", strings.Repeat("internationalization ", 600), false, ""))
	require.Equal(t, 400, resp.StatusCode, "%s", b)
	code, _, msg := oaErr(t, b)
	assert.Equal(t, "context_length_exceeded", code)
	assert.Contains(t, msg, "512")

	// A JSON answer reaches the engine's grammar. The tiny model's chat template has no tokens
	// for the grammar llama-server builds, so the engine refuses, and the client is told so
	// (400, not 502); a model that can answers JSON.
	params = userChat("tiny", "Which city?")
	params.MaxTokens = openai.Int(16)
	params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "c", Schema: map[string]any{"type": "object"}}}}
	js, err := client.Chat.Completions.New(t.Context(), params)
	if err != nil {
		var oe *openai.Error
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, 400, oe.StatusCode, "%v", err)
		assert.Contains(t, oe.Message, "llama-server")
	} else if js.Choices[0].FinishReason == "stop" {
		assert.True(t, json.Valid([]byte(js.Choices[0].Message.Content)), "%q", js.Choices[0].Message.Content)
	}

	// A raw completion, whole and streamed, through the engine's /v1/completions.
	cp := openai.CompletionNewParams{Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(4), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	cw, err := client.Completions.New(t.Context(), cp)
	require.NoError(t, err)
	assert.NotEmpty(t, cw.Choices[0].Text)
	assert.Equal(t, int64(4), cw.Usage.CompletionTokens)
	cs := client.Completions.NewStreaming(t.Context(), cp)
	var ctext string
	for cs.Next() {
		for _, ch := range cs.Current().Choices {
			ctext += ch.Text
		}
	}
	require.NoError(t, cs.Err())
	assert.NotEmpty(t, ctext)

	resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"tiny","messages":[{"role":"user","content":"Hello"}],"options":{"num_predict":4}}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	lines := ndjson(t, b)
	assert.Equal(t, true, lines[len(lines)-1]["done"])
	resp, b = call(t, "GET", n.url+"/api/tags", adminToken, "")
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), `"family":"llama"`)
	assert.Contains(t, string(b), `"quantization_level":"F16"`)

	// Anthropic's Messages API, translated; count_tokens is the engine's own count, the one its
	// chat reports. Greedy, so the answer runs to max_tokens: sampled, the tiny model can end
	// its answer within a few tokens (seen through Ollama, 2 tokens then stop; not in 400 tries
	// of this request on llama-server).
	conv := `"system":"Be brief.","messages":[{"role":"user","content":"Hello, llama."}]`
	resp, b = anCall(t, n.url, adminToken, `{"model":"tiny","max_tokens":4,"temperature":0,`+conv+`}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var an anAnswer
	require.NoError(t, json.Unmarshal(b, &an))
	assert.Equal(t, "max_tokens", an.StopReason)
	assert.Equal(t, 4, an.Usage.OutputTokens)
	assert.Equal(t, an.Usage.InputTokens, countTokens(t, n, `{"model":"tiny",`+conv+`}`))
	resp, b = anCall(t, n.url, adminToken, `{"model":"tiny","max_tokens":4,"stream":true,`+conv+`}`)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	events := anEvents(t, b)
	assert.Equal(t, "message_stop", events[len(events)-1].name)
	// An image: this agent starts llama-server without a projector, so the client is told so
	// in its dialect, before the engine.
	for _, c := range imageChats {
		resp, b = call(t, "POST", n.url+c.route, adminToken, strings.ReplaceAll(c.with, "%s", "tiny"))
		require.Equal(t, 400, resp.StatusCode, "%s", b)
		assert.Contains(t, dialectErr(t, c.dialect, b), "projector")
	}

	// The official JS clients; this model calls no tools.
	t.Run("js clients", func(t *testing.T) { runJSClients(t, n.url, adminToken, "tiny", jsChecks{responses: true}) })
}

// TestRealOllama runs the gateway against the real Ollama (enginetest starts it offline, or
// skips saying why) with a model made by `ollama create`: the listings carry what the daemon
// itself lists, "tiny" and "tiny:latest" are one model, and the official JS clients work.
func TestRealOllama(t *testing.T) {
	gguf := enginetest.TinyGGUF(t)
	daemon := enginetest.StartOllama(t)
	daemon.Create(t, "tiny", gguf)
	d, err := ollama.New(ollama.Config{URL: daemon.URL}, nil)
	require.NoError(t, err)
	n := newNode(t, nodeOpts{name: "box", drivers: []engines.Driver{d}, sizer: &sizing.Sizer{OllamaDaemon: daemon.URL}})
	place(t, n, api.PlacementRequest{Source: "ollama://tiny", Name: "tiny", Context: 512})

	type details struct {
		Format, Family    string
		ParameterSize     string `json:"parameter_size"`
		QuantizationLevel string `json:"quantization_level"`
	}
	var engine, gw struct {
		Models []struct {
			Name    string
			Size    int64
			Details details
		}
	}
	resp, b := call(t, "GET", daemon.URL+"/api/tags", "", "")
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	require.NoError(t, json.Unmarshal(b, &engine))
	require.Len(t, engine.Models, 1)
	resp, b = call(t, "GET", n.url+"/api/tags", adminToken, "")
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	require.NoError(t, json.Unmarshal(b, &gw))
	require.Len(t, gw.Models, 1)
	assert.Equal(t, engine.Models[0].Details, gw.Models[0].Details, "what the daemon lists")
	assert.Equal(t, engine.Models[0].Size, gw.Models[0].Size)
	assert.Equal(t, "llama", gw.Models[0].Details.Family)

	for _, name := range []string{"tiny", "tiny:latest"} {
		resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"`+name+`","stream":false,"messages":[{"role":"user","content":"Hello"}],"options":{"num_predict":4}}`)
		require.Equal(t, 200, resp.StatusCode, "%s: %s", name, b)
	}
	// Streamed, an Ollama client gets what the daemon writes: the same answer asked of the
	// daemon and of the agent, greedy, is line for line the same but for each line's time (the
	// agent writes each line afresh from the piece the driver read).
	stamp := regexp.MustCompile(`"created_at":"[^"]*"`)
	streamed := func(base string) []string {
		resp, b := call(t, "POST", base+"/api/chat", adminToken, `{"model":"tiny","messages":[{"role":"user","content":"Hello"}],"options":{"num_predict":8,"temperature":0,"seed":1}}`)
		require.Equal(t, 200, resp.StatusCode, "%s", b)
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		require.Greater(t, len(lines), 1, "%s", b)
		for _, l := range lines[:len(lines)-1] {
			var m struct {
				CreatedAt time.Time `json:"created_at"`
			}
			require.NoError(t, json.Unmarshal([]byte(l), &m), "%s", l)
		}
		return lines[:len(lines)-1] // the last is each one's own account
	}
	own, via := streamed(daemon.URL), streamed(n.url)
	require.Len(t, via, len(own))
	for i := range own {
		assert.Equal(t, stamp.ReplaceAllString(own[i], "T"), stamp.ReplaceAllString(via[i], "T"))
	}
	// What this model cannot do, Ollama refuses, and the client is told in Ollama's words
	// (400, not 502): tools (its template has none), embeddings (its runner does not embed).
	resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"Weather?"}],"tools":`+weatherTool+`}`)
	assert.Equal(t, 400, resp.StatusCode, "%s", b)
	assert.Contains(t, string(b), "does not support tools")
	// An image for a model without vision: Ollama refuses it, and the client is told in its
	// own dialect.
	resp, b = anCall(t, n.url, adminToken, strings.ReplaceAll(imageChats[3].with, "%s", "tiny"))
	require.Equal(t, 400, resp.StatusCode, "%s", b)
	typ, msg := anErr(t, b)
	assert.Equal(t, "invalid_request_error", typ)
	assert.Contains(t, msg, "does not support multimodal")
	resp, b = call(t, "POST", n.url+"/v1/embeddings", adminToken, `{"model":"tiny","input":"hello"}`)
	if resp.StatusCode != 200 {
		assert.Equal(t, 400, resp.StatusCode, "%s", b)
		_, typ, msg := oaErr(t, b)
		assert.Equal(t, "invalid_request_error", typ)
		assert.Contains(t, msg, "Ollama")
	} else {
		assert.Contains(t, string(b), `"embedding":[`, "a runner that embeds")
	}

	t.Run("js clients", func(t *testing.T) { runJSClients(t, n.url, adminToken, "tiny", jsChecks{responses: true}) })
}
