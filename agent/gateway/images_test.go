package gateway_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/gateway"
	"github.com/llmkube/mesh/engines/download"
)

// pixel is a 1×1 PNG, base64.
const pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// imageChats are one chat with pixel in each dialect, and the same chat without it: the route,
// the two bodies, and where the answer's prompt count is.
var imageChats = []struct {
	dialect, route, with, without string
	promptTokens                  func(t *testing.T, b []byte) int
}{
	{"openai", "/v1/chat/completions",
		`{"model":"%s","max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pixel + `"}}]}]}`,
		`{"model":"%s","max_tokens":4,"messages":[{"role":"user","content":"What is this?"}]}`,
		func(t *testing.T, b []byte) int {
			var a struct {
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				}
			}
			require.NoError(t, json.Unmarshal(b, &a))
			return a.Usage.PromptTokens
		}},
	{"ollama", "/api/chat",
		`{"model":"%s","stream":false,"options":{"num_predict":4},"messages":[{"role":"user","content":"What is this?","images":["` + pixel + `"]}]}`,
		`{"model":"%s","stream":false,"options":{"num_predict":4},"messages":[{"role":"user","content":"What is this?"}]}`,
		func(t *testing.T, b []byte) int {
			var a struct {
				PromptEvalCount int `json:"prompt_eval_count"`
			}
			require.NoError(t, json.Unmarshal(b, &a))
			return a.PromptEvalCount
		}},
	{"openai", "/v1/responses",
		`{"model":"%s","max_output_tokens":4,"input":[{"role":"user","content":[{"type":"input_text","text":"What is this?"},{"type":"input_image","image_url":"data:image/png;base64,` + pixel + `"}]}]}`,
		`{"model":"%s","max_output_tokens":4,"input":[{"role":"user","content":"What is this?"}]}`,
		func(t *testing.T, b []byte) int {
			var a struct {
				Usage struct {
					InputTokens int `json:"input_tokens"`
				}
			}
			require.NoError(t, json.Unmarshal(b, &a))
			return a.Usage.InputTokens
		}},
	{"anthropic", "/v1/messages",
		`{"model":"%s","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + pixel + `"}},{"type":"text","text":"What is this?"}]}]}`,
		`{"model":"%s","max_tokens":4,"messages":[{"role":"user","content":"What is this?"}]}`,
		func(t *testing.T, b []byte) int {
			var a anAnswer
			require.NoError(t, json.Unmarshal(b, &a))
			return a.Usage.InputTokens
		}},
}

// dialectErr is the message of an error answer in any dialect.
func dialectErr(t *testing.T, dialect string, b []byte) string {
	t.Helper()
	switch dialect {
	case "openai":
		_, _, msg := oaErr(t, b)
		return msg
	case "anthropic":
		typ, msg := anErr(t, b)
		assert.Equal(t, "invalid_request_error", typ)
		return msg
	}
	var e struct{ Error string }
	require.NoError(t, json.Unmarshal(b, &e), "%s", b)
	return e.Error
}

// TestImages: an image reaches an engine that reads them (Ollama), in every dialect, here and
// through another agent; llama-server (no projector) and hailo-ollama refuse it in the client's
// dialect, naming the model, why and the bound; the bound, a remote URL and bad data are refused.
func TestImages(t *testing.T) {
	sim := ollamaSim(t, nil, "llama3.2:1b")
	oll := ollamaNode(t, "node-o", sim, nil)
	place(t, oll, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "vision"})
	llama := llamaServerNode(t, "box")
	hailo, _ := hailoSetup(t, nil, nil)
	join(t, oll, llama)

	for _, c := range imageChats {
		t.Run(c.route, func(t *testing.T) {
			for _, n := range []*node{oll, llama} { // llama forwards to oll
				resp, with := call(t, "POST", n.url+c.route, adminToken, strings.ReplaceAll(c.with, "%s", "vision"))
				require.Equal(t, 200, resp.StatusCode, "%s: %s", n.name, with)
				resp, without := call(t, "POST", n.url+c.route, adminToken, strings.ReplaceAll(c.without, "%s", "vision"))
				require.Equal(t, 200, resp.StatusCode, "%s: %s", n.name, without)
				assert.Greater(t, c.promptTokens(t, with), c.promptTokens(t, without), "%s: the image reached the engine's prompt", n.name)
			}
			for _, tc := range []struct {
				n           *node
				model, says string
			}{
				{llama, "tiny", "projector"},
				{hailo, "qwen2:1.5b", "text only"},
			} {
				resp, b := call(t, "POST", tc.n.url+c.route, adminToken, strings.ReplaceAll(c.with, "%s", tc.model))
				require.Equal(t, 400, resp.StatusCode, "%s", b)
				msg := dialectErr(t, c.dialect, b)
				assert.Contains(t, msg, `"`+tc.model+`"`)
				assert.Contains(t, msg, "cannot read images")
				assert.Contains(t, msg, tc.says)
				assert.Contains(t, msg, "5 MiB")
			}
		})
	}

	t.Run("refused before any engine", func(t *testing.T) {
		big := base64.StdEncoding.EncodeToString(make([]byte, 5<<20+1))
		for _, tc := range []struct{ dialect, route, body, says string }{
			{"openai", "/v1/chat/completions", `{"model":"vision","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`, "does not fetch"},
			{"openai", "/v1/chat/completions", `{"model":"vision","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + big + `"}}]}]}`, "at most 5242880 bytes"},
			{"ollama", "/api/chat", `{"model":"vision","messages":[{"role":"user","content":"hi","images":["` + big + `"]}]}`, "at most 5242880 bytes"},
			{"anthropic", "/v1/messages", `{"model":"vision","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}}]}]}`, "does not fetch"},
			{"anthropic", "/v1/messages", `{"model":"vision","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/tiff","data":"` + pixel + `"}}]}]}`, "image/tiff"},
			{"anthropic", "/v1/messages", `{"model":"vision","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"not base64!"}}]}]}`, "base64"},
		} {
			resp, b := call(t, "POST", oll.url+tc.route, adminToken, tc.body)
			require.Equal(t, 400, resp.StatusCode, "%.300s", b)
			assert.Contains(t, dialectErr(t, tc.dialect, b), tc.says)
		}
	})
}

