package llamaserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/internal/netconn"
)

// engineEnd is the engine's side of a loopback listener: every accepted connection, in order.
type engineEnd struct {
	ln       net.Listener
	accepted chan net.Conn
}

func listenEngine(t *testing.T) *engineEnd {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e := &engineEnd{ln: ln, accepted: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			e.accepted <- c
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return e
}

func (e *engineEnd) next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-e.accepted:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection arrived")
		return nil
	}
}

// same reports whether client and server are the two ends of one connection.
func same(client, server net.Conn) bool {
	return client.LocalAddr().String() == server.RemoteAddr().String()
}

// split takes the next two connections, which arrive in either order: client's own and the
// spare dialed ahead.
func (e *engineEnd) split(t *testing.T, client net.Conn) (own, spare net.Conn) {
	t.Helper()
	for range 2 {
		if c := e.next(t); same(client, c) {
			own = c
		} else {
			spare = c
		}
	}
	require.NotNil(t, own, "the connection reached the engine")
	require.NotNil(t, spare, "a spare was dialed")
	return own, spare
}

// A chat's connection is the one dialed ahead after the previous chat took its own; a spare
// the engine closed is never handed out (a fresh connection is), and an exited engine's spare
// is closed.
func TestDialAhead(t *testing.T) {
	e := listenEngine(t)
	a := newDialAhead(e.ln.Addr().String())
	a.life = time.Hour // expiry is TestDialAheadSpareExpires's
	ctx := context.Background()

	first, err := a.DialContext(ctx, "tcp", a.addr)
	require.NoError(t, err)
	defer first.Close()
	_, spare := e.split(t, first)                                                        // no spare yet: the first is dialed at once, the next ahead
	require.Eventually(t, a.kept, 10*time.Second, time.Millisecond, "the spare is kept") // its dial returned

	second, err := a.DialContext(ctx, "tcp", a.addr)
	require.NoError(t, err)
	defer second.Close()
	assert.True(t, same(second, spare), "the second chat gets the connection dialed ahead")

	// The engine closes the next spare (it stopped, or its keep-alive ran out): a new
	// connection is dialed instead, and it works.
	closed := e.next(t)
	closed.Close()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.spare != nil && !netconn.Quiet(a.spare)
	}, 10*time.Second, time.Millisecond, "the spare is seen closed")
	third, err := a.DialContext(ctx, "tcp", a.addr)
	require.NoError(t, err)
	defer third.Close()
	assert.False(t, same(third, closed), "a spare the engine closed is not handed out")
	fresh, next := e.split(t, third)
	_, err = third.Write([]byte("x"))
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = io.ReadFull(fresh, b)
	require.NoError(t, err)

	// The engine exits: its spare is closed.
	require.Eventually(t, a.kept, 10*time.Second, time.Millisecond, "the next spare is kept")
	a.close()
	next.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = next.Read(b)
	assert.ErrorIs(t, err, io.EOF, "the spare is closed with its engine")
}

