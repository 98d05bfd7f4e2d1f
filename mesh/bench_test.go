package mesh

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// Benchmarks of the mesh on memnet (in-process, no sockets) with the "lan" profile's timings:
// memberlist.DefaultLANConfig (gossip every 200 ms to 3 members, probe every 1 s, push/pull
// every 30 s). Each reports its figures as custom metrics beside the theory they are checked
// against; run them once with
//
//	go test -run '^$' -bench . -benchtime 1x ./mesh/

// benchMesh forms a mesh of n members on the lan profile: n-1 agents, each with a state
// document of two placements, and one console (the last member).
func benchMesh(b *testing.B, n int) (*cluster, []*Mesh) {
	b.Helper()
	c := newCluster(b)
	c.profile = ProfileLAN
	ms := make([]*Mesh, 0, n)
	for i := range n {
		role := api.RoleAgent
		if i == n-1 {
			role = api.RoleConsole
		}
		ms = append(ms, c.add(fmt.Sprintf("node-%03d", i), role))
	}
	for i, m := range ms[:n-1] {
		ps := []api.Placement{
			placement(fmt.Sprintf("p%03d-a", i), "qwen2:1.5b", api.StateReady),
			placement(fmt.Sprintf("p%03d-b", i), "llama3.2:3b", api.StateReady),
		}
		require.NoError(b, m.SetLocal(hostOf(1<<30), ps))
	}
	require.Eventually(b, func() bool {
		for _, m := range ms {
			if m.Members() != n || docsHeld(m) != n-1 {
				return false
			}
		}
		return true
	}, 2*time.Minute, 50*time.Millisecond, "mesh of %d did not form", n)
	// Let the formation's gossip (n alive messages and documents, each retransmitted
	// 4·log10(n+1) times by every member; ~10 s at 50 members) drain, so the measurement sees
	// a mesh at rest.
	require.Eventually(b, func() bool {
		for _, m := range ms {
			if m.queue.NumQueued() > 0 {
				return false
			}
		}
		return true
	}, 5*time.Minute, 100*time.Millisecond)
	time.Sleep(2 * time.Second) // memberlist's own queue (alive messages) drains alike
	return c, ms
}

func docsHeld(m *Mesh) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.docs)
}

// arrival records, per member, when its view first satisfies cond.
type arrival struct {
	mu    sync.Mutex
	times map[string]time.Time
}

func watchAll(b *testing.B, ms []*Mesh, cond func(View) bool) (*arrival, func()) {
	a := &arrival{times: map[string]time.Time{}}
	var cancels []func()
	var wg sync.WaitGroup
	for _, m := range ms {
		ch, cancel := m.Subscribe()
		cancels = append(cancels, cancel)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range ch {
				if cond(v) {
					a.mu.Lock()
					if _, ok := a.times[v.Self]; !ok {
						a.times[v.Self] = time.Now()
					}
					a.mu.Unlock()
				}
			}
		}()
	}
	return a, func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	}
}

func (a *arrival) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.times)
}

// since returns, sorted, how long after start each member saw it.
func (a *arrival) since(start time.Time) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []time.Duration
	for _, t := range a.times {
		out = append(out, t.Sub(start))
	}
	slices.Sort(out)
	return out
}

