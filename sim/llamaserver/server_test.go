package llamaserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/sim/internal/simserver"
	"github.com/llmkube/mesh/sim/simtext"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modelFile writes a sparse model file of size bytes that starts with the GGUF magic.
func modelFile(t *testing.T, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.gguf")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = f.WriteString("GGUF")
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
	return path
}

// start runs a server with cfg (ModelPath filled in when empty) and waits until it is ready
// unless the load delay is long.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.ModelPath == "" {
		cfg.ModelPath = modelFile(t, 1<<20)
	}
	s, err := Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	if cfg.LoadDelay < time.Minute {
		select {
		case <-s.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("server never became ready")
		}
	}
	return s
}

func quick() Config {
	cfg := DefaultConfig()
	cfg.LoadDelay = 0
	return cfg
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	if v != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	}
	return resp.StatusCode
}

// postJSON posts a body; one asking for a streamed answer on a connection of its own, as the
// server closes the connection after one (see TestStreamedAnswerClosesItsConnection), which a
// reused one would fail on.
func postJSON(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Close = strings.Contains(body, `"stream":true`)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type apiError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Type    string `json:"type"`
		NPrompt int    `json:"n_prompt_tokens"`
		NCtx    int    `json:"n_ctx"`
	} `json:"error"`
}

func TestEverythingAnswers503WhileLoading(t *testing.T) {
	cfg := quick()
	cfg.LoadDelay = time.Hour
	s := start(t, cfg)
	for _, path := range []string{"/health", "/v1/models", "/props", "/metrics"} {
		var e apiError
		require.Equal(t, http.StatusServiceUnavailable, getJSON(t, s.URL()+path, &e), path)
		assert.Equal(t, 503, e.Error.Code)
		assert.Equal(t, "Loading model", e.Error.Message)
		assert.Equal(t, "unavailable_error", e.Error.Type)
	}
	resp := postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	// The simulator's own route answers during loading.
	var st Stats
	require.Equal(t, http.StatusOK, getJSON(t, s.URL()+"/_sim/stats", &st))
	assert.False(t, st.Ready)
	assert.Equal(t, 1, st.Requests["GET /health"])
}

func TestHealthTurnsOKWhenLoaded(t *testing.T) {
	cfg := quick()
	cfg.LoadDelay = 300 * time.Millisecond
	s := start(t, cfg)
	var body map[string]string
	require.Equal(t, http.StatusOK, getJSON(t, s.URL()+"/health", &body))
	assert.Equal(t, map[string]string{"status": "ok"}, body)
	assert.True(t, s.Stats().Ready)
}

func TestStartRejectsMissingOrUnreadableModel(t *testing.T) {
	cfg := quick()
	cfg.ModelPath = filepath.Join(t.TempDir(), "absent.gguf")
	_, err := Start(context.Background(), cfg, nil)
	require.ErrorContains(t, err, "failed to open model file")

	cfg.ModelPath = t.TempDir()
	_, err = Start(context.Background(), cfg, nil)
	require.ErrorContains(t, err, "not a regular file")

	if os.Geteuid() != 0 { // root reads anything
		p := modelFile(t, 64)
		require.NoError(t, os.Chmod(p, 0))
		cfg.ModelPath = p
		_, err = Start(context.Background(), cfg, nil)
		require.ErrorContains(t, err, "failed to open model file")
	}
}