// An unused spare is closed after its life, before llama-server's keep-alive would close it,
// and no other connection is dialed while nothing asks.
func TestDialAheadSpareExpires(t *testing.T) {
	e := listenEngine(t)
	a := newDialAhead(e.ln.Addr().String())
	a.life = 50 * time.Millisecond
	c, err := a.DialContext(context.Background(), "tcp", a.addr)
	require.NoError(t, err)
	defer c.Close()
	_, spare := e.split(t, c)
	spare.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = spare.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the unused spare is closed")
	select {
	case <-e.accepted:
		t.Fatal("a connection was dialed while no chat asked for one")
	default:
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	assert.Nil(t, a.spare)
	assert.False(t, a.dialing)
}

// BenchmarkChatRequest is what writing a chat's request costs, as the driver writes it
// (appendRequest into a reused buffer) and as http.Request's Write wrote it before (the
// request built by http.NewRequest with the same headers), into a writer that drops it.
//
//	go test -run '^$' -bench ChatRequest -benchmem ./engines/llamaserver/
func BenchmarkChatRequest(b *testing.B) {
	body := []byte(`{"model":"tiny","messages":[{"role":"user","content":"prompt number 12"}],"stream":true,"max_tokens":1}`)
	b.Run("bytes", func(b *testing.B) {
		b.ReportAllocs()
		var msg []byte
		for b.Loop() {
			msg = appendRequest(msg[:0], "127.0.0.1:34567", "/v1/chat/completions", body)
			io.Discard.Write(msg)
		}
	})
	b.Run("http.Request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:34567/v1/chat/completions", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			req.Header["Content-Type"] = []string{"application/json"}
			req.Header["Accept"] = []string{"text/event-stream"}
			req.Close = true
			if err := req.Write(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkChatFirstPiece is the time from a chat's start to its first piece through the
// driver on the simulator (which closes a connection after a streamed answer, as llama-server
// does), with the connection dialed ahead and with one dialed for each chat (spares never
// kept), alternating chat by chat between two engines of one driver so that a busy machine
// hits both alike.
//
//	go test -run '^$' -bench ChatFirstPiece ./engines/llamaserver/
func BenchmarkChatFirstPiece(b *testing.B) {
	d := newDriver(b, func(c *Config) { c.Env = []string{"LLAMA_SIM_LOAD_DELAY=0s"} })
	model := modelFile(b)
	ahead := engines.Model{ID: "ahead", Name: "tiny", Source: model, Context: 512}
	dial := engines.Model{ID: "dial", Name: "tiny", Source: model, Context: 512}
	for _, m := range []engines.Model{ahead, dial} {
		if _, err := d.Load(b.Context(), m); err != nil {
			b.Fatal(err)
		}
	}
	inst, err := d.instance(dial.ID)
	if err != nil {
		b.Fatal(err)
	}
	inst.ahead.life = 0 // a spare is never young enough: every chat dials its own
	req := engines.ChatRequest{Messages: []engines.Message{{Role: "user", Content: "hi"}}, MaxTokens: 1}
	first := func(m engines.Model) time.Duration {
		start := time.Now()
		var took time.Duration
		if err := d.Chat(b.Context(), m, req, func(c engines.ChatChunk) error {
			if took == 0 && c.Content != "" {
				took = time.Since(start)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		return took
	}
	for range 50 {
		first(ahead)
		first(dial)
	}
	var withAhead, withDial []time.Duration
	for b.Loop() {
		withAhead = append(withAhead, first(ahead))
		withDial = append(withDial, first(dial))
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Nanoseconds()) / 1e3
	}
	b.ReportMetric(median(withAhead), "µs-first-ahead")
	b.ReportMetric(median(withDial), "µs-first-dialed")
}

// kept reports whether a spare is open.
func (a *dialAhead) kept() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spare != nil
}

// answer reads one request on c (its head and a body of Content-Length bytes) and answers it
// with body, closing c after, as llama-server closes a streamed answer's connection; the
// request's body is sent on got. A connection that sends no request is left alone.
func answer(c net.Conn, body string, got chan<- string) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	got <- string(b)
}

// A chat's request as written parses as the HTTP request it says it is: a POST of the body
// to the route, JSON, accepting events, closing the connection after the answer.
func TestRequestAsWritten(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"hi\r\n"}]}`
	msg := appendRequest([]byte("left over"), "127.0.0.1:8080", "/v1/completions", []byte(body))
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(strings.TrimPrefix(string(msg), "left over"))))
	require.NoError(t, err)
	assert.Equal(t, http.MethodPost, req.Method)
	assert.Equal(t, "/v1/completions", req.URL.Path)
	assert.Equal(t, "127.0.0.1:8080", req.Host)
	assert.Equal(t, "application/json", req.Header.Get("Content-Type"))
	assert.Equal(t, "text/event-stream", req.Header.Get("Accept"))
	assert.True(t, req.Close)
	assert.Equal(t, int64(len(body)), req.ContentLength)
	got, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.Equal(t, body, string(got))
}

// afterOneChat is an engine, a dialAhead to it and the connection it dialed ahead (kept as its
// spare) after one chat, answered; got carries the bodies of the requests answer answers. The
// chat goes on a spare dialed before it, so the engine knows which connection it is on.
func afterOneChat(t *testing.T) (e *engineEnd, a *dialAhead, spare net.Conn, got chan string) {
	t.Helper()
	e = listenEngine(t)
	a = newDialAhead(e.ln.Addr().String())
	a.life = time.Hour
	got = make(chan string, 16)
	a.refill()
	first := e.next(t) // the chat's: nothing else was dialed yet
	go answer(first, "data: one", got)
	ctx := context.Background()
	resp, err := a.roundTrip(ctx, "/v1/chat/completions", []byte(`{"n":1}`))
	require.NoError(t, err)
	assert.Equal(t, "data: one", readAll(t, resp))
	assert.Equal(t, `{"n":1}`, <-got)
	spare = e.next(t)
	require.NotEqual(t, first.RemoteAddr().String(), spare.RemoteAddr().String(), "the spare is a connection of its own")
	require.Eventually(t, a.kept, 10*time.Second, time.Millisecond, "the spare is kept")
	return e, a, spare, got
}

// A chat dials the next chat's connection once its first piece is out (the answer's body's
// dialNext), not while its own request is answered; an answer's close dials it when none is
// open (it had no piece, or its spare was taken or expired); and one is dialed at a time.
func TestNextConnectionDialedAfterTheFirstPiece(t *testing.T) {
	e := listenEngine(t)
	a := newDialAhead(e.ln.Addr().String())
	a.life = time.Hour
	got := make(chan string, 16)
	ctx := context.Background()
	dialing := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.dialing || a.spare != nil
	}

	// No spare: the chat dials its own, and nothing else.
	go func() { answer(<-e.accepted, "data: one", got) }()
	resp, err := a.roundTrip(ctx, "/v1/chat/completions", []byte(`{"n":1}`))
	require.NoError(t, err)
	assert.False(t, dialing(), "nothing more is dialed while the chat's answer begins")
	resp.Body.(*connBody).dialNext() // the first piece is out
	spare := e.next(t)
	require.Eventually(t, a.kept, 10*time.Second, time.Millisecond, "the next chat's connection is kept")
	assert.Equal(t, "data: one", readAll(t, resp), "the answer reads on")
	assert.Equal(t, `{"n":1}`, <-got)

	// The next chat goes on it; its answer has no piece, so its close dials the one after.
	go answer(spare, "", got)
	resp, err = a.roundTrip(ctx, "/v1/chat/completions", []byte(`{"n":2}`))
	require.NoError(t, err)
	assert.False(t, dialing(), "nothing more is dialed while the chat's answer begins")
	assert.Equal(t, "", readAll(t, resp))
	assert.Equal(t, `{"n":2}`, <-got)
	third := e.next(t)
	require.Eventually(t, a.kept, 10*time.Second, time.Millisecond, "the close dialed the next")
	a.dialNext()
	a.mu.Lock()
	assert.True(t, same(a.spare, third) && !a.dialing, "one connection is dialed ahead at a time")
	a.mu.Unlock()

	// A third chat goes on it; the spare its first piece dials is taken by another chat before
	// its answer ends, so its close dials the next.
	go answer(third, "data: three", got)
	resp, err = a.roundTrip(ctx, "/v1/chat/completions", []byte(`{"n":3}`))
	require.NoError(t, err)
	resp.Body.(*connBody).dialNext()
	fourth := e.next(t)
	require.Eventually(t, a.kept, 10*time.Second, time.Millisecond, "the next chat's connection is kept")
	other, spare2, err := a.take(ctx)
	require.NoError(t, err)
	defer other.Close()
	assert.True(t, spare2 && same(other, fourth), "another chat took the spare")
	assert.Equal(t, "data: three", readAll(t, resp))
	assert.Equal(t, `{"n":3}`, <-got)
	e.next(t)
	require.Eventually(t, a.kept, 10*time.Second, time.Millisecond, "the close dialed the next")
}

// readAll is an answer's body, read to its end and closed (twice: harmless).
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, resp.Body.Close(), "closing twice is harmless")
	return string(b)
}

// roundTrip sends a chat on a connection of its own and reads its answer in the caller; a
// spare the engine closed after it was found quiet, before any answer, is replaced by a new
// connection once and the request sent again whole.
func TestRoundTripOnItsOwnConnection(t *testing.T) {
	// The spare is the second chat's, and the engine closes it with a reset once the request
	// arrives (as an engine that died would): nothing of an answer came, so the request goes
	// again, on a connection that answers.
	e, a, spare, got := afterOneChat(t)
	ctx := context.Background()
	dropped := make(chan string, 1)
	go func() {
		req, err := http.ReadRequest(bufio.NewReader(spare))
		if err == nil {
			b, _ := io.ReadAll(req.Body)
			dropped <- string(b)
		}
		spare.(*net.TCPConn).SetLinger(0)
		spare.Close()
		for c := range e.accepted { // the new connection, and the next spare
			go answer(c, "data: again", got)
		}
	}()
	resp, err := a.roundTrip(ctx, "/v1/chat/completions", []byte(`{"n":2}`))
	require.NoError(t, err)
	assert.Equal(t, "data: again", readAll(t, resp))
	assert.Equal(t, `{"n":2}`, <-dropped, "the spare got the request")
	assert.Equal(t, `{"n":2}`, <-got, "and it was sent again whole")
}

// A new connection that closes before any answer is an error, not sent again: the request may
// have reached the engine.
func TestRoundTripDoesNotResendOnANewConnection(t *testing.T) {
	e := listenEngine(t)
	a := newDialAhead(e.ln.Addr().String())
	a.close() // no spares: every chat dials its own
	conns := make(chan net.Conn, 16)
	go func() {
		for c := range e.accepted {
			conns <- c
			http.ReadRequest(bufio.NewReader(c))
			c.Close()
		}
	}()
	ctx := context.Background()
	_, err := a.roundTrip(ctx, "/v1/chat/completions", []byte(`{}`))
	require.Error(t, err)
	// Connections are accepted in the order they were dialed: one dialed now arrives after
	// any the round trip made.
	marker, err := net.Dial("tcp", a.addr)
	require.NoError(t, err)
	defer marker.Close()
	n := 0
	for c := range conns {
		if same(marker, c) {
			break
		}
		n++
	}
	assert.Equal(t, 1, n, "the request went on one connection only")
}

// A spare on which an answer had begun when it closed is an error, not sent again: the engine
// had the request.
func TestRoundTripDoesNotResendAfterAnAnswerBegan(t *testing.T) {
	e, a, spare, got := afterOneChat(t)
	ctx := context.Background()
	go func() {
		if _, err := http.ReadRequest(bufio.NewReader(spare)); err == nil {
			spare.Write([]byte("HTTP/1.1 200 O")) // a head cut short
		}
		spare.Close()
		for c := range e.accepted { // any other connection answers: a resend would succeed
			go answer(c, "data: resent", got)
		}
	}()
	_, err := a.roundTrip(ctx, "/v1/chat/completions", []byte(`{"n":2}`))
	require.Error(t, err, "not sent again")
}

// The end of the chat's context ends a round trip waiting on the engine.
func TestRoundTripEndsWithItsContext(t *testing.T) {
	e := listenEngine(t)
	a := newDialAhead(e.ln.Addr().String())
	a.close() // no spare dialed beside the chat's connection: the engine's first is the chat's
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		c := e.next(t)
		http.ReadRequest(bufio.NewReader(c)) // and no answer
		cancel()
	}()
	_, err := a.roundTrip(ctx, "/v1/chat/completions", []byte(`{}`))
	assert.ErrorIs(t, err, context.Canceled)
}
