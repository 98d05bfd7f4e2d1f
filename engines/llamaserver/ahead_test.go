package llamaserver

import (
	"context"
	"io"
	"net"
	"slices"
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
	_, spare := e.split(t, first) // no spare yet: the first is dialed at once, the next ahead
	kept := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.spare != nil
	}
	require.Eventually(t, kept, 10*time.Second, time.Millisecond, "the spare is kept") // its dial returned

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
	require.Eventually(t, kept, 10*time.Second, time.Millisecond, "the next spare is kept")
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