func TestModelsIDIsAliasOrPath(t *testing.T) {
	cfg := quick()
	cfg.ModelPath = modelFile(t, 12345)
	s := start(t, cfg)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			OwnedBy string `json:"owned_by"`
			Meta    struct {
				Size int64 `json:"size"`
			} `json:"meta"`
		} `json:"data"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, s.URL()+"/v1/models", &list))
	require.Len(t, list.Data, 1)
	assert.Equal(t, "list", list.Object)
	assert.Equal(t, cfg.ModelPath, list.Data[0].ID)
	assert.Equal(t, "llamacpp", list.Data[0].OwnedBy)
	assert.EqualValues(t, 12345, list.Data[0].Meta.Size)

	cfg.Alias = "tiny:1b"
	s = start(t, cfg)
	require.Equal(t, http.StatusOK, getJSON(t, s.URL()+"/v1/models", &list))
	assert.Equal(t, "tiny:1b", list.Data[0].ID)
}

func TestProps(t *testing.T) {
	cfg := quick()
	cfg.CtxSize = 2048
	cfg.Alias = "m"
	s := start(t, cfg)
	var props struct {
		Default struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
		TotalSlots      int    `json:"total_slots"`
		ModelPath       string `json:"model_path"`
		ModelAlias      string `json:"model_alias"`
		EndpointMetrics bool   `json:"endpoint_metrics"`
		BuildInfo       string `json:"build_info"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, s.URL()+"/props", &props))
	assert.Equal(t, 2048, props.Default.NCtx)
	assert.Equal(t, cfg.Parallel, props.TotalSlots)
	assert.Equal(t, s.cfg.ModelPath, props.ModelPath)
	assert.Equal(t, "m", props.ModelAlias)
	assert.False(t, props.EndpointMetrics)
	assert.NotEmpty(t, props.BuildInfo)
}

type chatResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Created int64  `json:"created"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		Prompt     int `json:"prompt_tokens"`
		Completion int `json:"completion_tokens"`
		Total      int `json:"total_tokens"`
	} `json:"usage"`
	Timings map[string]float64 `json:"timings"`
}

func chat(t *testing.T, s *Server, body string) chatResponse {
	t.Helper()
	resp := postJSON(t, s.URL()+"/v1/chat/completions", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out chatResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

func TestChatNonStreaming(t *testing.T) {
	s := start(t, quick())
	out := chat(t, s, `{"model":"x","messages":[{"role":"user","content":"Why is the sky blue?"}],"seed":3}`)
	assert.True(t, strings.HasPrefix(out.ID, "chatcmpl-"))
	assert.Equal(t, "chat.completion", out.Object)
	assert.Equal(t, "x", out.Model)
	assert.InDelta(t, time.Now().Unix(), out.Created, 5, "created is in seconds")
	require.Len(t, out.Choices, 1)
	assert.Equal(t, "assistant", out.Choices[0].Message.Role)
	assert.Equal(t, "stop", out.Choices[0].FinishReason)
	assert.NotEmpty(t, out.Choices[0].Message.Content)
	assert.Positive(t, out.Usage.Prompt)
	assert.GreaterOrEqual(t, out.Usage.Completion, simtext.MinAnswer)
	assert.Equal(t, out.Usage.Prompt+out.Usage.Completion, out.Usage.Total)
	assert.EqualValues(t, out.Usage.Prompt, out.Timings["prompt_n"])
	assert.EqualValues(t, out.Usage.Completion, out.Timings["predicted_n"])
	assert.Positive(t, out.Timings["predicted_per_second"])
	for _, k := range []string{"prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_ms", "predicted_per_token_ms"} {
		assert.Contains(t, out.Timings, k)
	}

	again := chat(t, s, `{"model":"x","messages":[{"role":"user","content":"Why is the sky blue?"}],"seed":3}`)
	assert.Equal(t, out.Choices[0].Message.Content, again.Choices[0].Message.Content, "same seed, same answer")
	other := chat(t, s, `{"model":"x","messages":[{"role":"user","content":"Why is the sky blue?"}],"seed":4}`)
	assert.NotEqual(t, out.Choices[0].Message.Content, other.Choices[0].Message.Content)
}

func TestChatLimits(t *testing.T) {
	s := start(t, quick())
	out := chat(t, s, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
	assert.Equal(t, "length", out.Choices[0].FinishReason)
	assert.Equal(t, 3, out.Usage.Completion)
	assert.Equal(t, s.modelID(), out.Model, "no model in the request: the server's name")

	full := chat(t, s, `{"messages":[{"role":"user","content":"hi"}]}`)
	cut := full.Choices[0].Message.Content[:len(full.Choices[0].Message.Content)/2]
	stop := cut[len(cut)-4:]
	stopped := chat(t, s, `{"messages":[{"role":"user","content":"hi"}],"stop":`+quote(stop)+`}`)
	assert.Equal(t, "stop", stopped.Choices[0].FinishReason)
	assert.NotContains(t, stopped.Choices[0].Message.Content, stop)
	assert.True(t, strings.HasPrefix(full.Choices[0].Message.Content, stopped.Choices[0].Message.Content))
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestChatErrors(t *testing.T) {
	cfg := quick()
	cfg.CtxSize = 64
	s := start(t, cfg)

	var e apiError
	resp := postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"`+strings.Repeat("word ", 60)+`"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	assert.Equal(t, "exceed_context_size_error", e.Error.Type)
	assert.Equal(t, 64, e.Error.NCtx)
	assert.Greater(t, e.Error.NPrompt, 64)

	resp = postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[]}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp = postJSON(t, s.URL()+"/v1/chat/completions", `{not json`)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	resp = postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":2}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	require.Equal(t, http.StatusNotFound, getJSON(t, s.URL()+"/nope", &e))
	assert.Equal(t, "File Not Found", e.Error.Message)
	assert.Equal(t, "not_found_error", e.Error.Type)
	require.Equal(t, http.StatusNotFound, getJSON(t, s.URL()+"/v1/chat/completions", &e), "GET on a POST route")
}

// sseEvents reads "data: ..." events until [DONE] or EOF.
func sseEvents(t *testing.T, r io.Reader) (events []map[string]any, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "line %q is not an SSE data line", line)
		if data == "[DONE]" {
			return events, true
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &ev))
		events = append(events, ev)
	}
	return events, false
}

func TestChatStreaming(t *testing.T) {
	s := start(t, quick())
	body := `{"model":"m","messages":[{"role":"user","content":"Tell me about rivers"}],"seed":9,"stream":true}`
	resp := postJSON(t, s.URL()+"/v1/chat/completions", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events, done := sseEvents(t, resp.Body)
	require.True(t, done, "stream must end with data: [DONE]")
	require.GreaterOrEqual(t, len(events), 3)

	choice := func(ev map[string]any) map[string]any {
		cs := ev["choices"].([]any)
		require.Len(t, cs, 1)
		return cs[0].(map[string]any)
	}
	first := choice(events[0])
	assert.Equal(t, map[string]any{"role": "assistant", "content": nil}, first["delta"])
	assert.Nil(t, first["finish_reason"])

	var text strings.Builder
	for _, ev := range events[1 : len(events)-1] {
		assert.Equal(t, "chat.completion.chunk", ev["object"])
		assert.Equal(t, "m", ev["model"])
		c := choice(ev)
		assert.Nil(t, c["finish_reason"])
		assert.NotContains(t, ev, "timings", "timings only on the last chunk")
		text.WriteString(c["delta"].(map[string]any)["content"].(string))
	}
	last := events[len(events)-1]
	lc := choice(last)
	assert.Equal(t, "stop", lc["finish_reason"])
	assert.Equal(t, map[string]any{}, lc["delta"])
	timings, ok := last["timings"].(map[string]any)
	require.True(t, ok, "last chunk carries timings")
	assert.Positive(t, timings["predicted_per_second"])
	assert.Positive(t, timings["predicted_n"])

	plain := chat(t, s, `{"messages":[{"role":"user","content":"Tell me about rivers"}],"seed":9}`)
	assert.Equal(t, plain.Choices[0].Message.Content, text.String(), "streaming and not give the same answer")
}

func TestChatStreamingUsageChunk(t *testing.T) {
	s := start(t, quick())
	resp := postJSON(t, s.URL()+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":4}`)
	events, done := sseEvents(t, resp.Body)
	require.True(t, done)
	last := events[len(events)-1]
	assert.Empty(t, last["choices"])
	usage := last["usage"].(map[string]any)
	assert.EqualValues(t, 4, usage["completion_tokens"])
	assert.Contains(t, last, "timings")
	prev := events[len(events)-2]["choices"].([]any)[0].(map[string]any)
	assert.Equal(t, "length", prev["finish_reason"])
}

func TestPacing(t *testing.T) {
	cfg := quick()
	cfg.TokensPerSec = 200
	cfg.TTFT = 100 * time.Millisecond
	s := start(t, cfg)
	begin := time.Now()
	resp := postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":21}`)
	r := bufio.NewReader(resp.Body)
	_, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(begin), cfg.TTFT, "first token after TTFT")
	events, done := sseEvents(t, r)
	require.True(t, done)
	// 21 tokens at 200/s: the last is due 20/200 s = 100 ms after the first.
	assert.GreaterOrEqual(t, time.Since(begin), cfg.TTFT+100*time.Millisecond)
	timings := events[len(events)-1]["timings"].(map[string]any)
	assert.GreaterOrEqual(t, timings["prompt_ms"].(float64), 100.0)
	// From the start to the last token: prompt processing then generation.
	assert.GreaterOrEqual(t, timings["prompt_ms"].(float64)+timings["predicted_ms"].(float64), 200.0)
}

