package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/internal/netnslab"
)

// TestMain runs the delay line itself when the test re-executes its own binary in the hub.
func TestMain(m *testing.M) {
	if os.Getenv("DELAYLINE_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestDelayLine puts a delay line on host 2's cable of a two-host LAN: no round trip between
// the hosts is shorter than the delay both ways, and a bulk TCP transfer (segments of up to
// 64 KB, the veths' offload) arrives whole and unchanged.
func TestDelayLine(t *testing.T) {
	l := netnslab.New(t, 2)
	hub := l.NS(0)
	for _, args := range [][]string{
		{"-n", hub, "link", "add", "dev", "line", "type", "veth", "peer", "name", "bridged"},
		{"-n", hub, "link", "set", "bridged", "master", "br0", "up"},
		{"-n", hub, "link", "set", "line", "up"},
		{"-n", hub, "link", "set", "h2", "nomaster"},
	} {
		if out, err := l.Command(0, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	const delay = 2 * time.Millisecond
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := l.Start(0, []string{"DELAYLINE_MAIN=1"}, exe, "-a", "h2", "-b", "line", "-delay", delay.String())

	ln := l.Listen(2)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var c net.Conn
	for c == nil { // until the line is up (the first SYN may be lost while it starts)
		select {
		case <-p.Done():
			t.Fatalf("the delay line exited:\n%s", p.Out.String())
		default:
		}
		if c, err = l.Dial(1)(ctx, "tcp", ln.Addr().String()); err != nil && ctx.Err() != nil {
			t.Fatalf("dialling host 2 through the line: %v\n%s", err, p.Out.String())
		}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a line that drops frames stalls TCP

	one := make([]byte, 1)
	for i := range 10 {
		start := time.Now()
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, one); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 2*delay || one[0] != byte(i) {
			t.Fatalf("round trip %d: %v, byte %d: want at least %v, byte %d", i, rtt, one[0], 2*delay, i)
		}
	}

	want := make([]byte, 8<<20)
	rand.Read(want)
	go func() { c.Write(want) }()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading back %d bytes: %v\n%s", len(want), err, p.Out.String())
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes that came back through the line differ from those sent")
	}
}
