package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/internal/seal"
)

// BenchmarkSplitTunnel is one RPC exchange of llama.cpp's pattern (a command byte, its size
// and its payload, each its own send as ggml-rpc does; an answer of a size and a payload)
// through a split's tunnel (the main's loopback end, the sealed Upgrade, the member's relay to
// the part's loopback port), beside the same exchange straight over loopback TCP, through two
// plain io.Copy relays, and through two relays speaking TLS 1.3 to each other with the mesh's
// identities: what the tunnel costs a round trip beyond any two relays, of which a token takes
// one.
func BenchmarkSplitTunnel(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		echo := rpcEcho(b)
		direct := echo.Addr().String()
		b.Run("direct/"+sizeName(size), func(b *testing.B) { exchanges(b, direct, size) })
		plain := relay(b, func() (net.Conn, error) { return net.Dial("tcp", relay(b, dialer(direct), nil)) }, nil)
		b.Run("plain-relays/"+sizeName(size), func(b *testing.B) { exchanges(b, plain, size) })
		ca, err := seal.NewCA("bench", make([]byte, 32))
		if err != nil {
			b.Fatal(err)
		}
		far, near := sealIdentity(b, ca, "far", seal.RoleAgent), sealIdentity(b, ca, "near", seal.RoleAgent)
		farEnd := relay(b, dialer(direct), func(c net.Conn) net.Conn { return tls.Server(c, far.ServerConfig()) })
		sealed := relay(b, func() (net.Conn, error) {
			return tls.Dial("tcp", farEnd, near.ClientConfig(seal.PeerNamed("far", hex.EncodeToString(far.KeyID()))))
		}, nil)
		b.Run("tls-relays/"+sizeName(size), func(b *testing.B) { exchanges(b, sealed, size) })
		tunnelled, _ := splitTunnelTo(b, direct, func() api.Liveness { return api.Alive })
		b.Run("tunnel/"+sizeName(size), func(b *testing.B) { exchanges(b, tunnelled, size) })
	}
}

// relay listens on loopback and pipes each connection, wrapped by wrap when it is not nil, to
// a connection dial opens; it returns its address.
func relay(tb testing.TB, dial func() (net.Conn, error), wrap func(net.Conn) net.Conn) string {
	return serveLoopback(tb, func(c net.Conn) {
		if wrap != nil {
			c = wrap(c)
		}
		up, err := dial()
		if err != nil {
			c.Close()
			return
		}
		pipe(c, up)
	}).Addr().String()
}

// serveLoopback listens on loopback and serves each connection with handle, in a goroutine of
// its own, until the test ends.
func serveLoopback(tb testing.TB, handle func(net.Conn)) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln
}

