package hailo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/sim/simtext"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func answer(seed int64, key string) string {
	return strings.Join(simtext.Generate(seed, key, simtext.AnswerLength(seed, key)), "")
}

func TestBasicRoutes(t *testing.T) {
	s := start(t, preload("qwen2:1.5b"))

	resp, body := do(t, "GET", s.URL()+"/", "", "")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "hailo-ollama is running", string(body))

	_, body = do(t, "GET", s.URL()+"/api/version", "", "")
	assert.JSONEq(t, `{"version":"0.5.1"}`, string(body))

	_, body = do(t, "GET", s.URL()+"/hailo/v1/list", "", "")
	assert.JSONEq(t, `{"models":["deepseek_r1_distill_qwen:1.5b","llama3.2:3b","qwen2.5-coder:1.5b","qwen2.5-instruct:1.5b","qwen2:1.5b"]}`, string(body))

	// /api/tags lists only what is downloaded, with the HEF's size.
	_, body = do(t, "GET", s.URL()+"/api/tags", "", "")
	var tags struct {
		Models []struct {
			Name, Model string
			ModifiedAt  string `json:"modified_at"`
			Size        int64
			Details     map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(body, &tags))
	require.Len(t, tags.Models, 1)
	assert.Equal(t, "qwen2:1.5b", tags.Models[0].Name)
	assert.EqualValues(t, 4096, tags.Models[0].Size)
	assert.Equal(t, "Q4_0", tags.Models[0].Details["quantization_level"])
	assert.Equal(t, "hef", tags.Models[0].Details["format"])
	assert.Equal(t, "qwen2", tags.Models[0].Details["family"])
}

// The routes ordinary Ollama/OpenAI clients expect and hailo-ollama 5.1.1 does not have.
func TestMissingRoutesAre404(t *testing.T) {
	s := start(t, preload("qwen2:1.5b"))
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/models"}, {"POST", "/v1/completions"}, {"POST", "/v1/responses"},
		{"POST", "/api/embed"}, {"POST", "/api/embeddings"}, {"GET", "/health"}, {"GET", "/metrics"},
		{"HEAD", "/"}, {"GET", "/api/chat"}, {"POST", "/api/delete"},
	} {
		resp, body := do(t, r.method, s.URL()+r.path, "application/json", `{"model":"qwen2:1.5b"}`)
		assert.Equal(t, 404, resp.StatusCode, "%s %s", r.method, r.path)
		if r.method != "HEAD" {
			assert.Contains(t, string(body), "code=404", "%s %s", r.method, r.path)
		}
	}
	assert.Equal(t, 1, s.Stats().Requests["GET /v1/models"])
}

func TestNonJSONContentTypeIs500(t *testing.T) {
	s := start(t, preload("qwen2:1.5b"))
	body := `{"model":"qwen2:1.5b","messages":[{"role":"user","content":"hi"}],"stream":false}`
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain"} {
		resp, b := do(t, "POST", s.URL()+"/api/chat", ct, body)
		assert.Equal(t, 500, resp.StatusCode, ct)
		assert.Contains(t, string(b), "No suitable mapper", ct)
	}
	// Every body route parses the same way.
	resp, _ := do(t, "DELETE", s.URL()+"/api/delete", "application/x-www-form-urlencoded", `{"model":"qwen2:1.5b"}`)
	assert.Equal(t, 500, resp.StatusCode)
	// No Content-Type at all falls back to JSON; parameters after the type are fine.
	for _, ct := range []string{"", "application/json; charset=utf-8"} {
		resp, b := do(t, "POST", s.URL()+"/api/chat", ct, body)
		assert.Equal(t, 200, resp.StatusCode, "%q: %s", ct, b)
		assert.Equal(t, answer(0, "hi"), decodeJSON(t, b)["message"].(map[string]any)["content"])
	}
	resp, _ = postJSON(t, s.URL()+"/api/chat", "")
	assert.Equal(t, 400, resp.StatusCode, "an empty body is a missing parameter")
	resp, _ = postJSON(t, s.URL()+"/api/chat", "{not json")
	assert.Equal(t, 500, resp.StatusCode)
}

