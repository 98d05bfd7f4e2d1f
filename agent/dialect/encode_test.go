package dialect

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStalledReaderIsCut: a client that stops reading is cut after the stall timeout, instead
// of holding the handler (and the engine behind it) forever.
func TestStalledReaderIsCut(t *testing.T) {
	errc := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := NewOut(w, 200*time.Millisecond)
		o.Begin("text/event-stream")
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for range 2000 { // 128 MiB: far more than any socket buffers
			if err := o.Send(chunk); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}))
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	_, err = fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: test\r\n\r\n")
	require.NoError(t, err)
	start := time.Now()
	select {
	case err := <-errc:
		require.Error(t, err, "the stalled client was written to without end")
		require.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(20 * time.Second):
		t.Fatal("a client that does not read held the handler")
	}
}
