package gateway_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	ollamasim "github.com/llmkube/mesh/sim/ollama"
)

// anEvent is one event of Anthropic's stream: its name and its data, decoded.
type anEvent struct {
	name string
	data map[string]any
}

// anEvents splits an Anthropic event stream into its events, checking that each event's name
// is its data's type.
func anEvents(t testing.TB, b []byte) []anEvent {
	t.Helper()
	var out []anEvent
	for _, block := range strings.Split(string(b), "\n\n") {
		var e anEvent
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				e.name = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				require.NoError(t, json.Unmarshal([]byte(v), &e.data), "data %q", v)
			}
		}
		if e.name == "" && e.data == nil {
			continue
		}
		require.Equal(t, e.name, e.data["type"], "event %q's data is of its type: %s", e.name, block)
		out = append(out, e)
	}
	return out
}

// anAnswer is a Messages answer, whole.
type anAnswer struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	Usage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

// anErr decodes an Anthropic error body: its type and message.
func anErr(t testing.TB, b []byte) (typ, msg string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(b, &e), "body %s", b)
	require.Equal(t, "error", e.Type, "body %s", b)
	return e.Error.Type, e.Error.Message
}

// anCall posts a Messages request with the token in x-api-key, as Anthropic's clients send it.
func anCall(t testing.TB, url, token, body string) (*http.Response, []byte) {
	t.Helper()
	return call(t, "POST", url+"/v1/messages", "", body, "X-Api-Key", token, "Anthropic-Version", "2023-06-01")
}