func dialer(addr string) func() (net.Conn, error) {
	return func() (net.Conn, error) { return net.Dial("tcp", addr) }
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// exchanges runs b.N exchanges of size bytes each way on one connection to addr.
func exchanges(b *testing.B, addr string, size int) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	payload := make([]byte, size)
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	for range b.N {
		if err := exchange(c, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// exchange sends payload as an RPC command and reads the answer into it.
func exchange(c net.Conn, payload []byte) error {
	var head [8]byte
	binary.LittleEndian.PutUint64(head[:], uint64(len(payload)))
	for _, part := range [][]byte{{1}, head[:], payload} {
		if _, err := c.Write(part); err != nil {
			return err
		}
	}
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return err
	}
	if n := binary.LittleEndian.Uint64(head[:]); n != uint64(len(payload)) {
		return fmt.Errorf("an answer of %d bytes to %d", n, len(payload))
	}
	_, err := io.ReadFull(c, payload)
	return err
}

// rpcEcho answers each command with a payload of its own size, as an rpc-server would.
func rpcEcho(tb testing.TB) net.Listener {
	return serveLoopback(tb, func(c net.Conn) {
		defer c.Close()
		var cmd [9]byte
		buf := make([]byte, 1<<20)
		for {
			if _, err := io.ReadFull(c, cmd[:]); err != nil {
				return
			}
			if cmd[0] == 0 { // the test's way to make the rpc-server go away
				return
			}
			n := binary.LittleEndian.Uint64(cmd[1:])
			if _, err := io.ReadFull(c, buf[:n]); err != nil {
				return
			}
			if _, err := c.Write(cmd[1:]); err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	})
}

// splitTunnelTo is the loopback end of a main's tunnel to a member whose ready part's
// rpc-server is at part, and the main: two agents on loopback, over the sealed channel; the
// main's view shows the member as live says (not at all when it says "").
func splitTunnelTo(tb testing.TB, part string, live func() api.Liveness) (string, *Agent) {
	member := newBareAgent(tb, "container-2g", nil)
	ms := serve(tb, member, nil)
	ca, err := seal.NewCA("bench", ms.secret)
	if err != nil {
		tb.Fatal(err)
	}
	mid := sealIdentity(tb, ca, member.Name(), seal.RoleAgent)
	addr := sealedServe(tb, ms.srv, mid)
	ctx, cancel := context.WithCancel(context.Background())
	member.mu.Lock()
	member.placements["part-1"] = &placement{p: api.Placement{ID: "part-1", State: api.StateReady, Engine: part, Part: &api.SplitPart{Parent: "p-1"}},
		ctx: ctx, cancel: cancel}
	member.mu.Unlock()

	main := newBareAgent(tb, "x86-nvidia", nil)
	main.JoinMesh(func() api.MeshView {
		if live() == "" {
			return api.MeshView{}
		}
		return api.MeshView{Members: []api.Member{{Name: member.Name(), Role: api.RoleAgent, Liveness: live(),
			Host: &api.Host{Name: member.Name(), APIAddr: addr}, SealKey: hex.EncodeToString(mid.KeyID())}}}
	}, sealIdentity(tb, ca, "main", seal.RoleAgent))
	plan := &api.SplitPlan{Layers: 8, Members: []api.SplitMember{{Host: main.Name(), Main: true}, {Host: member.Name(), Part: "part-1", Layers: 8}}}
	main.mu.Lock()
	main.placements["p-1"] = &placement{p: api.Placement{ID: "p-1", Split: plan}}
	main.mu.Unlock()
	end, err := main.tunnels.open(main, "p-1", api.SplitMember{Host: member.Name(), Part: "part-1"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(main.tunnels.closeAll)
	return end, main
}

// A member only suspect keeps its share: the main's health check passes and its channel still
// carries RPC; one dead, left or gone from the mesh is lost, by name.
func TestSplitSuspectMemberIsNotLost(t *testing.T) {
	var mu sync.Mutex
	liveness := api.Suspect
	end, main := splitTunnelTo(t, rpcEcho(t).Addr().String(), func() api.Liveness {
		mu.Lock()
		defer mu.Unlock()
		return liveness
	})
	host, err := main.splitMemberLost("p-1")
	require.NoError(t, err, "a suspect member is not lost")
	assert.Empty(t, host)
	c, err := net.Dial("tcp", end)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, exchange(c, make([]byte, 64)), "the channel to a suspect member carries RPC")

	for _, l := range []api.Liveness{api.Dead, api.Left, ""} {
		mu.Lock()
		liveness = l
		mu.Unlock()
		host, err := main.splitMemberLost("p-1")
		require.Error(t, err, "liveness %q", l)
		assert.Equal(t, main.placements["p-1"].p.Split.Members[1].Host, host)
		assert.Equal(t, api.CodeUnreachable, codeOfErr(err))
		assert.ErrorContains(t, err, "split member lost")
		assert.ErrorContains(t, err, "host "+main.placements["p-1"].p.Split.Members[1].Host+" is "+cmp.Or(string(l), "not in the mesh"))
	}
}

// An answer that breaks off because a member's channel broke names the split and the member;
// llama-server closing its own end (an unload) does not count as a loss.
func TestSplitLostMemberIsNamed(t *testing.T) {
	end, main := splitTunnelTo(t, rpcEcho(t).Addr().String(), func() api.Liveness { return api.Alive })
	member := main.placements["p-1"].p.Split.Members[1].Host
	tiny := engines.Model{ID: "p-1", Name: "tiny"}
	broken := &engines.Error{Code: api.CodeEngineError, Err: errors.New("llama-server: the answer broke off: unexpected EOF")}
	idle := func() bool {
		main.tunnels.mu.Lock()
		defer main.tunnels.mu.Unlock()
		t := main.tunnels.by["p-1"][0]
		t.mu.Lock()
		defer t.mu.Unlock()
		return len(t.conns) == 0
	}

	c, err := net.Dial("tcp", end)
	require.NoError(t, err)
	require.NoError(t, exchange(c, make([]byte, 64)))
	c.Close()
	waitFor(t, idle, "the relay to end")
	assert.Equal(t, broken, main.splitLoss(tiny, broken), "no member lost: the error as it is")

	c, err = net.Dial("tcp", end)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, exchange(c, make([]byte, 64)))
	_, err = c.Write([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0}) // the member's rpc-server goes away
	require.NoError(t, err)
	waitFor(t, idle, "the relay to end")
	err = main.splitLoss(tiny, broken)
	var ee *engines.Error
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, api.CodeEngineError, ee.Code)
	assert.EqualError(t, err, "EngineError: split tiny lost member "+member+": llama-server: the answer broke off: unexpected EOF")

	main.tunnels.running("p-1")
	assert.Equal(t, broken, main.splitLoss(tiny, broken), "the split runs again: nothing lost")
}
