package engines

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// closingServer answers the first request on each connection and keeps it open, then reads the
// next request on it and closes without an answer — what a keep-alive limit looks like from the
// client, which has already reused the connection.
func closingServer(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for served := 0; ; served++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if served > 0 {
						return // the second request on this connection: closed, unanswered
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &conns
}

func post(t *testing.T, c *http.Client, url string, replayable bool) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(`{"model":"x"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if replayable {
		Replayable(req)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

func TestReplayableSurvivesAClosedKeepAlive(t *testing.T) {
	url, conns := closingServer(t)
	c := &http.Client{Transport: &http.Transport{}}
	if err := post(t, c, url, true); err != nil {
		t.Fatal(err)
	}
	if err := post(t, c, url, true); err != nil {
		t.Fatalf("a replayable request on a connection the engine closed: %v", err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("connections: %d, want 2 (the second request sent again on a new one)", n)
	}

	// Without the mark, Go's transport gives up: the failure the mark prevents.
	url, _ = closingServer(t)
	c = &http.Client{Transport: &http.Transport{}}
	if err := post(t, c, url, false); err != nil {
		t.Fatal(err)
	}
	if err := post(t, c, url, false); err == nil {
		t.Fatal("an unmarked POST was retried: the test no longer shows the failure")
	}
}
