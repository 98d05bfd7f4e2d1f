package gateway_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/sim/gguf"
)

// llamaServerNode is a node serving a small GGUF as model "tiny" on the llama-server simulator.
func llamaServerNode(t *testing.T, name string) *node {
	t.Helper()
	bin := llamaServerSim(t)
	spec, ok := gguf.Preset("sim-tiny")
	require.True(t, ok)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, gguf.Write(model, spec))
	d, err := llamaserver.New(llamaserver.Config{Binary: bin, LogDir: t.TempDir(), ModelsDir: t.TempDir(),
		StopGrace: 5 * time.Second, HealthTimeout: 30 * time.Second, Env: []string{"LLAMA_SIM_LOAD_DELAY=0s"}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.StopAll(context.Background()) })
	n := newNode(t, nodeOpts{name: name, drivers: []engines.Driver{d}})
	place(t, n, api.PlacementRequest{Source: model, Name: "tiny", Context: 1024})
	return n
}

const weatherTool = `[{"type":"function","function":{"name":"weather","description":"the weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Paris"]}},"required":["city"]}}}]`

// TestToolsAndJSON: tools, tool_calls and JSON answers pass through to the engines that do
// them (llama-server, Ollama), in both dialects, streaming and not, with openai-go; a Hailo
// refuses them clearly.
func TestToolsAndJSON(t *testing.T) {
	llama := llamaServerNode(t, "box")
	sim := ollamaSim(t, nil, "llama3.2:1b")
	oll := ollamaNode(t, "node-o", sim, nil)
	place(t, oll, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "tiny"})

	var tools []openai.ChatCompletionToolUnionParam
	require.NoError(t, json.Unmarshal([]byte(weatherTool), &tools))
	for _, n := range []*node{llama, oll} {
		t.Run(n.name, func(t *testing.T) {
			client := openAIClient(n, adminToken)
			params := userChat("tiny", "What is the weather in Paris?")
			params.Tools = tools
			whole, err := client.Chat.Completions.New(t.Context(), params)
			require.NoError(t, err)
			c := whole.Choices[0]
			assert.Equal(t, "tool_calls", c.FinishReason)
			require.Len(t, c.Message.ToolCalls, 1)
			tc := c.Message.ToolCalls[0]
			assert.Equal(t, "weather", tc.Function.Name)
			assert.JSONEq(t, `{"city":"Paris"}`, tc.Function.Arguments)
			assert.NotEmpty(t, tc.ID)

			stream := client.Chat.Completions.NewStreaming(t.Context(), params)
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			require.NoError(t, stream.Err())
			require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
			assert.Equal(t, "weather", acc.Choices[0].Message.ToolCalls[0].Function.Name)
			assert.JSONEq(t, `{"city":"Paris"}`, acc.Choices[0].Message.ToolCalls[0].Function.Arguments)
			assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason)

			// The tool's result goes back; the answer is text.
			params.Messages = append(params.Messages, c.Message.ToParam(), openai.ToolMessage("sunny, 21 °C", tc.ID))
			after, err := client.Chat.Completions.New(t.Context(), params)
			require.NoError(t, err)
			assert.NotEmpty(t, after.Choices[0].Message.Content)
			assert.Empty(t, after.Choices[0].Message.ToolCalls)

			// A JSON answer that fits a schema.
			params = userChat("tiny", "Which city?")
			params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "city", Schema: map[string]any{
					"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Rome"}}}}}}}
			js, err := client.Chat.Completions.New(t.Context(), params)
			require.NoError(t, err)
			assert.JSONEq(t, `{"city":"Rome"}`, js.Choices[0].Message.Content)

			// Ollama's dialect: tools, tool_calls with arguments as an object, format.
			for _, stream := range []string{"false", "true"} {
				resp, b := call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"tiny","stream":`+stream+`,"messages":[{"role":"user","content":"weather?"}],"tools":`+weatherTool+`}`)
				require.Equal(t, 200, resp.StatusCode, "%s", b)
				var calls []any
				for _, l := range ndjson(t, b) {
					if tc, ok := l["message"].(map[string]any)["tool_calls"].([]any); ok {
						calls = append(calls, tc...)
					}
				}
				require.Len(t, calls, 1, "%s", b)
				fn := calls[0].(map[string]any)["function"].(map[string]any)
				assert.Equal(t, "weather", fn["name"])
				assert.Equal(t, map[string]any{"city": "Paris"}, fn["arguments"])
			}
			resp, b := call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"weather","arguments":{"city":"Paris"}}}]},{"role":"tool","content":"sunny","tool_name":"weather"}],"tools":`+weatherTool+`}`)
			require.Equal(t, 200, resp.StatusCode, "%s", b)
			assert.NotContains(t, string(b), "tool_calls")
			resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"city?"}],"format":{"type":"object","properties":{"city":{"type":"string","enum":["Rome"]}}}}`)
			require.Equal(t, 200, resp.StatusCode, "%s", b)
			var ow struct{ Message struct{ Content string } }
			require.NoError(t, json.Unmarshal(b, &ow))
			assert.JSONEq(t, `{"city":"Rome"}`, ow.Message.Content)
		})
	}

	t.Run("bad tools are refused before the engine", func(t *testing.T) {
		for _, extra := range []string{
			`"tools":{"type":"function"}`,
			`"tools":[{"type":"code_interpreter"}]`,
			`"tools":[{"type":"function","function":{}}]`,
			`"tools":` + weatherTool + `,"tool_choice":{"type":"function","function":{"name":"other"}}`,
			`"response_format":{"type":"json_schema"}`,
			`"response_format":{"type":"xml"}`,
		} {
			resp, b := call(t, "POST", oll.url+"/v1/chat/completions", adminToken, chatBody("tiny", "hi", false, extra))
			require.Equal(t, 400, resp.StatusCode, "%s: %s", extra, b)
			code, typ, _ := oaErr(t, b)
			assert.Equal(t, "invalid_request", code)
			assert.Equal(t, "invalid_request_error", typ)
		}
	})

	t.Run("hailo-ollama refuses them clearly", func(t *testing.T) {
		n, _ := hailoSetup(t, nil, nil)
		resp, b := call(t, "POST", n.url+"/v1/chat/completions", adminToken, chatBody("qwen2:1.5b", "weather?", false, `"tools":`+weatherTool))
		require.Equal(t, 400, resp.StatusCode, "%s", b)
		_, _, msg := oaErr(t, b)
		assert.Contains(t, msg, "hailo-ollama cannot do tools")
		resp, b = call(t, "POST", n.url+"/api/chat", adminToken, `{"model":"qwen2:1.5b","messages":[{"role":"user","content":"hi"}],"format":"json"}`)
		require.Equal(t, 400, resp.StatusCode, "%s", b)
		var e struct{ Error string }
		require.NoError(t, json.Unmarshal(b, &e))
		assert.Contains(t, e.Error, "JSON response format")
	})
}
