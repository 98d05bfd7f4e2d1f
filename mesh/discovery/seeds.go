package discovery

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/internal/backoff"
)

// Timings of static sources. A name that does not resolve is retried with capped exponential
// backoff (a Pi's Wi-Fi may come up after the agent); a name that did resolve is resolved again
// now and then, because DHCP moves hosts.
const (
	seedRetryFirst = 1 * time.Second
	seedRetryMax   = 30 * time.Second
	seedRefresh    = 2 * time.Minute
	seedLookup     = 5 * time.Second
)

// Seeds is a Source for static --join addresses (host:port). Names ending in .local are resolved
// by our own mDNS query through r (see NewResolver), others by r's system resolver; every
// resolved address is reported once as a Peer with Via "seed", and again only if it changes. The
// mesh core retries the joins themselves. A malformed seed becomes an error Finding (ParseSeed
// gives the same error up front, for flag validation) and the others still work.
func Seeds(addrs []string, r Resolver) Source {
	return newStatic(addrs, ViaSeed, r)
}

// LastKnown is a Source for the peers saved by SaveLastKnown at path, reported with Via
// "last-known". A missing file reports nothing; a damaged one is a warning Finding, not a stop.
func LastKnown(path string, r Resolver) Source {
	addrs, err := LoadLastKnown(path)
	s := newStatic(addrs, ViaLastKnown, r)
	if err != nil {
		s.findings.set("file", Finding{
			Severity: SeverityWarning,
			Problem:  err.Error(),
			Fix:      "nothing to do if the mesh forms by mDNS or seeds: the file is rewritten once peers are known; delete it if this persists",
		})
	}
	return s
}

type static struct {
	addrs    []string
	via      string
	r        Resolver
	findings findings

	retryFirst, retryMax, refresh time.Duration
}

func newStatic(addrs []string, via string, r Resolver) *static {
	if r == nil {
		r = NewResolver("")
	}
	return &static{
		addrs: slices.Clone(addrs), via: via, r: r,
		retryFirst: seedRetryFirst, retryMax: seedRetryMax, refresh: seedRefresh,
	}
}

func (s *static) Findings() []Finding { return s.findings.list() }

func (s *static) Run(ctx context.Context, found func(Peer)) error {
	var mu sync.Mutex
	seen := map[string]bool{} // gossip addresses already reported
	report := func(addrs []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range addrs {
			if !seen[a] {
				seen[a] = true
				found(Peer{GossipAddr: a, Via: s.via})
			}
		}
	}
	var wg sync.WaitGroup
	for _, addr := range s.addrs {
		host, port, err := ParseSeed(addr)
		if err != nil {
			s.findings.set(addr, Finding{
				Severity: SeverityError,
				Problem:  err.Error(),
				Fix:      "give each --join as host:port, e.g. --join 10.0.0.7:7946 or --join pi-kitchen.local:7946",
			})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.follow(ctx, addr, host, port, report)
		}()
	}
	wg.Wait()
	return nil
}

// follow resolves one seed until ctx ends: retrying with backoff while it fails, refreshing
// while it works.
func (s *static) follow(ctx context.Context, addr, host, port string, report func([]string)) {
	if net.ParseIP(host) != nil || isZoned(host) {
		report([]string{net.JoinHostPort(host, port)})
		<-ctx.Done()
		return
	}
	retry := backoff.New(s.retryFirst, s.retryMax)
	for {
		lctx, cancel := context.WithTimeout(ctx, seedLookup)
		ips, err := s.r.LookupHost(lctx, host)
		cancel()
		if ctx.Err() != nil {
			return
		}
		wait := s.refresh
		if err != nil || len(ips) == 0 {
			if err == nil {
				err = fmt.Errorf("%s has no addresses", host)
			}
			fix := "check the name and that the host is up; or give its IP address instead"
			if isLocalName(host) {
				fix = "make sure the host is on this LAN and answers mDNS (avahi-daemon running, UDP 5353 not firewalled), pass --mdns-interface if this host has several networks, or give its IP address instead"
			}
			s.findings.set(addr, Finding{
				Severity: SeverityWarning,
				Problem:  fmt.Sprintf("%s %s does not resolve: %v (retrying)", s.via, addr, err),
				Fix:      fix,
			})
			wait = backoff.Jitter(retry.Next()) // so a rebooted LAN does not query in lockstep
		} else {
			s.findings.clear(addr)
			retry.Reset()
			out := make([]string, len(ips))
			for i, ip := range ips {
				out[i] = net.JoinHostPort(ip, port)
			}
			report(out)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// isZoned reports an IPv6 literal with a zone ("fe80::1%eth0"), which needs no resolving.
func isZoned(host string) bool {
	ip, _, ok := strings.Cut(host, "%")
	return ok && net.ParseIP(ip) != nil
}
