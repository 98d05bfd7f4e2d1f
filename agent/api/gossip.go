package api

// GossipStats counts what one mesh member's gossip layer (memberlist) did and saw since the
// member started. The mesh fills it (mesh.Mesh.GossipStats); the agent exports it on /metrics
// as the llmkube_gossip_* series. Counters only grow; HealthScore goes up and down.
type GossipStats struct {
	Probes         uint64 // failure-detector probes this member sent to other members
	ProbesAcked    uint64 // probes answered directly, over UDP
	ProbesTCPOnly  uint64 // probes answered only over TCP: UDP is lost or blocked on the way
	ProbesFailed   uint64 // probes not answered at all: the member probed became suspect
	ProbesDegraded uint64 // probes run at a stretched interval, as this member's health score was above 0
	Suspicions     uint64 // times another member became suspect here (by our probe or by a peer's word)
	Refutations    uint64 // suspicions of this member (by a peer) that it refuted

	UDPSentBytes, UDPReceivedBytes uint64 // gossip packets: probes, acks, broadcasts
	TCPSentBytes, TCPReceivedBytes uint64 // gossip streams: push/pull exchanges, large messages, TCP probes

	// HealthScore is memberlist's awareness of its own health: 0 is healthy; it grows while this
	// member's probes go unanswered or it must refute suspicions of itself, and stretches its
	// probe interval and timeouts accordingly.
	HealthScore int
	// RTT is the round trip of each probe answered directly, in seconds.
	RTT Histogram
	// Dropped counts, by reason, what arrived on the gossip port and was dropped before it
	// could be read: every reason is present, zeros included.
	Dropped map[string]uint64
}

// Histogram is a cumulative histogram, as Prometheus takes one: Buckets maps each upper bound
// to the number of observations at most that bound.
type Histogram struct {
	Count   uint64
	Sum     float64
	Buckets map[float64]uint64
}
