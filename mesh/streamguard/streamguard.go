// Package streamguard sits between memberlist and its transport and vets every incoming gossip
// stream before memberlist buffers it: how many streams are open, how large a message each
// claims, and how many unauthenticated bytes are in flight. It also counts the bytes received
// on gossip streams.
package streamguard

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"golang.org/x/sync/semaphore"
)

// memberlist buffers a whole encrypted stream message before it can authenticate it, up to the
// 20 MB the sender's length prefix claims (net.go, decryptRemoteState), and accepts streams
// without limit: 40 connections from a neighbour without the key took an agent from 25 MB to
// 628 MB. The guard sits between memberlist and its transport and reads each incoming stream's
// prefix — the optional label header, the message type, and for an encrypted message the
// length — before memberlist sees the stream. A stream is dropped when more than
// maxGossipStreams are open, when it claims more than maxStreamMessage bytes, or when the bytes
// it claims do not fit in streamBudget (shared by every stream in flight) within
// streamBudgetWait. So whoever sends, memberlist never holds more than about streamBudget of
// unauthenticated bytes (its buffer may grow to twice what it read, plus the plaintext).
//
// The limits are far above what a mesh needs: a push/pull of 100 members with their documents
// is a few hundred kB, and every other stream is a single message of a few kB.
const (
	maxGossipStreams = 64
	maxStreamMessage = 4 << 20
	streamBudget     = 4 << 20
	streamBudgetWait = time.Second
	// streamPrefixWait bounds the wait for a stream's first bytes: memberlist always sends
	// them at once.
	streamPrefixWait = 2 * time.Second
)

// memberlist's wire constants the guard reads (net.go, label.go of v0.7.0): the first byte of
// an encrypted message, and of a label header.
const (
	EncryptMsg  = 10
	HasLabelMsg = 244
)

// Guard wraps a memberlist transport and vets incoming streams (see above).
type Guard struct {
	memberlist.NodeAwareTransport
	streams chan net.Conn
	budget  *semaphore.Weighted
	open    atomic.Int32
	stop    chan struct{}
	once    sync.Once
	onDrop  func(from net.Addr, why string) // counts and logs a refused stream
	read    *atomic.Uint64                  // bytes received on gossip streams, both ways opened
}

// New guards t. onDrop hears of every stream the guard refuses, with why; read counts the bytes
// received on gossip streams, both those t accepted and those memberlist dialled through the
// guard.
func New(t memberlist.NodeAwareTransport, onDrop func(net.Addr, string), read *atomic.Uint64) *Guard {
	g := &Guard{
		NodeAwareTransport: t, streams: make(chan net.Conn), budget: semaphore.NewWeighted(streamBudget),
		stop: make(chan struct{}), onDrop: onDrop, read: read,
	}
	go g.accept()
	return g
}

// NewNetTransport makes the UDP and TCP sockets as memberlist.Create would (including its
// retries while a dynamic port is taken on one protocol), guarded. It sets the bound port in
// c when c asked for any free one. The sockets report their metrics with c's labels.
func NewNetTransport(c *memberlist.Config, onDrop func(net.Addr, string), read *atomic.Uint64) (*Guard, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{c.BindAddr}, BindPort: c.BindPort, Logger: c.Logger, MetricLabels: c.MetricLabels}
	tries := 1
	if c.BindPort == 0 {
		tries = 10
	}
	var nt *memberlist.NetTransport
	var err error
	for range tries {
		if nt, err = memberlist.NewNetTransport(nc); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("could not set up the gossip sockets: %w", err)
	}
	if c.BindPort == 0 {
		c.BindPort = nt.GetAutoBindPort()
		if c.AdvertisePort == 0 {
			c.AdvertisePort = c.BindPort
		}
	}
	return New(nt, onDrop, read), nil
}

func (g *Guard) StreamCh() <-chan net.Conn { return g.streams }