func TestClientDisconnectStopsGeneration(t *testing.T) {
	cfg := quick()
	cfg.TokensPerSec = 20
	s := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"stream":true}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, err = bufio.NewReader(resp.Body).ReadString('\n') // the first chunk
	require.NoError(t, err)
	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool { return s.Stats().Cancelled == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Less(t, s.Stats().PredictedTokens, int64(simtext.MinAnswer), "generation stopped early")
	assert.Zero(t, s.processing.Load(), "slot released")
}

func TestMetrics(t *testing.T) {
	s := start(t, quick())
	var e apiError
	require.Equal(t, http.StatusNotImplemented, getJSON(t, s.URL()+"/metrics", &e))
	assert.Equal(t, "not_supported_error", e.Error.Type)
	assert.Contains(t, e.Error.Message, "--metrics")

	cfg := quick()
	cfg.Metrics = true
	s = start(t, cfg)
	out := chat(t, s, `{"messages":[{"role":"user","content":"count me"}],"max_tokens":5}`)
	resp, err := http.Get(s.URL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	text := string(body)
	assert.Contains(t, text, "# TYPE llamacpp:prompt_tokens_total counter\n")
	assert.Contains(t, text, "\nllamacpp:prompt_tokens_total "+itoa(out.Usage.Prompt)+"\n")
	assert.Contains(t, text, "\nllamacpp:tokens_predicted_total 5\n")
	assert.Contains(t, text, "\nllamacpp:requests_processing 0\n")
	assert.Contains(t, text, "llamacpp:predicted_tokens_seconds ")
}

func itoa(n int) string { return formatFloat(float64(n)) }

func TestSlotsDeferRequests(t *testing.T) {
	cfg := quick()
	cfg.Parallel = 1
	cfg.Metrics = true
	cfg.TokensPerSec = 50
	s := start(t, cfg)
	results := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"max_tokens":10}`))
			if err != nil {
				results <- 0
				return
			}
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	require.Eventually(t, func() bool { return s.deferred.Load() == 1 && s.processing.Load() == 1 },
		5*time.Second, 5*time.Millisecond)
	var slots []map[string]any
	require.Equal(t, http.StatusOK, getJSON(t, s.URL()+"/slots", &slots))
	require.Len(t, slots, 1)
	assert.Equal(t, true, slots[0]["is_processing"])
	assert.Equal(t, http.StatusOK, <-results)
	assert.Equal(t, http.StatusOK, <-results)
}

func TestCrashAfter(t *testing.T) {
	cfg := quick()
	cfg.CrashAfter = 2
	s := start(t, cfg)
	chat(t, s, `{"messages":[{"role":"user","content":"one"}]}`)
	select {
	case <-s.Done():
		t.Fatal("crashed too early")
	default:
	}
	out := chat(t, s, `{"messages":[{"role":"user","content":"two"}],"stream":false}`)
	assert.NotEmpty(t, out.Choices[0].Message.Content, "the last answer is delivered whole")
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("no crash after the second completion")
	}
	assert.ErrorIs(t, s.Err(), ErrCrashed)
	_, err := http.Get(s.URL() + "/health")
	assert.Error(t, err, "a crashed server answers nothing")
}

func TestHoldMemory(t *testing.T) {
	cfg := quick()
	cfg.ModelPath = modelFile(t, 4<<20)
	cfg.HoldMemory = 1.5
	s := start(t, cfg)
	assert.EqualValues(t, 6<<20, s.Stats().HeldBytes)
	require.NoError(t, s.Close())
	assert.Zero(t, s.Stats().HeldBytes)
	assert.NoError(t, s.Err())
}

func TestStatsCountRequests(t *testing.T) {
	s := start(t, quick())
	getJSON(t, s.URL()+"/health", nil)
	getJSON(t, s.URL()+"/health", nil)
	chat(t, s, `{"messages":[{"role":"user","content":"x"}],"max_tokens":2}`)
	var st Stats
	require.Equal(t, http.StatusOK, getJSON(t, s.URL()+"/_sim/stats", &st))
	assert.Equal(t, 2, st.Requests["GET /health"])
	assert.Equal(t, 1, st.Requests["POST /v1/chat/completions"])
	assert.NotContains(t, st.Requests, "GET /_sim/stats")
	assert.Equal(t, 1, st.Completions)
	assert.EqualValues(t, 2, st.PredictedTokens)
	assert.Equal(t, st, s.Stats())
}

func TestStartContextStopsServer(t *testing.T) {
	cfg := quick()
	cfg.ModelPath = modelFile(t, 64)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, cfg, nil)
	require.NoError(t, err)
	cancel()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server still running after its context ended")
	}
	assert.NoError(t, s.Err())
}

func TestStopper(t *testing.T) {
	st := stopper{stops: []string{"END"}}
	var got strings.Builder
	for _, tok := range []string{"a", " E", "N", "x", " EN", "D", " more"} {
		out, stopped := st.add(tok)
		got.WriteString(out)
		if stopped {
			break
		}
	}
	assert.Equal(t, "a ENx ", got.String())

	st = stopper{stops: []string{"zzz"}}
	out1, _ := st.add("ab z")
	assert.Equal(t, "ab ", out1, "a possible stop start is held back")
	assert.Equal(t, "z", st.flush())
}

func TestAnswer(t *testing.T) {
	toks, finish := simserver.Answer(1, "p", -1, 0)
	assert.Equal(t, "stop", finish)
	assert.Len(t, toks, simtext.AnswerLength(1, "p"))
	short, finish := simserver.Answer(1, "p", 2, 0)
	assert.Equal(t, "length", finish)
	assert.Equal(t, toks[:2], short)
	none, _ := simserver.Answer(1, "p", 0, 0)
	assert.Empty(t, none)
}

// Slots asked for explicitly split the context: each request gets -c / -np, and /slots says so.
func TestSlotsSplitTheContext(t *testing.T) {
	cfg := quick()
	cfg.CtxSize, cfg.Parallel, cfg.UnifiedKV = 512, 4, false
	s := start(t, cfg)
	var slots []map[string]any
	require.Equal(t, http.StatusOK, getJSON(t, s.URL()+"/slots", &slots))
	require.Len(t, slots, 4)
	for _, sl := range slots {
		assert.EqualValues(t, 128, sl["n_ctx"])
	}
	resp := postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"`+strings.Repeat("word ", 200)+`"}]}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var e apiError
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	assert.Equal(t, "exceed_context_size_error", e.Error.Type)
	assert.Equal(t, 128, e.Error.NCtx)
}

// With one context shared by the slots (-np auto), concurrent requests compete for it: one that
// finds it full fails with llama-server's "Context size has been exceeded", as a 500 or, in a
// stream, as an error line.
func TestSharedContextRunsOut(t *testing.T) {
	cfg := quick()
	cfg.CtxSize = 256
	cfg.TokensPerSec = 20 // the first answer holds its share while the second arrives
	s := start(t, cfg)
	require.True(t, cfg.UnifiedKV)

	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":40}`))
		if err != nil {
			first <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	require.Eventually(t, func() bool {
		s.kv.mu.Lock()
		defer s.kv.mu.Unlock()
		return s.kv.used > 0
	}, 5*time.Second, 5*time.Millisecond)

	// Alone this prompt fits the 256 tokens; beside the first answer it does not.
	tokens := func(content string) int {
		p, err := render([]chatMessage{{Role: "user", Content: json.RawMessage(strconv.Quote(content))}})
		require.NoError(t, err)
		return simtext.CountTokens(p)
	}
	big := "w"
	for tokens(big+" w") < 250 {
		big += " w"
	}
	require.Greater(t, tokens(big)+tokens("hi"), 256)
	resp := postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"`+big+`"}]}`)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	var e apiError
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	assert.Equal(t, "Context size has been exceeded.", e.Error.Message)
	assert.Equal(t, "server_error", e.Error.Type)

	resp = postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"`+big+`"}],"stream":true}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, `data: {"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}`+"\n\n", string(body))
	assert.Equal(t, http.StatusOK, <-first)
}

