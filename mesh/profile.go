package mesh

import (
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// Profiles name a set of timings: memberlist's and ours.
const (
	ProfileLAN   = "lan"   // memberlist.DefaultLANConfig with faster failure detection: one LAN, up to ~100 hosts
	ProfileWAN   = "wan"   // memberlist.DefaultWANConfig: several sites over seeds or a tailnet
	ProfileLocal = "local" // fast timings for tests and the demo, on one machine
)

// timings are the mesh's own intervals, scaled with memberlist's for each profile.
type timings struct {
	tick         time.Duration // housekeeping: fetches, dial-backs, expiries, events
	dialTimeout  time.Duration // one dial-back attempt
	dialRetry    time.Duration // between attempts while an API address does not answer
	dialRecheck  time.Duration // between checks of an address that answered
	joinFirst    time.Duration // first retry of a join
	joinMax      time.Duration // backoff cap
	saveEvery    time.Duration // last-known peers
	fetchGrace   time.Duration // wait for a gossiped document before fetching it over TCP
	fetchRetry   time.Duration // between TCP fetches of one document
	retainGone   time.Duration // a dead or left member stays in the view this long
	deadGrace    time.Duration // a death is announced after this, in case a leave notice follows
	suspectGrace time.Duration // a suspicion is shown only if not refuted within this
	rejoinEvery  time.Duration // between pings of a dead member, to rejoin it once it answers
	aloneAfter   time.Duration // no acked probe for this long, after a failed one: cut off
	leaveWait    time.Duration // time for the leave notice to go out before memberlist's
	publishWait  time.Duration // UpdateNode's wait for the metadata broadcast
	conflictKeep time.Duration // a name conflict stays in the doctor's report
}

// profile returns memberlist's config and our timings for a profile name.
func profile(name string) (*memberlist.Config, timings, error) {
	switch name {
	case "", ProfileLAN:
		c := memberlist.DefaultLANConfig()
		c.DeadNodeReclaimTime = 10 * time.Second // a host back on a new DHCP address within seconds
		// Faster failure detection than memberlist's defaults (probe every 1 s, suspicion
		// ×4): a crashed host must stop being routed to within seconds, suspect within 2 s
		// and dead within 5 s at 10 hosts. It doubles probe traffic, still a few hundred
		// bytes a second per member (BENCHMARKS.md). A suspicion is shown only after a grace,
		// 0.5 s, up to 1.0 s for a host slow to answer lately (suspicionGraceLocked): a host
		// slow to ack one probe (a Pi busy with inference, a loaded machine) refutes within it —
		// the suspect notice goes straight to it, its refutation straight back — so a healthy
		// host's models never leave routing; a crashed host is still shown suspect within 2 s.
		c.ProbeInterval = 500 * time.Millisecond
		c.ProbeTimeout = 400 * time.Millisecond
		c.SuspicionMult = 3
		return c, timings{
			tick: 100 * time.Millisecond, dialTimeout: 2 * time.Second, dialRetry: 5 * time.Second,
			dialRecheck: time.Minute, joinFirst: time.Second, joinMax: 30 * time.Second,
			saveEvery: 30 * time.Second, fetchGrace: time.Second, fetchRetry: 3 * time.Second,
			retainGone: 30 * time.Minute, deadGrace: 400 * time.Millisecond, suspectGrace: 500 * time.Millisecond, leaveWait: 600 * time.Millisecond,
			// A dead member is pinged every 0.5 s, not 1 s: the wait for the next ping is part of
			// every rejoin, which took up to 2.1 s in the e2e LAN on a busy machine (a host there
			// stalled 2.4 s meanwhile). One UDP packet per dead member, for 2 minutes.
			rejoinEvery: 500 * time.Millisecond, aloneAfter: 2 * time.Second,
			publishWait: 5 * time.Second, conflictKeep: 10 * time.Minute,
		}, nil
	case ProfileWAN:
		c := memberlist.DefaultWANConfig()
		c.DeadNodeReclaimTime = 30 * time.Second
		return c, timings{
			tick: 250 * time.Millisecond, dialTimeout: 5 * time.Second, dialRetry: 15 * time.Second,
			dialRecheck: 2 * time.Minute, joinFirst: 2 * time.Second, joinMax: time.Minute,
			saveEvery: time.Minute, fetchGrace: 2 * time.Second, fetchRetry: 10 * time.Second,
			retainGone: time.Hour, deadGrace: time.Second, suspectGrace: 2 * time.Second, leaveWait: 1500 * time.Millisecond,
			rejoinEvery: 5 * time.Second, aloneAfter: 10 * time.Second,
			publishWait: 10 * time.Second, conflictKeep: 30 * time.Minute,
		}, nil
	case ProfileLocal:
		// Short gossip intervals, so state travels fast; but failure detection as on the LAN:
		// a busy test machine (-race, 2 cores, everyone testing at once) delays acks by
		// hundreds of milliseconds, and probing every 200 ms with a 100 ms timeout made healthy
		// members suspect, even dead, under load (BENCHMARKS.md).
		c := memberlist.DefaultLocalConfig()
		c.ProbeInterval = 500 * time.Millisecond
		c.ProbeTimeout = 400 * time.Millisecond
		c.GossipInterval = 20 * time.Millisecond
		c.PushPullInterval = time.Second
		c.GossipToTheDeadTime = time.Second
		c.SuspicionMult = 3
		c.SuspicionMaxTimeoutMult = 3
		c.TCPTimeout = time.Second
		c.DeadNodeReclaimTime = 500 * time.Millisecond
		return c, timings{
			tick: 20 * time.Millisecond, dialTimeout: 500 * time.Millisecond, dialRetry: 100 * time.Millisecond,
			dialRecheck: 2 * time.Second, joinFirst: 50 * time.Millisecond, joinMax: 500 * time.Millisecond,
			saveEvery: 200 * time.Millisecond, fetchGrace: 100 * time.Millisecond, fetchRetry: 300 * time.Millisecond,
			retainGone: 10 * time.Second, deadGrace: 60 * time.Millisecond, suspectGrace: 500 * time.Millisecond, leaveWait: 80 * time.Millisecond,
			rejoinEvery: 250 * time.Millisecond, aloneAfter: 2 * time.Second,
			publishWait: time.Second, conflictKeep: time.Minute,
		}, nil
	}
	return nil, timings{}, fmt.Errorf("mesh profile %q: use %q, %q or %q", name, ProfileLAN, ProfileWAN, ProfileLocal)
}