// DialAddressTimeout opens a stream as the transport does, counting what memberlist reads back
// on it (the other side of a push/pull, an ack over TCP).
func (g *Guard) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := g.NodeAwareTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, in: countingReader{r: c, n: g.read}}, nil
}

// Shutdown stops the transport first and only then the guard: the transport's listener
// blocks handing over a connection it accepted until someone takes it, and its Shutdown waits
// for the listener, so the guard must keep taking connections until then.
func (g *Guard) Shutdown() error {
	err := g.NodeAwareTransport.Shutdown()
	g.once.Do(func() { close(g.stop) })
	return err
}

func (g *Guard) accept() {
	in := g.NodeAwareTransport.StreamCh()
	for {
		select {
		case <-g.stop:
			return
		case c := <-in:
			if g.open.Add(1) > maxGossipStreams {
				g.open.Add(-1)
				g.drop(c, "too many gossip streams open")
				continue
			}
			go g.vet(c)
		}
	}
}

// vet reads a stream's prefix and hands it on, or drops it.
func (g *Guard) vet(c net.Conn) {
	release := func() { g.open.Add(-1) }
	_ = c.SetReadDeadline(time.Now().Add(streamPrefixWait))
	in := &countingReader{r: c, n: g.read}
	br := bufio.NewReaderSize(in, 2+255+5) // label header, type, length: never more
	claim, err := claimedSize(br)
	if err != nil {
		release()
		g.drop(c, err.Error())
		return
	}
	if claim > maxStreamMessage {
		release()
		g.drop(c, fmt.Sprintf("stream claims a %d-byte message, at most %d", claim, maxStreamMessage))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), streamBudgetWait)
	err = g.budget.Acquire(ctx, claim)
	cancel()
	if err != nil {
		release()
		g.drop(c, "too many bytes in flight on gossip streams")
		return
	}
	_ = c.SetReadDeadline(time.Time{}) // memberlist sets its own
	gc := &guardedConn{Conn: c, r: io.MultiReader(bytesOf(br), in)}
	gc.release = func() {
		g.budget.Release(claim)
		release()
	}
	select {
	case g.streams <- gc:
	case <-g.stop:
		gc.Close()
	}
}

// claimedSize peeks at a stream's prefix: the size its encrypted message claims, or 0 for a
// stream that is not encrypted (memberlist refuses those before reading more).
func claimedSize(br *bufio.Reader) (int64, error) {
	off := 0
	b, err := br.Peek(1)
	if err != nil {
		return 0, prefixErr(err)
	}
	if b[0] == HasLabelMsg {
		if b, err = br.Peek(2); err != nil {
			return 0, prefixErr(err)
		}
		off = 2 + int(b[1])
	}
	if b, err = br.Peek(off + 1); err != nil {
		return 0, prefixErr(err)
	}
	if b[off] != EncryptMsg {
		return 0, nil
	}
	if b, err = br.Peek(off + 5); err != nil {
		return 0, prefixErr(err)
	}
	return int64(binary.BigEndian.Uint32(b[off+1:])), nil
}

func prefixErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("stream sent no message prefix in time")
	}
	return fmt.Errorf("reading a stream's prefix: %w", err)
}

// bytesOf is what br has buffered, as a reader.
func bytesOf(br *bufio.Reader) io.Reader {
	b, _ := br.Peek(br.Buffered())
	return strings.NewReader(string(b))
}

// drop closes a stream the guard refused, and reports it to be counted with the other junk.
func (g *Guard) drop(c net.Conn, why string) {
	g.onDrop(c.RemoteAddr(), why)
	c.Close()
}

// guardedConn replays the prefix the guard read and gives the stream's budget back on Close.
type guardedConn struct {
	net.Conn
	r       io.Reader
	once    sync.Once
	release func()
}

func (c *guardedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *guardedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// countingReader counts the bytes read through it: what a stream received, junk included.
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// countedConn is a stream we opened, its reads counted.
type countedConn struct {
	net.Conn
	in countingReader
}

func (c *countedConn) Read(p []byte) (int, error) { return c.in.Read(p) }