// TestImagesByURL: an agent whose operator allowed it fetches the images a chat names by URL
// (OpenAI image_url, Anthropic url sources) through the download guard, within the request's
// 5 MiB, and passes them on as if sent inline; what is not an image, too big, missing or beyond
// the guard is refused, saying which URL and why.
func TestImagesByURL(t *testing.T) {
	png, err := base64.StdEncoding.DecodeString(pixel)
	require.NoError(t, err)
	var fetched atomic.Int32
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		switch r.URL.Path {
		case "/cat.png":
			w.Header().Set("Content-Type", "image/png")
			w.Write(png)
		case "/big.png":
			w.Header().Set("Content-Type", "image/png")
			w.Write(make([]byte, 5<<20+1))
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte("<html>"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(images.Close)
	sim := ollamaSim(t, nil, "llama3.2:1b")
	// The test's image server is on loopback: the guard lets this agent reach it.
	oll := ollamaNode(t, "node-o", sim, func(c *gateway.Config) { c.FetchImages = &download.Options{AllowPrivate: true} })
	place(t, oll, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "vision"})

	openAI := func(url string) string {
		return `{"model":"vision","max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`
	}
	anthropic := `{"model":"vision","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"` + images.URL + `/cat.png"}},{"type":"text","text":"What is this?"}]}]}`
	for _, c := range []struct{ dialect, route, with string }{
		{"openai", "/v1/chat/completions", openAI(images.URL + "/cat.png")},
		{"anthropic", "/v1/messages", anthropic},
	} {
		before := fetched.Load()
		resp, with := call(t, "POST", oll.url+c.route, adminToken, c.with)
		require.Equal(t, 200, resp.StatusCode, "%s", with)
		assert.Equal(t, before+1, fetched.Load(), "fetched once")
		inline := strings.Replace(c.with, `{"url":"`+images.URL+`/cat.png"}`, `{"url":"data:image/png;base64,`+pixel+`"}`, 1)
		inline = strings.Replace(inline, `{"type":"url","url":"`+images.URL+`/cat.png"}`, `{"type":"base64","media_type":"image/png","data":"`+pixel+`"}`, 1)
		require.NotEqual(t, c.with, inline)
		resp, sent := call(t, "POST", oll.url+c.route, adminToken, inline)
		require.Equal(t, 200, resp.StatusCode, "%s", sent)
		assert.Equal(t, answerOf(t, sent), answerOf(t, with), "%s: the fetched image reached the engine as the one sent inline", c.route)
	}

	for _, tc := range []struct{ path, says string }{
		{"/page", `the server sent "text/html", not one of image/png`},
		{"/big.png", "at most 5242880 bytes"},
		{"/gone.png", "could not be fetched: HTTP 404"},
	} {
		resp, b := call(t, "POST", oll.url+"/v1/chat/completions", adminToken, openAI(images.URL+tc.path))
		require.Equal(t, 400, resp.StatusCode, "%s", b)
		msg := dialectErr(t, "openai", b)
		assert.Contains(t, msg, "image "+images.URL+tc.path+": ")
		assert.Contains(t, msg, tc.says)
	}

	// The guard as downloads have it by default: a loopback address is not reached.
	guarded := ollamaNode(t, "node-g", sim, func(c *gateway.Config) { c.FetchImages = &download.Options{} })
	place(t, guarded, api.PlacementRequest{Source: "ollama://llama3.2:1b", Name: "vision"})
	before := fetched.Load()
	resp, b := call(t, "POST", guarded.url+"/v1/chat/completions", adminToken, openAI(images.URL+"/cat.png"))
	require.Equal(t, 400, resp.StatusCode, "%s", b)
	assert.Contains(t, dialectErr(t, "openai", b), "loopback")
	assert.Equal(t, before, fetched.Load(), "nothing reached the image server")
}

// answerOf is an answer without what differs from one request to the next (its id and time).
func answerOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var a map[string]any
	require.NoError(t, json.Unmarshal(b, &a), "%s", b)
	delete(a, "id")
	delete(a, "created")
	return a
}
