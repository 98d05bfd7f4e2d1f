package discovery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
)

// Resolver turns a seed's host into addresses.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// mdnsLookupTimeout bounds one .local query when ctx has no earlier deadline: an mDNS responder
// answers within a few hundred milliseconds or not at all.
const mdnsLookupTimeout = 3 * time.Second

var mdnsGroup4 = &net.UDPAddr{IP: net.IPv4(224, 0, 0, 251), Port: 5353}

// NewResolver returns a Resolver that asks mDNS itself for names ending in .local (on iface, or
// on every multicast-capable interface when iface is "") and the system resolver for the rest.
// Go's pure resolver, the only one in a CGO_ENABLED=0 build, skips nsswitch and so never asks
// Avahi: without this a static binary on a Pi cannot join "pi-kitchen.local:7946".
func NewResolver(iface string) Resolver { return mdnsResolver{iface: iface} }

type mdnsResolver struct{ iface string }

func (r mdnsResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []string{host}, nil
	}
	if !isLocalName(host) {
		return net.DefaultResolver.LookupHost(ctx, host)
	}
	all, err := systemInterfaces()
	if err != nil {
		return nil, err
	}
	ifs, why := pickInterfaces(r.iface, all)
	if len(ifs) == 0 {
		return nil, fmt.Errorf("resolving %s over mDNS: %s", host, why)
	}
	return queryHost(ctx, host, netIfaces(ifs))
}

func isLocalName(h string) bool {
	return strings.HasSuffix(strings.ToLower(strings.TrimSuffix(h, ".")), ".local")
}

// queryHost asks for host's A and AAAA records as an RFC 6762 §5.1 one-shot query: sent from
// an ephemeral port, so every responder (Avahi, mDNSResponder, our own agents) answers by
// unicast straight to this socket and nothing else on port 5353 sees the replies. The query is
// repeated a few times because multicast is lossy.
func queryHost(ctx context.Context, host string, ifs []net.Interface) ([]string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, mdnsLookupTimeout)
		defer cancel()
	}
	fqdn := dns.Fqdn(host)
	q := new(dns.Msg)
	q.Id = uint16(rand.UintN(1 << 16))
	q.RecursionDesired = false
	q.Question = []dns.Question{
		{Name: fqdn, Qtype: dns.TypeA, Qclass: dns.ClassINET},
		{Name: fqdn, Qtype: dns.TypeAAAA, Qclass: dns.ClassINET},
	}
	buf, err := q.Pack()
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		return nil, fmt.Errorf("resolving %s over mDNS: %w", host, err)
	}
	defer conn.Close()
	pc := ipv4.NewPacketConn(conn)
	_ = pc.SetMulticastTTL(255) // RFC 6762 §11: receivers may drop anything else
	send := func() error {
		var sent int
		var last error
		for i := range ifs {
			if err := pc.SetMulticastInterface(&ifs[i]); err != nil {
				last = err
				continue
			}
			if _, err := pc.WriteTo(buf, nil, mdnsGroup4); err != nil {
				last = err
				continue
			}
			sent++
		}
		if sent == 0 {
			return fmt.Errorf("resolving %s over mDNS: no interface could send the query: %v", host, last)
		}
		return nil
	}
	if err := send(); err != nil {
		return nil, err
	}

	type result struct {
		addrs []string
		err   error
	}
	got := make(chan result, 1)
	go func() {
		rb := make([]byte, 9000)
		for {
			n, _, err := conn.ReadFromUDP(rb)
			if err != nil {
				got <- result{err: err}
				return
			}
			if addrs := answerAddrs(rb[:n], q.Id, fqdn); len(addrs) > 0 {
				got <- result{addrs: addrs}
				return
			}
		}
	}()
	resend := time.NewTimer(250 * time.Millisecond)
	defer resend.Stop()
	wait := 250 * time.Millisecond
	for {
		select {
		case r := <-got:
			if r.err != nil {
				return nil, fmt.Errorf("resolving %s over mDNS: %w", host, r.err)
			}
			return r.addrs, nil
		case <-resend.C:
			_ = send()
			wait *= 3
			resend.Reset(wait)
		case <-ctx.Done():
			conn.Close() // ends the reader
			<-got
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("resolving %s over mDNS: no answer (is the host up and on this LAN? is its mDNS responder running?)", host)
			}
			return nil, ctx.Err()
		}
	}
}

// answerAddrs extracts the addresses for fqdn from a response. Responders that are not legacy-
// aware may answer with ID 0, so the ID must match only when set.
func answerAddrs(b []byte, id uint16, fqdn string) []string {
	var m dns.Msg
	if m.Unpack(b) != nil || !m.Response {
		return nil
	}
	if m.Id != 0 && m.Id != id {
		return nil
	}
	var v4, v6 []string
	for _, rr := range append(m.Answer, m.Extra...) {
		if !strings.EqualFold(rr.Header().Name, fqdn) {
			continue
		}
		switch a := rr.(type) {
		case *dns.A:
			v4 = append(v4, a.A.String())
		case *dns.AAAA:
			if !a.AAAA.IsLinkLocalUnicast() { // unusable without a zone
				v6 = append(v6, a.AAAA.String())
			}
		}
	}
	return append(v4, v6...)
}

// DialContext returns a dial function for HTTP transports that resolves names ending in .local
// through mDNS on iface (as NewResolver does) and dials everything else as net.Dialer does, so
// "--agent http://pi-kitchen.local:7777" works from a static build too. A .local name is looked
// up for at most a few seconds, whatever the caller's deadline: a responder answers within
// milliseconds or not at all.
func DialContext(iface string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	r := NewResolver(iface)
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || !isLocalName(host) {
			return d.DialContext(ctx, network, addr)
		}
		lctx, cancel := context.WithTimeout(ctx, mdnsLookupTimeout)
		ips, err := r.LookupHost(lctx, host)
		cancel()
		if err != nil {
			return nil, err
		}
		var last error
		for _, ip := range ips {
			c, err := d.DialContext(ctx, network, net.JoinHostPort(ip, port))
			if err == nil {
				return c, nil
			}
			last = err
		}
		return nil, last
	}
}
