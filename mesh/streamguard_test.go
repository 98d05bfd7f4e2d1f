package mesh

import (
	"encoding/binary"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/streamguard"
)

// liveHeap is the heap still in use after two full collections: what is allocated while a
// collection marks survives it, so a buffer grown meanwhile leaves every smaller slice it
// outgrew counted as live; the second collection frees those.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestGossipStreamsCannotBalloonMemory: a neighbour without the key opens many gossip
// streams, each claiming a large encrypted message and sending all of it but the last byte.
// memberlist would buffer every one before it can authenticate it; the guard keeps what the
// agent holds within a few MB, and the mesh keeps working.
func TestGossipStreamsCannotBalloonMemory(t *testing.T) {
	a := startReal(t, "a", api.RoleAgent)
	b := startReal(t, "b", api.RoleAgent, a.GossipAddr())
	waitFor(t, 10*time.Second, []*Mesh{a, b}, "formed", allAlive("a", "b"))
	before := liveHeap()
	received := a.stats.tcpReceived.Load()

	label := a.mlc.Label
	junk := make([]byte, 64<<10)
	release := make(chan struct{})
	var sent sync.WaitGroup
	var hold sync.WaitGroup
	const streams = 16
	for i := range streams {
		claim := 3 << 20 // within the per-message limit: only the shared budget stops these
		if i%2 == 1 {
			claim = 8 << 20
		}
		c, err := net.Dial("tcp", a.GossipAddr())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		sent.Add(1)
		hold.Add(1)
		go func() {
			defer hold.Done()
			hdr := append([]byte{streamguard.HasLabelMsg, byte(len(label))}, label...)
			hdr = append(hdr, streamguard.EncryptMsg)
			hdr = binary.BigEndian.AppendUint32(hdr, uint32(claim))
			_, err := c.Write(hdr)
			for left := claim - 1; err == nil && left > 0; left -= len(junk) {
				_, err = c.Write(junk[:min(len(junk), left)])
			}
			sent.Done()
			<-release // hold the stream open, one byte short
		}()
	}
	sent.Wait()
	// The senders are done once their bytes are in the kernel's socket buffers (3 MB fit on
	// loopback), which can be long before memberlist has read the one stream the budget let
	// through: read the heap only once it has, but for the last byte, so its buffer no longer
	// grows. Measured while it still grew, the heap read 16 MB in two runs under load (one
	// test 0.23 s long), where 5–8 MB is what the guard lets memberlist hold.
	require.Eventually(t, func() bool { return a.stats.tcpReceived.Load()-received >= 3<<20-1 },
		10*time.Second, 5*time.Millisecond, "the admitted stream was never read")
	during := liveHeap()
	close(release)
	hold.Wait()
	grew := int64(during) - int64(before)
	t.Logf("live heap %d MB before, %d MB with %d streams open", before>>20, during>>20, streams)
	require.Less(t, grew, int64(16<<20), "unauthenticated streams grew the heap by %d MB", grew>>20)

	require.NoError(t, b.SetLocal(hostOf(1<<30), []api.Placement{placement("p1", "after", api.StateReady)}))
	c := startReal(t, "c", api.RoleAgent, a.GossipAddr())
	waitFor(t, 10*time.Second, []*Mesh{a, c}, "the mesh still works", func(v View) bool {
		mb, ok := v.Member("b")
		return ok && len(mb.Placements) == 1 && allAlive("a", "b", "c")(v)
	})
}

// TestShutdownUnderAStreamFlood: a member shuts down while connections keep arriving on its
// gossip port. The transport's listener blocks handing over each connection it accepted, and
// its shutdown waits for the listener: the guard must keep taking them until the end, or the
// shutdown never returns.
func TestShutdownUnderAStreamFlood(t *testing.T) {
	for range 20 {
		m := startReal(t, "m", api.RoleConsole)
		addr := m.GossipAddr()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if c, err := net.Dial("tcp", addr); err == nil {
						c.Close()
					}
				}
			}()
		}
		done := make(chan error, 1)
		go func() { done <- m.Shutdown() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("shutdown hangs under a flood of connections")
		}
		close(stop)
		wg.Wait()
	}
}
