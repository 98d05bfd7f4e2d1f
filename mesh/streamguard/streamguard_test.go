package streamguard

import (
	"encoding/binary"
	"io"
	"log"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

// guarded starts a guarded transport on a free loopback port; drops receives why each stream
// was refused.
func guarded(t *testing.T) (g *Guard, addr string, drops chan string, read *atomic.Uint64) {
	c := memberlist.DefaultLANConfig()
	c.BindAddr, c.BindPort = "127.0.0.1", 0
	c.Logger = log.New(io.Discard, "", 0)
	drops = make(chan string, 16)
	read = new(atomic.Uint64)
	g, err := NewNetTransport(c, func(_ net.Addr, why string) { drops <- why }, read)
	require.NoError(t, err)
	t.Cleanup(func() { g.Shutdown() })
	require.NotZero(t, c.BindPort, "the bound port is set in the config")
	return g, net.JoinHostPort("127.0.0.1", strconv.Itoa(c.BindPort)), drops, read
}

func send(t *testing.T, addr string, b []byte) net.Conn {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.Write(b)
	require.NoError(t, err)
	return c
}

// TestStreamPrefixIsReplayed: a stream the guard lets through reaches memberlist whole, the
// prefix it read included, and its bytes are counted.
func TestStreamPrefixIsReplayed(t *testing.T) {
	g, addr, drops, read := guarded(t)
	label := []byte{HasLabelMsg, 3, 'a', 'b', 'c'}
	msg := append(append(label, EncryptMsg), binary.BigEndian.AppendUint32(nil, 4)...)
	msg = append(msg, "seal"...)
	send(t, addr, msg)
	var in net.Conn
	select {
	case in = <-g.StreamCh():
	case why := <-drops:
		t.Fatalf("dropped: %s", why)
	case <-time.After(10 * time.Second):
		t.Fatal("no stream handed on")
	}
	defer in.Close()
	got := make([]byte, len(msg))
	_, err := io.ReadFull(in, got)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	require.Equal(t, uint64(len(msg)), read.Load())
}

// TestOversizedClaimIsDropped: a stream claiming a message larger than memberlist should buffer
// unauthenticated is closed before memberlist sees it.
func TestOversizedClaimIsDropped(t *testing.T) {
	g, addr, drops, _ := guarded(t)
	c := send(t, addr, binary.BigEndian.AppendUint32([]byte{EncryptMsg}, maxStreamMessage+1))
	select {
	case why := <-drops:
		require.Contains(t, why, "claims a 4194305-byte message")
	case <-g.StreamCh():
		t.Fatal("an oversized stream was handed on")
	case <-time.After(10 * time.Second):
		t.Fatal("the oversized stream was neither dropped nor handed on")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the guard closed the stream")
}
