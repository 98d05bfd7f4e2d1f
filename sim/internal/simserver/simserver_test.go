package simserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/sim/simtext"
)

func TestWithStatsCountsOnlyEngineRequests(t *testing.T) {
	var reqs Requests
	assert.NotNil(t, reqs.Snapshot(), "encodes as {} before any request")
	engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := WithStats(&reqs, func() any { return map[string]any{"requests": reqs.Snapshot()} }, engine)
	do := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}

	assert.Equal(t, http.StatusTeapot, do("GET", "/api/tags").Code)
	assert.Equal(t, http.StatusTeapot, do("POST", "/api/tags").Code)
	assert.Equal(t, http.StatusTeapot, do("POST", "/api/tags").Code)
	assert.Equal(t, http.StatusNotFound, do("GET", "/_sim/other").Code)
	assert.Equal(t, http.StatusMethodNotAllowed, do("POST", "/_sim/stats").Code)

	w := do("GET", "/_sim/stats")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "application/json; charset=utf-8", w.Header().Get("Content-Type"))
	assert.Equal(t, w.Header().Get("Content-Length"), strconv.Itoa(w.Body.Len()))
	var got struct{ Requests map[string]int }
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	assert.Equal(t, map[string]int{"GET /api/tags": 1, "POST /api/tags": 2}, got.Requests)
}

func TestWriteJSONFallsBackWhenEncodingFails(t *testing.T) {
	w := httptest.NewRecorder()
	WriteJSON(w, http.StatusOK, func() {}, `{"error":"encoding failed"}`)
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.JSONEq(t, `{"error":"encoding failed"}`, w.Body.String())
}

func TestAnswer(t *testing.T) {
	n := simtext.AnswerLength(7, "hi")
	require.Greater(t, n, 1)
	whole, why := Answer(7, "hi", -1, 0)
	assert.Equal(t, "stop", why)
	assert.Equal(t, simtext.Generate(7, "hi", n), whole)
	cut, why := Answer(7, "hi", n-1, 0)
	assert.Equal(t, "length", why)
	assert.Equal(t, whole[:n-1], cut)
	same, why := Answer(7, "hi", n, 0)
	assert.Equal(t, "stop", why)
	assert.Equal(t, whole, same)
}

// TestLongerAnswers: with a longest answer above the default's, answers run up to it, and one
// that the default would end keeps its first tokens (the text is one sequence, only its end
// moves).
func TestLongerAnswers(t *testing.T) {
	longest := 0
	for i := range 200 {
		prompt := fmt.Sprint("prompt ", i)
		toks, why := Answer(7, prompt, -1, 400)
		assert.Equal(t, "stop", why)
		require.GreaterOrEqual(t, len(toks), simtext.MinAnswer)
		require.LessOrEqual(t, len(toks), 400)
		short, _ := Answer(7, prompt, -1, 0)
		require.LessOrEqual(t, len(short), simtext.MaxAnswer)
		if len(short) <= len(toks) {
			assert.Equal(t, short, toks[:len(short)])
		}
		longest = max(longest, len(toks))
	}
	assert.Greater(t, longest, 3*simtext.MaxAnswer, "200 prompts give answers far beyond the default's longest")
}

func TestPacerStopsWhenTheClientLeaves(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	due := Pacer{Start: time.Now().Add(-time.Minute), TTFT: time.Second, Rate: 10}
	assert.NoError(t, due.Wait(ctx, 3), "a token already due is sent at once")
	later := Pacer{Start: time.Now(), TTFT: time.Hour}
	cancel()
	assert.ErrorIs(t, later.Wait(ctx, 0), context.Canceled)
	assert.ErrorIs(t, due.Wait(ctx, 0), context.Canceled, "a client that left is noticed even between due tokens")
}

func TestRunServesUntilItsContextEnds(t *testing.T) {
	run := NewRun(Logger(nil))
	handlerCtx := make(chan context.Context, 1)
	srv := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlerCtx <- r.Context()
		io.WriteString(w, "ok")
	}), Logger(nil))
	srv.BaseContext = run.BaseContext
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	run.Serve(srv, ln)
	stop := func() error {
		var err error
		run.End(func() { err = Shutdown(srv) })
		return err
	}
	t.Cleanup(func() { stop() })
	ctx, cancel := context.WithCancel(context.Background())
	run.CloseWhen(ctx, stop)

	resp, err := http.Get("http://" + ln.Addr().String())
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(body))
	reqCtx := <-handlerCtx

	cancel()
	select {
	case <-run.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the run did not end with its context")
	}
	assert.Error(t, reqCtx.Err(), "handlers' context is cancelled when the run ends")
	_, err = http.Get("http://" + ln.Addr().String())
	assert.Error(t, err, "the listener is closed")
	assert.NoError(t, stop(), "a second stop does nothing")
}

// TestShutdownDoesNotWaitForFreshConnections: a connection that never sent a request (a
// client's spare) does not hold a stop up: net/http alone would wait five seconds for it, past
// the grace, and the stop would fail.
func TestShutdownDoesNotWaitForFreshConnections(t *testing.T) {
	srv := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), Logger(nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	// The server has the connection once a request on another one is answered: Serve accepts
	// in order.
	resp, err := http.Get("http://" + ln.Addr().String())
	require.NoError(t, err)
	resp.Body.Close()

	require.NoError(t, Shutdown(srv))
	<-served
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the fresh connection was closed")
}
