package gateway_test

import (
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// TestResponsesAPI: POST /v1/responses with openai-go, translated to a chat: text streaming and
// not, a function tool and its output, and what is refused (stored items).
func TestResponsesAPI(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	n := ollamaNode(t, "node-a", sim, nil)
	place(t, n, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	client := openAIClient(n, adminToken)

	params := responses.ResponseNewParams{Model: "llama", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello, mesh.")},
		Instructions: openai.String("Be brief."), MaxOutputTokens: openai.Int(6)}
	r, err := client.Responses.New(t.Context(), params)
	require.NoError(t, err)
	assert.Equal(t, "response", string(r.Object))
	assert.NotEmpty(t, r.OutputText())
	assert.Positive(t, r.Usage.OutputTokens)
	assert.Equal(t, responses.ResponseStatusIncomplete, r.Status, "six tokens is the limit")
	assert.Equal(t, "max_output_tokens", string(r.IncompleteDetails.Reason))

	stream := client.Responses.NewStreaming(t.Context(), params)
	var text string
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text += ev.Delta
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, r.OutputText(), text)
	assert.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}, types[:4])
	assert.Equal(t, "response.incomplete", types[len(types)-1])

	// A function tool: the call, then its output, then text.
	tool := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Paris"}}}}}}
	params = responses.ResponseNewParams{Model: "llama", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")},
		Tools: []responses.ToolUnionParam{tool}}
	r, err = client.Responses.New(t.Context(), params)
	require.NoError(t, err)
	require.Len(t, r.Output, 1)
	fc := r.Output[0].AsFunctionCall()
	assert.Equal(t, "weather", fc.Name)
	assert.JSONEq(t, `{"city":"Paris"}`, fc.Arguments)
	output := responses.ResponseInputItemParamOfFunctionCallOutput("sunny")
	output.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("Weather in Paris?", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(fc.Arguments, fc.CallID, fc.Name),
		output,
	}}
	r, err = client.Responses.New(t.Context(), params)
	require.NoError(t, err)
	assert.NotEmpty(t, r.OutputText())

	// An earlier answer comes back by reference (the AI SDK's default), from this agent's
	// store, in the caller's scope only.
	first, err := client.Responses.New(t.Context(), responses.ResponseNewParams{Model: "llama",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")}})
	require.NoError(t, err)
	msgID := first.Output[0].ID
	ref := `{"model":"llama","input":[{"role":"user","content":"Hello"},{"type":"item_reference","id":"` + msgID + `"},{"role":"user","content":"More?"}]}`
	resp, b := call(t, "POST", n.url+"/v1/responses", adminToken, ref)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	resp, b = call(t, "POST", n.url+"/v1/responses", nsToken(t, "default"), ref)
	require.Equal(t, 400, resp.StatusCode, "another scope: %s", b)
	assert.Contains(t, string(b), "store: false")

	for _, body := range []string{
		`{"model":"llama","input":[{"type":"item_reference","id":"msg_1"}]}`,
		`{"model":"llama","input":"hi","previous_response_id":"resp_1"}`,
		`{"model":"llama","input":"hi","tools":[{"type":"web_search"}]}`,
		`{"model":"llama","input":[]}`,
	} {
		resp, b := call(t, "POST", n.url+"/v1/responses", adminToken, body)
		require.Equal(t, 400, resp.StatusCode, "%s: %s", body, b)
		_, typ, msg := oaErr(t, b)
		assert.Equal(t, "invalid_request_error", typ)
		assert.NotEmpty(t, msg)
	}
	resp, b = call(t, "POST", n.url+"/v1/responses", adminToken, `{"model":"nothing","input":"hi"}`)
	require.Equal(t, 404, resp.StatusCode, "%s", b)
}
