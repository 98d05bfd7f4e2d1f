package agent

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
)

// BenchmarkSplitTunnel is one RPC exchange of llama.cpp's pattern (a command byte, its size
// and its payload, each its own send as ggml-rpc does; an answer of a size and a payload)
// through a split's tunnel (the main's loopback end, the sealed Upgrade, the member's relay to
// the part's loopback port) beside the same exchange straight over loopback TCP: the relays'
// cost a round trip, of which a token takes several.
func BenchmarkSplitTunnel(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		echo := rpcEcho(b)
		direct := echo.Addr().String()
		b.Run("direct/"+sizeName(size), func(b *testing.B) { exchanges(b, direct, size) })
		tunnelled := splitTunnelTo(b, direct)
		b.Run("tunnel/"+sizeName(size), func(b *testing.B) { exchanges(b, tunnelled, size) })
	}
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
	var head [8]byte
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	for range b.N {
		binary.LittleEndian.PutUint64(head[:], uint64(size))
		for _, part := range [][]byte{{1}, head[:], payload} {
			if _, err := c.Write(part); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := io.ReadFull(c, head[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, payload[:binary.LittleEndian.Uint64(head[:])]); err != nil {
			b.Fatal(err)
		}
	}
}

// rpcEcho answers each command with a payload of its own size, as an rpc-server would.
func rpcEcho(b *testing.B) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var cmd [9]byte
				buf := make([]byte, 1<<20)
				for {
					if _, err := io.ReadFull(c, cmd[:]); err != nil {
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
			}()
		}
	}()
	return ln
}

// splitTunnelTo is the loopback end of a main's tunnel to a member whose ready part's
// rpc-server is at part: two agents on loopback, over the sealed channel.
func splitTunnelTo(b *testing.B, part string) string {
	member := newBareAgent(b, "container-2g", nil)
	ms := serve(b, member, nil)
	ca, err := seal.NewCA("bench", ms.secret)
	if err != nil {
		b.Fatal(err)
	}
	mid := sealIdentity(b, ca, member.Name(), seal.RoleAgent)
	addr := sealedServe(b, ms.srv, mid)
	ctx, cancel := context.WithCancel(context.Background())
	member.mu.Lock()
	member.placements["part-1"] = &placement{p: api.Placement{ID: "part-1", State: api.StateReady, Engine: part, Part: &api.SplitPart{Parent: "p-1"}},
		ctx: ctx, cancel: cancel}
	member.mu.Unlock()

	main := newBareAgent(b, "x86-nvidia", nil)
	id := sealIdentity(b, ca, "main", seal.RoleAgent)
	main.JoinMesh(func() api.MeshView {
		return api.MeshView{Members: []api.Member{{Name: member.Name(), Role: api.RoleAgent, Liveness: api.Alive,
			Host: &api.Host{Name: member.Name(), APIAddr: addr}, SealKey: hex.EncodeToString(mid.KeyID())}}}
	}, id)
	end, err := main.tunnels.open(main, "p-1", api.SplitMember{Host: member.Name(), Part: "part-1"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(main.tunnels.closeAll)
	return end
}