// The fault knob ends a stream with an error line after some content and no [DONE].
func TestStreamErrorAfterContent(t *testing.T) {
	cfg := quick()
	cfg.StreamErrorAfter = 3
	s := start(t, cfg)
	resp := postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"tell me a long story"}],"stream":true,"max_tokens":20}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	events := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	require.Len(t, events, 5, "a role chunk, three tokens, then the error")
	assert.Contains(t, events[3], `"content":`)
	assert.Equal(t, `data: {"error":{"code":500,"message":"simulated failure after 3 tokens (LLAMA_SIM_STREAM_ERROR_AFTER)","type":"server_error"}}`, events[4])
	assert.NotContains(t, string(body), "[DONE]")
}

// TestStampTokens: with StampTokens, every streamed piece of content ends with the time it began
// to be written, in order, between the request and the answer's end.
func TestStampTokens(t *testing.T) {
	cfg := quick()
	cfg.StampTokens = true
	s := start(t, cfg)
	begin := time.Now()
	resp := postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"tell me"}],"stream":true,"max_tokens":6}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	end := time.Now()
	var stamps []time.Time
	for _, ev := range strings.Split(string(body), "\n\n") {
		if at, ok := simtext.StampIn([]byte(ev)); ok {
			stamps = append(stamps, at)
		}
	}
	require.Len(t, stamps, 6, "%s", body)
	assert.False(t, stamps[0].Before(begin) || stamps[5].After(end), "stamps %v outside %v..%v", stamps, begin, end)
	assert.True(t, slices.IsSortedFunc(stamps, time.Time.Compare), "stamps out of order: %v", stamps)
}