func (a *arrival) of(name string, start time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.times[name].Sub(start)
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// benchConvergence: time for a capacity change of one agent to reach every member's View.
// Theory (SWIM/serf epidemic model, fan-out 3, 200 ms rounds): ~log(n)/log(4) rounds plus a
// round or two of tail — ~1.5 s for 99.9 % of 100 members. Target: every member within 1.5 s
// at 100; the console, told directly over TCP, within 0.3 s.
func benchConvergence(b *testing.B, n int) {
	_, ms := benchMesh(b, n)
	src, console := ms[0], ms[n-1]
	var worst, p50, consoleT time.Duration
	b.ResetTimer()
	for i := range b.N {
		want := int64(2+i) << 30
		a, stop := watchAll(b, ms, func(v View) bool {
			mb, ok := v.Member(src.LocalNode())
			return ok && mb.Host != nil && mb.Host.Memory.Committed == want
		})
		start := time.Now()
		require.NoError(b, src.SetLocal(hostOf(want), nil))
		require.Eventually(b, func() bool { return a.count() == n }, time.Minute, time.Millisecond)
		ds := a.since(start)
		worst += ds[len(ds)-1]
		p50 += quantile(ds, 0.5)
		consoleT += a.of(console.LocalNode(), start)
		stop()
		b.StopTimer()
		time.Sleep(2 * time.Second) // back to rest
		b.StartTimer()
	}
	b.StopTimer()
	N := float64(b.N)
	b.ReportMetric(worst.Seconds()/N, "s/all-members")
	b.ReportMetric(p50.Seconds()/N, "s/median-member")
	b.ReportMetric(consoleT.Seconds()/N, "s/console")
	b.ReportMetric(float64(n), "members")
}

func BenchmarkConvergence10(b *testing.B)  { benchConvergence(b, 10) }
func BenchmarkConvergence50(b *testing.B)  { benchConvergence(b, 50) }
func BenchmarkConvergence100(b *testing.B) { benchConvergence(b, 100) }

// BenchmarkDeadDetection10: a hard-stopped member (no leave) at 10 members. Theory, from
// memberlist's LAN defaults: a probe round finds it within ~1 s (each of 9 members probes one
// member per second), the probe times out after 0.5 s plus indirect probes, then the suspicion
// timeout is SuspicionMult·max(1, log10(n))·ProbeInterval = 4·1·1 s = 4 s (shortened toward it
// by peer confirmations, from a 24 s maximum): suspect at ~1–2 s, dead at ~5–7 s.
// Targets: suspect everywhere within 2 s, dead everywhere within 5 s.
func BenchmarkDeadDetection10(b *testing.B) {
	const n = 10
	_, ms := benchMesh(b, n)
	var suspectAll, deadAll, suspectFirst time.Duration
	b.ResetTimer()
	for i := range b.N {
		victim := ms[i%(n-1)]
		var watchers []*Mesh
		for _, m := range ms {
			if m != victim && !isDown(m) {
				watchers = append(watchers, m)
			}
		}
		name := victim.LocalNode()
		sus, stopS := watchAll(b, watchers, func(v View) bool {
			l := liveness(v, name)
			return l == api.Suspect || l == api.Dead
		})
		dead, stopD := watchAll(b, watchers, func(v View) bool { return liveness(v, name) == api.Dead })
		start := time.Now()
		require.NoError(b, victim.Shutdown())
		require.Eventually(b, func() bool { return dead.count() == len(watchers) }, time.Minute, time.Millisecond)
		ds := sus.since(start)
		suspectFirst += ds[0]
		suspectAll += ds[len(ds)-1]
		dd := dead.since(start)
		deadAll += dd[len(dd)-1]
		stopS()
		stopD()
	}
	b.StopTimer()
	N := float64(b.N)
	b.ReportMetric(suspectFirst.Seconds()/N, "s/suspect-first")
	b.ReportMetric(suspectAll.Seconds()/N, "s/suspect-all")
	b.ReportMetric(deadAll.Seconds()/N, "s/dead-all")
}

func isDown(m *Mesh) bool {
	select {
	case <-m.Done():
		return true
	default:
		return false
	}
}

// BenchmarkGracefulLeave10: a member that leaves (Close) at 10 members. Theory: the leave
// notice and memberlist's leave message are gossiped like any broadcast, ~log4(10) ≈ 2 rounds
// of 200 ms, plus the 600 ms head start the notice gets: ~1 s.
func BenchmarkGracefulLeave10(b *testing.B) {
	const n = 10
	_, ms := benchMesh(b, n)
	var leftAll time.Duration
	b.ResetTimer()
	for i := range b.N {
		leaver := ms[i%(n-1)]
		var watchers []*Mesh
		for _, m := range ms {
			if m != leaver && !isDown(m) {
				watchers = append(watchers, m)
			}
		}
		name := leaver.LocalNode()
		left, stop := watchAll(b, watchers, func(v View) bool { return liveness(v, name) == api.Left })
		start := time.Now()
		require.NoError(b, leaver.Close(b.Context()))
		require.Eventually(b, func() bool { return left.count() == len(watchers) }, time.Minute, time.Millisecond)
		ds := left.since(start)
		leftAll += ds[len(ds)-1]
		stop()
	}
	b.StopTimer()
	b.ReportMetric(leftAll.Seconds()/float64(b.N), "s/left-all")
}

// benchGossipAtRest: bytes sent per member per second by a mesh at rest (nothing changes),
// over a window covering a push/pull interval. Theory: each member probes one member per
// second (ping and ack, ~120 B each encrypted, plus the 5-byte label header) ≈ 0.25 kB/s; each
// push/pull (every 30 s, one initiated and on average one answered per member) carries the
// member list (~100 B metadata + ~50 B per member) and every state document (~400 B each,
// compressed) both ways. Gossip rounds send nothing when no broadcast is queued.
// Target: at most 1 kB/s per member.
func benchGossipAtRest(b *testing.B, n int) {
	c, _ := benchMesh(b, n)
	// One push/pull interval as memberlist scales it: 30 s up to 32 members, then ×(⌈log2(n/32)⌉+1).
	window := 30*time.Second*time.Duration(max(1, int(math.Ceil(math.Log2(float64(n)/32)))+1)) + time.Second
	var perMember, tcp float64
	b.ResetTimer()
	for range b.N {
		before, beforeTCP := c.net.BytesSent(), c.net.StreamBytesSent()
		time.Sleep(window)
		sent, sentTCP := c.net.BytesSent()-before, c.net.StreamBytesSent()-beforeTCP
		perMember += float64(sent) / float64(n) / window.Seconds()
		tcp += float64(sentTCP) / float64(n) / window.Seconds()
	}
	b.StopTimer()
	b.ReportMetric(perMember/float64(b.N), "B/s/member")
	b.ReportMetric(tcp/float64(b.N), "B/s/member-tcp")
}

func BenchmarkGossipAtRest10(b *testing.B)  { benchGossipAtRest(b, 10) }
func BenchmarkGossipAtRest50(b *testing.B)  { benchGossipAtRest(b, 50) }
func BenchmarkGossipAtRest100(b *testing.B) { benchGossipAtRest(b, 100) }