func anBody(model string, stream bool, extra string) string {
	s := `{"model":"` + model + `","max_tokens":16,"system":"Be brief.","messages":[{"role":"user","content":"Hello, mesh."}]`
	if stream {
		s += `,"stream":true`
	}
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// stopSequences: an answer that reaches one of the request's stop_sequences ends before it,
// with stop_reason "stop_sequence" and the sequence named, streamed and not, on a (serving
// "llama") and through b (forwarding it). The sequence spans two of the engine's pieces.
func stopSequences(t *testing.T, a, b *node, token string) {
	// The simulator answers the same prompt the same way: the answer without stop sequences
	// gives one to stop on, across a word boundary.
	resp, body := anCall(t, a.url, token, anBody("llama", false, ""))
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	var full anAnswer
	require.NoError(t, json.Unmarshal(body, &full))
	text := full.Content[0].Text
	words := strings.SplitAfter(text, " ")
	require.Greater(t, len(words), 5, "an answer of several words: %q", text)
	cut := len(strings.Join(words[:4], "")) // just after the 4th word's trailing space
	stop := text[cut-3 : cut+2]
	want := text[:strings.Index(text, stop)]
	extra := `"stop_sequences":["never in it",` + strconv.Quote(stop) + `]`

	for _, n := range []*node{a, b} {
		t.Run(n.name, func(t *testing.T) {
			resp, body := anCall(t, n.url, token, anBody("llama", false, extra))
			require.Equal(t, 200, resp.StatusCode, "%s", body)
			var whole struct {
				anAnswer
				StopSequence *string `json:"stop_sequence"`
			}
			require.NoError(t, json.Unmarshal(body, &whole))
			assert.Equal(t, "stop_sequence", whole.StopReason)
			require.NotNil(t, whole.StopSequence)
			assert.Equal(t, stop, *whole.StopSequence)
			assert.Equal(t, want, whole.Content[0].Text, "the answer up to the sequence, without it")
			assert.Positive(t, whole.Usage.OutputTokens)

			resp, body = anCall(t, n.url, token, anBody("llama", true, extra))
			require.Equal(t, 200, resp.StatusCode, "%s", body)
			events := anEvents(t, body)
			var streamed string
			for _, e := range events {
				if e.name == "content_block_delta" {
					streamed += e.data["delta"].(map[string]any)["text"].(string)
				}
			}
			assert.Equal(t, want, streamed)
			require.Equal(t, "message_stop", events[len(events)-1].name)
			delta := events[len(events)-2].data["delta"].(map[string]any)
			assert.Equal(t, "stop_sequence", delta["stop_reason"])
			assert.Equal(t, stop, delta["stop_sequence"])
		})
	}

	// A sequence the answer never reaches changes nothing.
	resp, body = anCall(t, a.url, token, anBody("llama", false, `"stop_sequences":["never in it"]`))
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	var whole anAnswer
	require.NoError(t, json.Unmarshal(body, &whole))
	assert.Equal(t, text, whole.Content[0].Text)
	assert.Equal(t, full.StopReason, whole.StopReason)
}

const anWeather = `"tools":[{"name":"weather","description":"the weather in a city","input_schema":{"type":"object","properties":{"city":{"type":"string","enum":["Paris"]}},"required":["city"]}}]`

// TestAnthropicMessages: POST /v1/messages on an agent serving the model (Ollama) and on one
// that forwards it, streaming and not, with x-api-key; stop reasons and usage.
func TestAnthropicMessages(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	a := ollamaNode(t, "node-a", sim, nil)
	b := newNode(t, nodeOpts{name: "node-b"})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama", Namespace: "team"})
	join(t, a, b)
	team := nsToken(t, "team")

	for _, n := range []*node{a, b} {
		t.Run(n.name, func(t *testing.T) {
			resp, body := anCall(t, n.url, team, anBody("llama", false, ""))
			require.Equal(t, 200, resp.StatusCode, "%s", body)
			var whole anAnswer
			require.NoError(t, json.Unmarshal(body, &whole))
			assert.Equal(t, "message", whole.Type)
			assert.Equal(t, "assistant", whole.Role)
			assert.Equal(t, "llama", whole.Model)
			assert.True(t, strings.HasPrefix(whole.ID, "msg_"), whole.ID)
			require.Len(t, whole.Content, 1)
			assert.Equal(t, "text", whole.Content[0].Type)
			assert.NotEmpty(t, whole.Content[0].Text)
			assert.Contains(t, []string{"end_turn", "max_tokens"}, whole.StopReason)
			assert.Positive(t, whole.Usage.InputTokens)
			assert.Positive(t, whole.Usage.OutputTokens)

			resp, body = anCall(t, n.url, team, anBody("llama", true, ""))
			require.Equal(t, 200, resp.StatusCode, "%s", body)
			assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			events := anEvents(t, body)
			var names []string
			var text string
			for _, e := range events {
				if len(names) == 0 || names[len(names)-1] != e.name {
					names = append(names, e.name)
				}
				if e.name == "content_block_delta" {
					d := e.data["delta"].(map[string]any)
					require.Equal(t, "text_delta", d["type"])
					text += d["text"].(string)
				}
			}
			assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names)
			assert.Equal(t, whole.Content[0].Text, text, "the same answer, streamed")
			md := events[len(events)-2].data
			assert.Equal(t, whole.StopReason, md["delta"].(map[string]any)["stop_reason"])
			assert.Equal(t, float64(whole.Usage.OutputTokens), md["usage"].(map[string]any)["output_tokens"])
		})
	}

	t.Run("max_tokens stops the answer", func(t *testing.T) {
		resp, body := anCall(t, b.url, team, strings.Replace(anBody("llama", false, ""), `"max_tokens":16`, `"max_tokens":1`, 1))
		require.Equal(t, 200, resp.StatusCode, "%s", body)
		var whole anAnswer
		require.NoError(t, json.Unmarshal(body, &whole))
		assert.Equal(t, "max_tokens", whole.StopReason)
		assert.Equal(t, 1, whole.Usage.OutputTokens)
	})

	t.Run("errors in Anthropic's shape", func(t *testing.T) {
		for _, tc := range []struct {
			name, url, token, body string
			status                 int
			typ, msg               string
		}{
			{"unknown model", b.url, team, anBody("no-such-model", false, ""), 404, "not_found_error", "no-such-model"},
			{"another namespace", b.url, nsToken(t, "other"), anBody("llama", false, ""), 404, "not_found_error", "llama"},
			{"no max_tokens", b.url, team, `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", "max_tokens is required"},
			{"a bad role", a.url, team, `{"model":"llama","max_tokens":4,"messages":[{"role":"system","content":"hi"}]}`, 400, "invalid_request_error", "want user or assistant"},
			{"an image from the assistant", a.url, team, `{"model":"llama","max_tokens":4,"messages":[{"role":"assistant","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, 400, "invalid_request_error", `"image" in a message from the assistant`},
			{"a server tool", a.url, team, anBody("llama", false, `"tools":[{"type":"web_search_20250305","name":"web_search"}]`), 400, "invalid_request_error", "web_search_20250305"},
			{"a wrong key", b.url, "llmk_wrong", anBody("llama", false, ""), 401, "authentication_error", "token refused"},
		} {
			resp, body := anCall(t, tc.url, tc.token, tc.body)
			require.Equal(t, tc.status, resp.StatusCode, "%s: %s", tc.name, body)
			typ, msg := anErr(t, body)
			assert.Equal(t, tc.typ, typ, tc.name)
			assert.Contains(t, msg, tc.msg, tc.name)
		}
		// No key at all, and a route under /v1/messages/ the gateway does not have.
		resp, body := call(t, "POST", b.url+"/v1/messages", "", anBody("llama", false, ""))
		require.Equal(t, 401, resp.StatusCode, "%s", body)
		typ, _ := anErr(t, body)
		assert.Equal(t, "authentication_error", typ)
		resp, body = call(t, "POST", b.url+"/v1/messages/batches", team, "{}")
		require.Equal(t, 404, resp.StatusCode, "%s", body)
		typ, _ = anErr(t, body)
		assert.Equal(t, "not_found_error", typ)
	})

	t.Run("stop sequences", func(t *testing.T) { stopSequences(t, a, b, team) })

	t.Run("Authorization: Bearer works too", func(t *testing.T) {
		resp, body := call(t, "POST", b.url+"/v1/messages", team, anBody("llama", false, ""))
		require.Equal(t, 200, resp.StatusCode, "%s", body)
	})
}

// TestAnthropicTools: tools with input_schema reach the engines that call them (llama-server,
// Ollama), as tool_use blocks, streamed and not; the tool_result goes back; hailo-ollama
// refuses tools in Anthropic's shape.
func TestAnthropicTools(t *testing.T) {
	llama := llamaServerNode(t, "box")
	sim := ollamaSim(t, nil, "llama3.2:1b")
	oll := ollamaNode(t, "node-o", sim, nil)
	place(t, oll, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "tiny"})

	for _, n := range []*node{llama, oll} {
		t.Run(n.name, func(t *testing.T) {
			resp, body := anCall(t, n.url, adminToken, anBody("tiny", false, anWeather))
			require.Equal(t, 200, resp.StatusCode, "%s", body)
			var whole anAnswer
			require.NoError(t, json.Unmarshal(body, &whole))
			assert.Equal(t, "tool_use", whole.StopReason)
			var use *struct {
				Type  string          `json:"type"`
				Text  string          `json:"text"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			}
			for i := range whole.Content {
				if whole.Content[i].Type == "tool_use" {
					use = &whole.Content[i]
				}
			}
			require.NotNil(t, use, "%s", body)
			assert.Equal(t, "weather", use.Name)
			assert.JSONEq(t, `{"city":"Paris"}`, string(use.Input))
			assert.NotEmpty(t, use.ID)

			resp, body = anCall(t, n.url, adminToken, anBody("tiny", true, anWeather))
			require.Equal(t, 200, resp.StatusCode, "%s", body)
			var name, args, stop string
			for _, e := range anEvents(t, body) {
				switch e.name {
				case "content_block_start":
					if cb := e.data["content_block"].(map[string]any); cb["type"] == "tool_use" {
						name = cb["name"].(string)
					}
				case "content_block_delta":
					if d := e.data["delta"].(map[string]any); d["type"] == "input_json_delta" {
						args += d["partial_json"].(string)
					}
				case "message_delta":
					stop = e.data["delta"].(map[string]any)["stop_reason"].(string)
				}
			}
			assert.Equal(t, "weather", name)
			assert.JSONEq(t, `{"city":"Paris"}`, args)
			assert.Equal(t, "tool_use", stop)

			// The result goes back; the answer is text.
			conv := `{"model":"tiny","max_tokens":16,` + anWeather + `,"messages":[{"role":"user","content":"Weather in Paris?"},` +
				`{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"` + use.ID + `","name":"weather","input":{"city":"Paris"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + use.ID + `","content":[{"type":"text","text":"sunny"}]}]}]}`
			resp, body = anCall(t, n.url, adminToken, conv)
			require.Equal(t, 200, resp.StatusCode, "%s", body)
			var after anAnswer
			require.NoError(t, json.Unmarshal(body, &after))
			assert.NotEqual(t, "tool_use", after.StopReason, "%s", body)
			require.NotEmpty(t, after.Content)
			assert.NotEmpty(t, after.Content[0].Text)
		})
	}

	t.Run("hailo-ollama refuses them in Anthropic's shape", func(t *testing.T) {
		n, _ := hailoSetup(t, nil, nil)
		resp, body := anCall(t, n.url, adminToken, anBody("qwen2:1.5b", false, anWeather))
		require.Equal(t, 400, resp.StatusCode, "%s", body)
		typ, msg := anErr(t, body)
		assert.Equal(t, "invalid_request_error", typ)
		assert.Contains(t, msg, "hailo-ollama cannot do tools")
		// Text it answers, translated.
		resp, body = anCall(t, n.url, adminToken, anBody("qwen2:1.5b", true, ""))
		require.Equal(t, 200, resp.StatusCode, "%s", body)
		events := anEvents(t, body)
		assert.Equal(t, "message_stop", events[len(events)-1].name)
	})
}

// TestAnthropicOwnerLostMidStream: the owner of a forwarded Anthropic stream drops off the
// network mid-answer; the stream ends with Anthropic's error event naming it.
func TestAnthropicOwnerLostMidStream(t *testing.T) {
	sim := ollamaSim(t, func(c *ollamasim.Config) { c.TokensPerSec = 2 }, "llama3.2:1b")
	a := ollamaNode(t, "node-a", sim, nil)
	b := newNode(t, nodeOpts{name: "node-b"})
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	cab := behindCable(t, a)
	join(t, a, b)

	req, err := http.NewRequestWithContext(t.Context(), "POST", b.url+"/v1/messages",
		strings.NewReader(`{"model":"llama","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"a long story"}]}`))
	require.NoError(t, err)
	req.Header.Set("X-Api-Key", adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan(), "a first line")
	first := sc.Text() + "\n"

	pull(t, a, cab)
	rest := make(chan string, 1)
	go func() {
		var all strings.Builder
		all.WriteString(first)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
		}
		rest <- all.String()
	}()
	var all string
	select {
	case all = <-rest:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream still hangs on a silent owner after 30 s")
	}
	events := anEvents(t, []byte(all))
	require.NotEmpty(t, events)
	last := events[len(events)-1]
	require.Equal(t, "error", last.name, "%s", all)
	e := last.data["error"].(map[string]any)
	assert.Equal(t, "api_error", e["type"])
	assert.Contains(t, e["message"], "node-a")
	assert.Regexp(t, `is dead|has been suspect`, e["message"])
}

// countTokens asks n's count_tokens for body and returns the count.
func countTokens(t *testing.T, n *node, body string) int {
	t.Helper()
	resp, b := call(t, "POST", n.url+"/v1/messages/count_tokens", "", body, "X-Api-Key", adminToken)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var c struct {
		InputTokens *int `json:"input_tokens"`
	}
	require.NoError(t, json.Unmarshal(b, &c), "%s", b)
	require.NotNil(t, c.InputTokens, "%s", b)
	return *c.InputTokens
}

// TestAnthropicCountTokens: count_tokens is the engine's own count where the driver can ask
// its tokenizer (llama-server: the count its chat then reports, here and through another
// agent), and a clear 501 in Anthropic's shape where it cannot (Ollama).
func TestAnthropicCountTokens(t *testing.T) {
	llama := llamaServerNode(t, "box")
	sim := ollamaSim(t, nil, "llama3.2:1b")
	a := ollamaNode(t, "node-a", sim, nil)
	place(t, a, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "llama"})
	join(t, llama, a)

	conv := `"system":"Be brief.","messages":[{"role":"user","content":"How many tokens is this prompt, rendered?"}]`
	resp, body := anCall(t, llama.url, adminToken, `{"model":"tiny","max_tokens":2,`+conv+`}`)
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	var whole anAnswer
	require.NoError(t, json.Unmarshal(body, &whole))
	require.Positive(t, whole.Usage.InputTokens)
	assert.Equal(t, whole.Usage.InputTokens, countTokens(t, llama, `{"model":"tiny",`+conv+`}`), "the count the chat reports")
	assert.Equal(t, whole.Usage.InputTokens, countTokens(t, a, `{"model":"tiny",`+conv+`}`), "through another agent")

	resp, body = call(t, "POST", a.url+"/v1/messages/count_tokens", "", `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`, "X-Api-Key", adminToken)
	require.Equal(t, 501, resp.StatusCode, "%s", body)
	typ, msg := anErr(t, body)
	assert.Equal(t, "api_error", typ)
	assert.Contains(t, msg, `"llama"`)
	assert.Contains(t, msg, "ollama")
	resp, body = call(t, "POST", a.url+"/v1/messages/count_tokens", "", `{"model":"llama"}`, "X-Api-Key", adminToken)
	require.Equal(t, 400, resp.StatusCode, "%s", body)
	typ, _ = anErr(t, body)
	assert.Equal(t, "invalid_request_error", typ)
}