// TestToolsAndResponseFormat: with tools (and the default --jinja) the answer is a call to a
// tool, streamed as llama-server streams one; after the tool's result it is text again; with
// response_format it is a JSON document that fits the schema; without --jinja tools are ignored.
func TestToolsAndResponseFormat(t *testing.T) {
	s := start(t, quick())
	tools := `"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Paris"]}}}}}]`
	var whole struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   *string
				ToolCalls []struct {
					ID       string
					Type     string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
	}
	resp := postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"weather?"}],`+tools+`}`)
	require.Equal(t, 200, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&whole))
	c := whole.Choices[0]
	assert.Equal(t, "tool_calls", c.FinishReason)
	assert.Nil(t, c.Message.Content)
	require.Len(t, c.Message.ToolCalls, 1)
	assert.Equal(t, "weather", c.Message.ToolCalls[0].Function.Name)
	assert.JSONEq(t, `{"city":"Paris"}`, c.Message.ToolCalls[0].Function.Arguments)
	assert.NotEmpty(t, c.Message.ToolCalls[0].ID)

	resp = postJSON(t, s.URL()+"/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"weather?"}],`+tools+`}`)
	events, done := sseEvents(t, resp.Body)
	require.True(t, done)
	var args strings.Builder
	for _, ev := range events {
		for _, ch := range ev["choices"].([]any) {
			d := ch.(map[string]any)["delta"].(map[string]any)
			if calls, ok := d["tool_calls"].([]any); ok {
				fn := calls[0].(map[string]any)["function"].(map[string]any)
				args.WriteString(fn["arguments"].(string))
			}
		}
	}
	assert.JSONEq(t, `{"city":"Paris"}`, args.String())

	answer := chat(t, s, `{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}],`+tools+`}`)
	assert.NotEmpty(t, answer.Choices[0].Message.Content, "after the result, text")

	answer = chat(t, s, `{"messages":[{"role":"user","content":"city?"}],"response_format":{"type":"json_schema","json_schema":{"name":"c","schema":{"type":"object","properties":{"city":{"type":"string","enum":["Rome"]}}}}}}`)
	assert.JSONEq(t, `{"city":"Rome"}`, answer.Choices[0].Message.Content)

	cfg := quick()
	cfg.Jinja = false
	plain := start(t, cfg)
	answer = chat(t, plain, `{"messages":[{"role":"user","content":"weather?"}],`+tools+`}`)
	assert.NotEmpty(t, answer.Choices[0].Message.Content, "no template reads the tools")
}

