package memnet

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

func TestPacketsAndStreams(t *testing.T) {
	var n Network
	a, b := n.NewTransport(), n.NewTransport()
	require.NotEqual(t, a.Addr(), b.Addr())

	_, err := a.WriteToAddress([]byte("hello"), memberlist.Address{Addr: b.Addr(), Name: "ignored"})
	require.NoError(t, err)
	p := <-b.PacketCh()
	require.Equal(t, "hello", string(p.Buf))
	require.Equal(t, a.Addr(), p.From.String())

	echoed := make(chan struct{})
	go func() {
		defer close(echoed)
		c := <-b.StreamCh()
		require.Equal(t, a.Addr(), c.RemoteAddr().String())
		io.Copy(c, c) // echo
		c.Close()
	}()
	c, err := a.DialTimeout(b.Addr(), time.Second)
	require.NoError(t, err)
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf))
	c.Close()
	<-echoed
	require.Equal(t, uint64(5+4), a.BytesSent())
	require.Equal(t, uint64(4), b.BytesSent())
	require.Equal(t, uint64(13), n.BytesSent())
}

func TestStoppedMemberDropsAndRefuses(t *testing.T) {
	var n Network
	a, b := n.NewTransport(), n.NewTransport()
	require.NoError(t, b.Shutdown())
	for range packetQueue + 10 { // never blocks, even past the queue size
		_, err := a.WriteTo([]byte("x"), b.Addr())
		require.NoError(t, err)
	}
	_, err := a.DialTimeout(b.Addr(), time.Second)
	require.ErrorContains(t, err, "connection refused")
	_, err = a.DialTimeout("127.0.0.1:9", time.Second)
	require.ErrorContains(t, err, "connection refused")
}

func TestDialTimesOutWhenNobodyAccepts(t *testing.T) {
	var n Network
	a, b := n.NewTransport(), n.NewTransport()
	_, err := a.DialTimeout(b.Addr(), 20*time.Millisecond)
	require.ErrorContains(t, err, "i/o timeout")
}

func TestDropPacketsKeepsStreams(t *testing.T) {
	var n Network
	a, b := n.NewTransport(), n.NewTransport()
	b.DropPackets(true)
	_, err := a.WriteTo([]byte("x"), b.Addr())
	require.NoError(t, err)
	select {
	case <-b.PacketCh():
		t.Fatal("a dropped packet arrived")
	default:
	}
	go func() { c := <-b.StreamCh(); c.Close() }()
	c, err := a.DialTimeout(b.Addr(), time.Second)
	require.NoError(t, err)
	c.Close()
}