func TestUnknownModelIs200WithError(t *testing.T) {
	s := start(t, nil) // nothing downloaded: a zoo model without its HEF counts as unknown too
	for _, model := range []string{"nope:1b", "qwen2:1.5b"} {
		for _, r := range []struct{ path, body string }{
			{"/api/generate", `{"model":%q,"prompt":"hi"}`},
			{"/api/generate", `{"model":%q}`},
			{"/api/chat", `{"model":%q,"messages":[{"role":"user","content":"hi"}]}`},
			{"/api/show", `{"model":%q}`},
			{"/v1/chat/completions", `{"model":%q,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			resp, b := postJSON(t, s.URL()+r.path, fmt.Sprintf(r.body, model))
			assert.Equal(t, 200, resp.StatusCode, "%s %s", r.path, model)
			assert.JSONEq(t, fmt.Sprintf(`{"error":"model '%s' not found"}`, model), string(b), r.path)
		}
	}
	// pull knows every manifest, downloaded or not; only a name without one is an error.
	resp, b := postJSON(t, s.URL()+"/api/pull", `{"model":"nope:1b"}`)
	assert.Equal(t, 200, resp.StatusCode)
	assert.JSONEq(t, `{"error":"model 'nope:1b' not found"}`, string(b))
	// delete is the exception: a real 404.
	resp, b = do(t, "DELETE", s.URL()+"/api/delete", "application/json", `{"model":"nope:1b"}`)
	assert.Equal(t, 404, resp.StatusCode)
	assert.JSONEq(t, `{"code":"not_found","error":"model not found"}`, string(b))
	assert.Equal(t, 0, s.Stats().Loads)
}

func TestChatCompletionsNonStreamingOnly(t *testing.T) {
	s := start(t, preload("qwen2:1.5b"))
	before := time.Now().UnixNano()
	resp, b := postJSON(t, s.URL()+"/v1/chat/completions",
		`{"model":"qwen2:1.5b","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, resp.StatusCode)
	var cc struct {
		ID      string
		Object  string
		Created int64
		Model   string
		Choices []struct {
			Index        int
			Message      message
			FinishReason string `json:"finish_reason"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &cc), "%s", b)
	assert.True(t, strings.HasPrefix(cc.ID, "chatcmpl-"), cc.ID)
	assert.Equal(t, "chat.completion", cc.Object)
	// created is in nanoseconds since the epoch, not seconds.
	assert.GreaterOrEqual(t, cc.Created, before)
	assert.Greater(t, cc.Created, int64(1e18))
	require.Len(t, cc.Choices, 1)
	assert.Equal(t, "assistant", cc.Choices[0].Message.Role)
	assert.Equal(t, answer(0, "be brief\nhi"), cc.Choices[0].Message.Content)
	assert.Equal(t, "stop", cc.Choices[0].FinishReason)
	assert.NotContains(t, decodeJSON(t, b), "usage", "hailo-ollama 5.1.1 reports no usage")

	// max_tokens becomes num_predict.
	_, b = postJSON(t, s.URL()+"/v1/chat/completions", `{"model":"qwen2:1.5b","max_tokens":3,"seed":9,"messages":[{"role":"user","content":"hi"}]}`)
	require.NoError(t, json.Unmarshal(b, &cc))
	assert.Equal(t, strings.Join(simtext.Generate(9, "hi", 3), ""), cc.Choices[0].Message.Content)
	assert.Equal(t, "length", cc.Choices[0].FinishReason)

	// stream:true and n != 1 are refused with an HTTP 200 error body.
	resp, b = postJSON(t, s.URL()+"/v1/chat/completions", `{"model":"qwen2:1.5b","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, 200, resp.StatusCode)
	assert.JSONEq(t, `{"error":"streaming not supported on this endpoint. Use /api/chat endpoint instead."}`, string(b))
	resp, b = postJSON(t, s.URL()+"/v1/chat/completions", `{"model":"qwen2:1.5b","n":2,"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, 200, resp.StatusCode)
	assert.JSONEq(t, `{"error":"only n == 1 is supported"}`, string(b))
	_, b = postJSON(t, s.URL()+"/v1/chat/completions", `{"model":"qwen2:1.5b"}`)
	assert.JSONEq(t, `{"error":"messages field is required"}`, string(b))
}

func TestStreamDefaultsToNDJSON(t *testing.T) {
	s := start(t, func(c *Config) { c.Preloaded, c.FinalChunks = []string{"qwen2.5-instruct:1.5b"}, true })
	for _, r := range []struct {
		path, body, field, key string
	}{
		{"/api/chat", `{"model":"qwen2.5-instruct:1.5b","messages":[{"role":"user","content":"tell me"}]}`, "message", "tell me"},
		{"/api/generate", `{"model":"qwen2.5-instruct:1.5b","prompt":"tell me"}`, "response", "tell me"},
	} {
		resp, b := postJSON(t, s.URL()+r.path, r.body)
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
		lines := ndjsonLines(t, b)
		want := simtext.Generate(0, r.key, simtext.AnswerLength(0, r.key))
		require.Len(t, lines, len(want)+1, r.path)
		var text strings.Builder
		for _, l := range lines[:len(lines)-1] {
			assert.Equal(t, false, l["done"])
			assert.Equal(t, "qwen2.5-instruct:1.5b", l["model"])
			if r.field == "message" {
				text.WriteString(l["message"].(map[string]any)["content"].(string))
			} else {
				text.WriteString(l["response"].(string))
			}
		}
		assert.Equal(t, strings.Join(want, ""), text.String())
		last := lines[len(lines)-1]
		assert.Equal(t, true, last["done"])
		assert.Equal(t, "stop", last["done_reason"])
		assert.EqualValues(t, len(want), last["eval_count"])
		assert.Contains(t, last, "total_duration")
		assert.Contains(t, last, "created_at")
	}
}

// TestStampTokens: with StampTokens, every streamed token ends with the real time it began to be
// written, in order, between the request and the answer's end.
func TestStampTokens(t *testing.T) {
	s := start(t, func(c *Config) { c.Preloaded, c.FinalChunks, c.StampTokens = []string{"qwen2:1.5b"}, true, true })
	begin := time.Now()
	_, b := postJSON(t, s.URL()+"/api/chat", `{"model":"qwen2:1.5b","messages":[{"role":"user","content":"tell me"}],"options":{"num_predict":6}}`)
	end := time.Now()
	lines := ndjsonLines(t, b)
	require.Len(t, lines, 7, "%s", b)
	var last time.Time
	for _, l := range lines[:6] {
		content := l["message"].(map[string]any)["content"].(string)
		at, ok := simtext.StampIn([]byte(content))
		require.True(t, ok, "no stamp in %q", content)
		assert.False(t, at.Before(begin) || at.After(end) || at.Before(last), "stamp %v out of place in %v..%v after %v", at, begin, end, last)
		last = at
	}
}

func TestNonStreamingAnswer(t *testing.T) {
	s := start(t, preload("qwen2:1.5b"))
	_, b := postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b","prompt":"x","stream":false,"options":{"seed":42,"num_predict":5}}`)
	m := decodeJSON(t, b)
	assert.Equal(t, strings.Join(simtext.Generate(42, "x", 5), ""), m["response"])
	assert.Equal(t, "length", m["done_reason"])
	assert.EqualValues(t, 5, m["eval_count"])
	assert.Contains(t, m, "total_duration")
	// Another seed, another answer; the same seed, the same.
	_, b2 := postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b","prompt":"x","stream":false,"options":{"seed":43,"num_predict":5}}`)
	assert.NotEqual(t, m["response"], decodeJSON(t, b2)["response"])
	_, b3 := postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b","prompt":"x","stream":false,"options":{"seed":42,"num_predict":5}}`)
	assert.Equal(t, m["response"], decodeJSON(t, b3)["response"])
}

func TestLoadAndUnloadOnlyWithoutPrompt(t *testing.T) {
	s := start(t, preload("qwen2:1.5b", "llama3.2:3b"))
	_, b := postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b"}`)
	m := decodeJSON(t, b)
	assert.Equal(t, "load", m["done_reason"])
	assert.Equal(t, "", m["response"])
	assert.Equal(t, true, m["done"])
	assert.Equal(t, "qwen2:1.5b", s.Stats().Loaded)

	// A present empty prompt is a generation, not a load.
	_, b = postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b","prompt":"","stream":false}`)
	m = decodeJSON(t, b)
	assert.Equal(t, "stop", m["done_reason"])
	assert.Equal(t, answer(0, ""), m["response"])
	assert.NotEmpty(t, m["response"])

	// Likewise present empty messages generate.
	_, b = postJSON(t, s.URL()+"/api/chat", `{"model":"qwen2:1.5b","messages":[],"stream":false}`)
	assert.Equal(t, "stop", decodeJSON(t, b)["done_reason"])

	// keep_alive 0 without messages unloads whatever is on the device, answering as a message.
	_, b = postJSON(t, s.URL()+"/api/chat", `{"model":"llama3.2:3b","keep_alive":0}`)
	m = decodeJSON(t, b)
	assert.Equal(t, "unload", m["done_reason"])
	assert.Equal(t, map[string]any{"role": "assistant", "content": ""}, m["message"])
	assert.Equal(t, "", s.Stats().Loaded)
	_, b = do(t, "GET", s.URL()+"/api/ps", "", "")
	assert.JSONEq(t, `{"models":[]}`, string(b))
	st := s.Stats()
	assert.Equal(t, 1, st.Loads)
	assert.Equal(t, 1, st.Unloads)
}

func TestKeepAliveIsSecondsAndExpires(t *testing.T) {
	clock := newFakeClock()
	s := start(t, func(c *Config) { c.Preloaded = []string{"qwen2:1.5b"}; c.Clock = clock })

	// Ollama clients often send "5m": hailo-ollama's keep_alive is an Int32, so that is a 500.
	resp, _ := postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b","keep_alive":"5m"}`)
	assert.Equal(t, 500, resp.StatusCode)

	postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b","keep_alive":10}`)
	_, b := do(t, "GET", s.URL()+"/api/ps", "", "")
	var ps struct {
		Models []struct {
			Name      string
			Size      int64
			ExpiresAt string `json:"expires_at"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &ps))
	require.Len(t, ps.Models, 1)
	assert.Equal(t, "qwen2:1.5b", ps.Models[0].Name)
	assert.Equal(t, isoTime(clock.Now().Add(10*time.Second)), ps.Models[0].ExpiresAt)

	clock.Advance(11 * time.Second)
	_, b = do(t, "GET", s.URL()+"/api/ps", "", "")
	assert.JSONEq(t, `{"models":[]}`, string(b))
	assert.Equal(t, 1, s.Stats().Unloads)

	// No keep_alive: five minutes. -1: forever.
	postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b"}`)
	clock.Advance(4 * time.Minute)
	assert.Equal(t, "qwen2:1.5b", s.Stats().Loaded)
	clock.Advance(time.Minute)
	assert.Equal(t, "", s.Stats().Loaded)
	postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b","keep_alive":-1}`)
	clock.Advance(1000 * time.Hour)
	_, b = do(t, "GET", s.URL()+"/api/ps", "", "")
	require.NoError(t, json.Unmarshal(b, &ps))
	require.Len(t, ps.Models, 1)
	assert.True(t, strings.HasPrefix(ps.Models[0].ExpiresAt, "2262-"), ps.Models[0].ExpiresAt)
}

func TestOneModelAtATimeWithSwitchDelay(t *testing.T) {
	clock := newFakeClock()
	s := start(t, func(c *Config) {
		c.Preloaded = []string{"qwen2:1.5b", "qwen2.5-coder:1.5b"}
		c.Clock = clock
		c.SwitchDelay = 2 * time.Second
		c.LoadTime = PerModel
	})
	postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b"}`)
	assert.Equal(t, []time.Duration{2 * time.Second, 7400 * time.Millisecond}, clock.Slept(), "first load: switch delay, then Hailo's load time")
	clock.ResetSlept()
	postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b"}`)
	assert.Empty(t, clock.Slept(), "the loaded model is not loaded again")
	postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2.5-coder:1.5b"}`)
	assert.Equal(t, []time.Duration{2 * time.Second, 7600 * time.Millisecond}, clock.Slept())

	_, b := do(t, "GET", s.URL()+"/api/ps", "", "")
	var ps struct{ Models []struct{ Name string } }
	require.NoError(t, json.Unmarshal(b, &ps))
	require.Len(t, ps.Models, 1, "one model on the device")
	assert.Equal(t, "qwen2.5-coder:1.5b", ps.Models[0].Name)
	st := s.Stats()
	assert.Equal(t, 2, st.Loads)
	assert.Equal(t, 1, st.Unloads)

	// The default switch delay is hailo-ollama's 2 s.
	assert.Equal(t, 2*time.Second, DefaultConfig().SwitchDelay)
}

func TestPacingFollowsHailoTable(t *testing.T) {
	clock := newFakeClock()
	s := start(t, func(c *Config) {
		c.Preloaded = []string{"llama3.2:3b"}
		c.Clock = clock
		c.TokensPerSecond, c.TTFT = PerModel, PerModel
	})
	postJSON(t, s.URL()+"/api/generate", `{"model":"llama3.2:3b"}`)
	clock.ResetSlept()
	_, b := postJSON(t, s.URL()+"/api/generate", `{"model":"llama3.2:3b","prompt":"p","stream":false,"options":{"num_predict":3}}`)
	rate := 2.7
	interval := time.Duration(float64(time.Second) / rate)
	assert.Equal(t, []time.Duration{1470 * time.Millisecond, interval, interval}, clock.Slept())
	assert.EqualValues(t, (1470*time.Millisecond + 2*interval).Nanoseconds(), decodeJSON(t, b)["total_duration"])
}

// hailo-ollama holds one lock over the device for a whole generation: a second request waits.
func TestOneRequestAtATime(t *testing.T) {
	clock := newFakeClock()
	clock.gate = make(chan struct{})
	clock.entered = make(chan time.Duration, 4)
	s := start(t, func(c *Config) {
		c.Preloaded = []string{"qwen2:1.5b"}
		c.Clock = clock
		c.TTFT = time.Second // the first request parks here, holding the device
	})
	type result struct {
		name string
		body []byte
	}
	done := make(chan result, 2)
	go func() {
		_, b := postJSON(t, s.URL()+"/api/generate", `{"model":"qwen2:1.5b","prompt":"first","stream":false}`)
		done <- result{"first", b}
	}()
	require.Equal(t, time.Second, <-clock.entered, "the first request is generating")
	go func() {
		_, b := do(t, "GET", s.URL()+"/api/ps", "", "")
		done <- result{"ps", b}
	}()
	require.Eventually(t, func() bool { return s.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond,
		"the second request queues for the device")
	select {
	case r := <-done:
		t.Fatalf("%s finished while the device was busy", r.name)
	default:
	}
	close(clock.gate)
	got := map[string][]byte{}
	for range 2 {
		r := <-done
		got[r.name] = r.body
	}
	assert.Equal(t, answer(0, "first"), decodeJSON(t, got["first"])["response"])
	assert.Contains(t, string(got["ps"]), "qwen2:1.5b", "ps ran after the generation's load")
}

func TestPromptOverContextIs500(t *testing.T) {
	s := start(t, preload("qwen2:1.5b"))
	long := strings.Repeat("word ", 2048*simtext.BytesPerToken/5+1) // over 2048 tokens alone
	body, _ := json.Marshal(map[string]any{"model": "qwen2:1.5b", "prompt": long, "stream": false})
	resp, b := postJSON(t, s.URL()+"/api/generate", string(body))
	assert.Equal(t, 500, resp.StatusCode)
	assert.Contains(t, string(b), "exceeds the context of 2048 tokens")

	body, _ = json.Marshal(map[string]any{"model": "qwen2:1.5b", "messages": []message{{Role: "user", Content: long}}})
	resp, _ = postJSON(t, s.URL()+"/api/chat", string(body))
	assert.Equal(t, 500, resp.StatusCode)

	// Just inside the context, the answer is cut at the context's end.
	fits := strings.Repeat("w", (2048-30)*simtext.BytesPerToken) // the template adds 27 tokens
	body, _ = json.Marshal(map[string]any{"model": "qwen2:1.5b", "prompt": fits, "stream": false})
	resp, b = postJSON(t, s.URL()+"/api/generate", string(body))
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	m := decodeJSON(t, b)
	assert.Equal(t, "length", m["done_reason"])
	assert.Less(t, m["eval_count"].(float64), float64(simtext.MinAnswer))
}

func TestPullIsAnOfflineCacheHit(t *testing.T) {
	s := start(t, func(c *Config) { c.FinalChunks = true })
	digest := HEFDigest("qwen2:1.5b", 4096)
	resp, b := postJSON(t, s.URL()+"/api/pull", `{"model":"qwen2:1.5b"}`)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	lines := ndjsonLines(t, b)
	require.Len(t, lines, 3, "%s", b)
	assert.Equal(t, map[string]any{"status": "pulling", "digest": digest, "total": 4096.0, "completed": 4096.0}, lines[0])
	assert.Equal(t, map[string]any{"status": "verifying sha256 digest"}, lines[1])
	assert.Equal(t, map[string]any{"status": "success"}, lines[2])

	blob := filepath.Join(s.cfg.DataDir, "models", "blob", "sha256_"+digest)
	assertDigest(t, blob, digest)
	assert.NoFileExists(t, blob+".tmp")
	st := s.Stats()
	assert.Equal(t, 1, st.Pulls)
	assert.EqualValues(t, 4096, st.LibraryBytes)
	assert.Equal(t, 1, st.LibraryRequests["GET /blob/sha256_"+digest])

	// Pulled again: the blob is present with the right hash, nothing is fetched.
	_, b = postJSON(t, s.URL()+"/api/pull", `{"model":"qwen2:1.5b","stream":false}`)
	assert.JSONEq(t, `{"status":"success"}`, string(b))
	_, b = postJSON(t, s.URL()+"/api/pull", `{"model":"qwen2:1.5b"}`)
	assert.Equal(t, []map[string]any{{"status": "success"}}, ndjsonLines(t, b))
	assert.Equal(t, 1, s.Stats().Pulls)

	// Now it is listed and served.
	_, b = do(t, "GET", s.URL()+"/api/tags", "", "")
	assert.Contains(t, string(b), `"name":"qwen2:1.5b"`)

	// A damaged blob is fetched again.
	require.NoError(t, os.WriteFile(blob, []byte("damaged"), 0o644))
	_, b = postJSON(t, s.URL()+"/api/pull", `{"model":"qwen2:1.5b","stream":false}`)
	assert.JSONEq(t, `{"status":"success"}`, string(b))
	assertDigest(t, blob, digest)
	assert.Equal(t, 2, s.Stats().Pulls)
}

func TestPullFromABadLibrary(t *testing.T) {
	coder := HEFDigest("qwen2.5-coder:1.5b", 4096)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, coder) {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("not the HEF you are looking for"))
	}))
	t.Cleanup(bad.Close)
	s := start(t, func(c *Config) { c.LibraryURL = bad.URL })

	_, b := postJSON(t, s.URL()+"/api/pull", `{"model":"qwen2:1.5b"}`)
	lines := ndjsonLines(t, b)
	assert.Equal(t, map[string]any{"error": "bad hash"}, lines[len(lines)-1])
	assert.NoFileExists(t, filepath.Join(s.cfg.DataDir, "models", "blob", "sha256_"+HEFDigest("qwen2:1.5b", 4096)))

	resp, b := postJSON(t, s.URL()+"/api/pull", `{"model":"qwen2.5-coder:1.5b","stream":false}`)
	assert.Equal(t, 500, resp.StatusCode)
	assert.Contains(t, string(b), "404")
	_, b = do(t, "GET", s.URL()+"/api/tags", "", "")
	assert.JSONEq(t, `{"models":[]}`, string(b))
}

func assertDigest(t *testing.T, path, digest string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	assert.Equal(t, digest, hex.EncodeToString(sum[:]))
}

func TestLibraryListener(t *testing.T) {
	s := start(t, nil)
	digest := HEFDigest("llama3.2:3b", 4096)
	blob := s.LibraryURL() + "/blob/sha256_" + digest

	resp, b := do(t, "HEAD", blob, "", "")
	assert.Equal(t, 200, resp.StatusCode)
	assert.EqualValues(t, 4096, resp.ContentLength)
	assert.Empty(t, b)

	resp, b = do(t, "GET", blob, "", "")
	assert.Equal(t, 200, resp.StatusCode)
	sum := sha256.Sum256(b)
	assert.Equal(t, digest, hex.EncodeToString(sum[:]))

	req, _ := http.NewRequest("GET", blob, nil)
	req.Header.Set("Range", "bytes=0-0")
	rr, err := client.Do(req)
	require.NoError(t, err)
	rr.Body.Close()
	assert.Equal(t, 206, rr.StatusCode)
	assert.Equal(t, "bytes 0-0/4096", rr.Header.Get("Content-Range"))

	resp, _ = do(t, "HEAD", s.LibraryURL()+"/blob/sha256_"+strings.Repeat("0", 64), "", "")
	assert.Equal(t, 404, resp.StatusCode)
	resp, _ = do(t, "GET", s.LibraryURL()+"/blob/sha256_"+strings.Repeat("0", 64), "", "")
	assert.Equal(t, 404, resp.StatusCode)

	// The 5.4 form: /v<version>/blob/<file> with a .sha256 companion.
	resp, _ = do(t, "HEAD", s.LibraryURL()+"/v5.4.0/blob/Llama-3.2-3B-Instruct.hef", "", "")
	assert.Equal(t, 200, resp.StatusCode)
	assert.EqualValues(t, 4096, resp.ContentLength)
	req, _ = http.NewRequest("GET", s.LibraryURL()+"/v5.4.0/blob/Llama-3.2-3B-Instruct.hef", nil)
	req.Header.Set("Range", "bytes=0-0")
	rr, err = client.Do(req)
	require.NoError(t, err)
	rr.Body.Close()
	assert.Equal(t, 206, rr.StatusCode)
	_, b = do(t, "GET", s.LibraryURL()+"/v5.4.0/blob/Llama-3.2-3B-Instruct.sha256", "", "")
	assert.Equal(t, digest+"  Llama-3.2-3B-Instruct.hef\n", string(b))
	resp, _ = do(t, "GET", s.LibraryURL()+"/v5.3.0/blob/Llama-3.2-3B-Instruct.hef", "", "")
	assert.Equal(t, 404, resp.StatusCode)
	resp, _ = do(t, "GET", s.LibraryURL()+"/v5.4.0/blob/Nope.hef", "", "")
	assert.Equal(t, 404, resp.StatusCode)

	// The library served one full body, two single bytes, and a companion.
	assert.EqualValues(t, 4096+2+int64(len(digest)+len("  Llama-3.2-3B-Instruct.hef\n")), s.Stats().LibraryBytes)
}

func TestDataFolderLayout(t *testing.T) {
	s := start(t, func(c *Config) {
		c.FinalChunks = true
		c.Preloaded = []string{"deepseek_r1_distill_qwen:1.5b"}
		c.FilenameManifests = []string{"qwen2.5-coder:1.5b"}
		c.ConfigHome = filepath.Join(c.DataDir, "config")
	})
	dir := s.cfg.DataDir
	for _, z := range zooOf(Version511) {
		model, tag, _ := strings.Cut(z.name, ":")
		raw, err := os.ReadFile(filepath.Join(dir, "models", "manifests", model, tag, "manifest.json"))
		require.NoError(t, err, z.name)
		m := decodeJSON(t, raw)
		details := m["details"].(map[string]any)
		assert.Equal(t, "Q4_0", details["quantization_level"], z.name)
		assert.Equal(t, z.parameterSize, details["parameter_size"], z.name)
		assert.Equal(t, z.family, details["family"], z.name)
		if z.name == "qwen2.5-coder:1.5b" {
			assert.Equal(t, "Qwen2.5-Coder-1.5B-Instruct.hef", m["hef_filename"])
			assert.NotContains(t, m, "hef_h10h")
			continue
		}
		assert.Equal(t, HEFDigest(z.name, 4096), m["hef_h10h"], z.name)
		assert.Contains(t, m, "template_params")
		assert.Contains(t, m["generation_params"], "stop_tokens")
	}
	entries, err := os.ReadDir(filepath.Join(dir, "models", "blob"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the preloaded model's blob")
	assert.Equal(t, "sha256_"+HEFDigest("deepseek_r1_distill_qwen:1.5b", 4096), entries[0].Name())

	// The 5.4-form manifest pulls through /v<version>/blob/<file> and its companion.
	_, b := postJSON(t, s.URL()+"/api/pull", `{"model":"qwen2.5-coder:1.5b"}`)
	lines := ndjsonLines(t, b)
	assert.Equal(t, "resolved_version: 5.4.0", lines[len(lines)-2]["status"])
	assert.Equal(t, "success", lines[len(lines)-1]["status"])
	assertDigest(t, filepath.Join(dir, "models", "blob", "Qwen2.5-Coder-1.5B-Instruct.hef"), HEFDigest("qwen2.5-coder:1.5b", 4096))
	assert.Equal(t, 1, s.Stats().LibraryRequests["GET /v5.4.0/blob/Qwen2.5-Coder-1.5B-Instruct.sha256"])

	// hailo-ollama.json names the addresses served.
	raw, err := os.ReadFile(filepath.Join(dir, "config", "hailo-ollama", "hailo-ollama.json"))
	require.NoError(t, err)
	var rc struct {
		Server, Library struct {
			Host string
			Port int
		}
		MainPollTimeMS int `json:"main_poll_time_ms"`
	}
	require.NoError(t, json.Unmarshal(raw, &rc))
	assert.Equal(t, s.URL(), fmt.Sprintf("http://%s:%d", rc.Server.Host, rc.Server.Port))
	assert.Equal(t, s.LibraryURL(), fmt.Sprintf("http://%s:%d", rc.Library.Host, rc.Library.Port))
	assert.Equal(t, 200, rc.MainPollTimeMS)
}

func TestShowAndDelete(t *testing.T) {
	s := start(t, preload("qwen2:1.5b"))
	resp, b := postJSON(t, s.URL()+"/api/show", `{"model":"qwen2:1.5b"}`)
	require.Equal(t, 200, resp.StatusCode)
	m := decodeJSON(t, b)
	assert.Equal(t, "", m["model_info"], "model_info is a string in hailo-ollama, not Ollama's object")
	assert.Contains(t, m["parameters"], `"<|im_end|>"`)
	assert.Equal(t, "Q4_0", m["details"].(map[string]any)["quantization_level"])
	assert.NotContains(t, m, "license", "null fields are left out")

	resp, b = do(t, "DELETE", s.URL()+"/api/delete", "application/json", `{"model":"qwen2:1.5b"}`)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Empty(t, b)
	_, b = do(t, "GET", s.URL()+"/api/tags", "", "")
	assert.JSONEq(t, `{"models":[]}`, string(b))
	resp, _ = do(t, "DELETE", s.URL()+"/api/delete", "application/json", `{"model":"qwen2:1.5b"}`)
	assert.Equal(t, 404, resp.StatusCode)
	_, b = do(t, "GET", s.URL()+"/hailo/v1/list", "", "")
	assert.Contains(t, string(b), "qwen2:1.5b", "the manifest stays")
}

func TestSimStatsRoute(t *testing.T) {
	s := start(t, nil)
	do(t, "GET", s.URL()+"/api/tags", "", "")
	_, b := do(t, "GET", s.URL()+"/_sim/stats", "", "")
	var st Stats
	require.NoError(t, json.Unmarshal(b, &st))
	assert.Equal(t, 1, st.Requests["GET /api/tags"])
	assert.NotContains(t, st.Requests, "GET /_sim/stats")
}

func TestStartFailsWhenLibraryCannotBind(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { busy.Close() })
	cfg := FastConfig(t.TempDir())
	cfg.LibraryListen = busy.Addr().String()
	_, err = Start(t.Context(), cfg, nil)
	require.ErrorContains(t, err, "library listener")
}

func TestStartRejectsBadConfig(t *testing.T) {
	cfg := FastConfig("")
	cfg.Listen = "nowhere"
	cfg.HEFSize = 0
	_, err := Start(t.Context(), cfg, nil)
	require.Error(t, err)
	for _, want := range []string{"listen address", "HEF size", "data dir"} {
		assert.ErrorContains(t, err, want)
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		EnvListen: "127.0.0.1:8000", EnvLibraryListen: "0.0.0.0:0", EnvHEFSize: "64KiB",
		EnvTokensPerSecond: "12.5", EnvTTFT: "300ms", EnvLoadTime: "model", EnvSwitchDelay: "0s",
		EnvPreloaded: "qwen2:1.5b, llama3.2:3b", EnvDataDir: "/tmp/x", EnvContext: "4096",
		EnvLibraryURL: "https://dev-public.hailo.ai", EnvFilenameManifests: "qwen2:1.5b",
		EnvFinalChunks: "true", EnvStampTokens: "1", EnvLongestAnswer: "200", EnvRealSizes: "true",
	}
	c, err := ConfigFromEnv(func(k string) string { return env[k] }, DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8000", c.Listen)
	assert.Equal(t, "0.0.0.0:0", c.LibraryListen)
	assert.EqualValues(t, 64<<10, c.HEFSize)
	assert.Equal(t, 12.5, c.TokensPerSecond)
	assert.Equal(t, 300*time.Millisecond, c.TTFT)
	assert.Equal(t, time.Duration(PerModel), c.LoadTime)
	assert.Equal(t, time.Duration(0), c.SwitchDelay)
	assert.Equal(t, []string{"qwen2:1.5b", "llama3.2:3b"}, c.Preloaded)
	assert.Equal(t, 4096, c.ContextTokens)
	assert.True(t, c.FinalChunks)
	assert.True(t, c.StampTokens)
	assert.True(t, c.RealSizes)
	assert.Equal(t, 200, c.LongestAnswer)

	for key, val := range map[string]string{
		EnvListen: "localhost:99999", EnvLibraryListen: "example.com:80", EnvHEFSize: "-1",
		EnvTokensPerSecond: "fast", EnvTTFT: "-1s", EnvSwitchDelay: "soon", EnvPreloaded: "gpt4:1t",
		EnvLibraryURL: "ftp://x", EnvContext: "0", EnvLibraryVersion: "5.4",
		EnvFinalChunks: "maybe", EnvStampTokens: "yes please", EnvLongestAnswer: "3", EnvRealSizes: "big",
	} {
		bad := map[string]string{EnvDataDir: "/tmp/x", key: val}
		_, err := ConfigFromEnv(func(k string) string { return bad[k] }, DefaultConfig())
		assert.Error(t, err, "%s=%s", key, val)
	}
	_, err = ConfigFromEnv(func(string) string { return "" }, DefaultConfig())
	assert.ErrorContains(t, err, "data dir")
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4KiB": 4096, "1MiB": 1 << 20, "2M": 2 << 20, "1GB": 1e9, "7B": 7} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "x", "1.5MiB", "-4", "9GiB", "99999999999999999999"} {
		_, err := ParseSize(in)
		assert.Error(t, err, in)
	}
}

func TestHEFDigestStable(t *testing.T) {
	a := HEFDigest("qwen2:1.5b", 4096)
	assert.Equal(t, a, HEFDigest("qwen2:1.5b", 4096))
	assert.NotEqual(t, a, HEFDigest("qwen2:1.5b", 4097))
	assert.NotEqual(t, a, HEFDigest("llama3.2:3b", 4096))
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4096", "64KiB", "1MiB", "2GB", "x", "-1", "9223372036854775807G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && (n < 0 || n > MaxHEFSize) {
			t.Fatalf("ParseSize(%q) = %d out of range", s, n)
		}
	})
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"hef_h10h":"` + strings.Repeat("a", 64) + `","template_params":{"chat_template":"x"},"details":{"format":"hef"}}`))
	f.Add([]byte(`{"hef_filename":"Qwen3-1.7B-Instruct.hef","license":null}`))
	f.Add([]byte(`{"hef_filename":"../../etc/passwd"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := parseManifest("m:t", raw)
		if err != nil {
			return
		}
		if (m.digest == "") == (m.hefFile == "") {
			t.Fatalf("manifest with both or neither blob reference: %+v", m)
		}
		if strings.ContainsAny(m.hefFile, `/\`) {
			t.Fatalf("hef_filename %q escapes the blob folder", m.hefFile)
		}
	})
}

// As hailo-ollama 5.1.1 does, and its public clients record: a streamed answer and a pull end
// without their last chunk, the connection simply closing ("unexpected EOF"), though the answer
// is whole and the pulled model is listed. A pull given only "name" is a 500.
func TestStreamsEndWithoutTheirLastChunk(t *testing.T) {
	s := start(t, preload("qwen2:1.5b"))
	resp, err := client.Post(s.URL()+"/api/chat", "application/json",
		strings.NewReader(`{"model":"qwen2:1.5b","messages":[{"role":"user","content":"tell me"}]}`))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	want := simtext.Generate(0, "tell me", simtext.AnswerLength(0, "tell me"))
	var text strings.Builder
	lines := ndjsonLines(t, b)
	require.Len(t, lines, len(want), "every token, and no last chunk")
	for _, l := range lines {
		assert.Equal(t, false, l["done"])
		text.WriteString(l["message"].(map[string]any)["content"].(string))
	}
	assert.Equal(t, strings.Join(want, ""), text.String())

	resp, err = client.Post(s.URL()+"/api/pull", "application/json", strings.NewReader(`{"model":"qwen2.5-coder:1.5b"}`))
	require.NoError(t, err)
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	lines = ndjsonLines(t, b)
	assert.Equal(t, "verifying sha256 digest", lines[len(lines)-1]["status"], "no success line")
	_, b = do(t, http.MethodGet, s.URL()+"/api/tags", "", "")
	assert.Contains(t, string(b), `"name":"qwen2.5-coder:1.5b"`, "pulled all the same")

	resp, b = postJSON(t, s.URL()+"/api/pull", `{"name":"qwen2:1.5b"}`)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, "%s", b)
}

// With RealSizes the simulator reports the real HEF's size wherever a real one reports a size
// (the library's HEAD and range answers, /api/tags), so a sizer sees the real model's numbers,
// while its files, a full GET and the digests stay the small fake HEF's.
func TestLibraryRealSizes(t *testing.T) {
	s := start(t, func(c *Config) { c.RealSizes, c.FinalChunks, c.Preloaded = true, true, []string{"llama3.2:3b"} })
	digest := HEFDigest("llama3.2:3b", 4096)
	for _, blob := range []string{s.LibraryURL() + "/blob/sha256_" + digest, s.LibraryURL() + "/v5.4.0/blob/Llama-3.2-3B-Instruct.hef"} {
		resp, _ := do(t, "HEAD", blob, "", "")
		assert.Equal(t, 200, resp.StatusCode)
		assert.EqualValues(t, 3_130_000_000, resp.ContentLength, "HEAD answers the real HEF's size")

		req, _ := http.NewRequest("GET", blob, nil)
		req.Header.Set("Range", "bytes=0-0")
		rr, err := client.Do(req)
		require.NoError(t, err)
		first, _ := io.ReadAll(rr.Body)
		rr.Body.Close()
		assert.Equal(t, 206, rr.StatusCode)
		assert.Equal(t, "bytes 0-0/3130000000", rr.Header.Get("Content-Range"))
		fake, _ := io.ReadAll(io.LimitReader(hefContent("llama3.2:3b", 4096), 1))
		assert.Equal(t, fake, first, "the bytes it has are the fake HEF's")

		req.Header.Set("Range", "bytes=4094-4097")
		rr, err = client.Do(req)
		require.NoError(t, err)
		tail, _ := io.ReadAll(rr.Body)
		rr.Body.Close()
		assert.Len(t, tail, 4)
		assert.Equal(t, []byte{0, 0}, tail[2:], "past the fake bytes, zeros")

		resp, b := do(t, "GET", blob, "", "")
		assert.Equal(t, 200, resp.StatusCode)
		sum := sha256.Sum256(b)
		assert.Equal(t, digest, hex.EncodeToString(sum[:]), "a full GET moves the fake HEF")
	}

	_, b := do(t, "GET", s.URL()+"/api/tags", "", "")
	assert.Contains(t, string(b), `"size":3130000000`, "/api/tags lists the real HEF's size")

	// A pull moves the fake HEF and counts in the real one's bytes.
	resp, b := postJSON(t, s.URL()+"/api/pull", `{"model":"qwen2:1.5b","stream":true}`)
	require.Equal(t, 200, resp.StatusCode)
	lines := ndjsonLines(t, b)
	require.NotEmpty(t, lines, "%s", b)
	assert.Equal(t, map[string]any{"status": "pulling", "digest": HEFDigest("qwen2:1.5b", 4096), "total": 1.56e9, "completed": 1.56e9}, lines[0])
	assertDigest(t, filepath.Join(s.cfg.DataDir, "models", "blob", "sha256_"+HEFDigest("qwen2:1.5b", 4096)), HEFDigest("qwen2:1.5b", 4096))
}