func TestEmbeddings(t *testing.T) {
	plain := start(t, quick())
	resp := postJSON(t, plain.URL()+"/v1/embeddings", `{"input":"hi"}`)
	assert.Equal(t, http.StatusNotImplemented, resp.StatusCode, "only with --embeddings")
	var e apiError
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	assert.Contains(t, e.Error.Message, "--embeddings")

	cfg := quick()
	cfg.Embedding = true
	s := start(t, cfg)
	var out struct {
		Data []struct {
			Index     int
			Embedding []float32
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	resp = postJSON(t, s.URL()+"/v1/embeddings", `{"input":["hi","there"]}`)
	require.Equal(t, 200, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Len(t, out.Data, 2)
	assert.Len(t, out.Data[1].Embedding, embeddingSize)
	assert.Equal(t, 1, out.Data[1].Index)
	assert.Positive(t, out.Usage.PromptTokens)

	cfg.Pooling = "none"
	none := start(t, cfg)
	assert.Equal(t, http.StatusBadRequest, postJSON(t, none.URL()+"/v1/embeddings", `{"input":"hi"}`).StatusCode)
}

func TestCompletions(t *testing.T) {
	s := start(t, quick())
	var whole struct {
		Object  string
		Choices []struct {
			Text         string
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	resp := postJSON(t, s.URL()+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":5,"seed":3}`)
	require.Equal(t, 200, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&whole))
	assert.Equal(t, "text_completion", whole.Object)
	assert.Equal(t, "length", whole.Choices[0].FinishReason)
	assert.Equal(t, 5, whole.Usage.CompletionTokens)

	resp = postJSON(t, s.URL()+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":5,"seed":3,"stream":true}`)
	events, done := sseEvents(t, resp.Body)
	require.True(t, done)
	var text strings.Builder
	for _, ev := range events {
		text.WriteString(ev["choices"].([]any)[0].(map[string]any)["text"].(string))
	}
	assert.Equal(t, whole.Choices[0].Text, text.String())
	assert.Equal(t, http.StatusBadRequest, postJSON(t, s.URL()+"/v1/completions", `{"prompt":""}`).StatusCode)
}

// The connection of a streamed answer is closed once the answer is written, though its headers
// offer keep-alive, as llama-server's is (chats and completions alike); one that did not stream
// is kept. Read on one raw connection, as a client reusing it would.
func TestStreamedAnswerClosesItsConnection(t *testing.T) {
	s := start(t, quick())
	addr := strings.TrimPrefix(s.URL(), "http://")
	ask := func(br *bufio.Reader, conn net.Conn, path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("POST", s.URL()+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		require.NoError(t, req.Write(conn))
		resp, err := http.ReadResponse(br, req)
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":3}`},
		{"/v1/completions", `{"prompt":"x","stream":true,"max_tokens":3}`},
	} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		br := bufio.NewReader(conn)
		// An answer that does not stream keeps the connection for the next request.
		resp := ask(br, conn, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":3}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp = ask(br, conn, tc.path, tc.body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.False(t, resp.Close, "%s: the answer does not say the connection closes", tc.path)
		_, err = br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "%s: the connection is closed after the streamed answer", tc.path)
	}
}

// Streamed events have their keys in llama-server's order (build 9749's output), which a
// client reading the bytes instead of decoding them depends on.
func TestStreamKeysInLlamaServersOrder(t *testing.T) {
	s := start(t, quick())
	resp := postJSON(t, s.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":2,"stream_options":{"include_usage":true}}`)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var data []string
	for _, line := range strings.Split(string(body), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
	require.Len(t, data, 6, "role, two pieces, finish, usage, [DONE]")
	assert.True(t, strings.HasPrefix(data[0], `{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":`), data[0])
	assert.True(t, strings.HasPrefix(data[1], `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"`), data[1])
	assert.Regexp(t, `^\{"choices":\[\{"finish_reason":"length","index":0,"delta":\{\}\}\],"created":\d+,"id":"chatcmpl-\w{32}","model":"[^"]*","system_fingerprint":"[^"]*","object":"chat.completion.chunk"\}$`, data[3])
	assert.True(t, strings.HasPrefix(data[4], `{"choices":[],"created":`), data[4])
	assert.Contains(t, data[4], `"object":"chat.completion.chunk","usage":{`)
	assert.Equal(t, "[DONE]", data[5])
}
