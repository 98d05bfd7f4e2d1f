package discovery

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
)

// hostResponder answers A/AAAA queries for the agent's own host name (MDNSHostName). zeroconf
// puts the addresses only beside its service answers and never answers a plain host query, so
// without this "--join alpha.llmkube.local:7946" would need Avahi on every host. It speaks
// IPv4 multicast; the answer carries AAAA records too.
type hostResponder struct {
	host  string
	addrs []net.IP
	ifs   map[int]bool
	conn  *ipv4.PacketConn
	log   *slog.Logger
	done  sync.WaitGroup
}

// Answer TTLs (RFC 6762 §10 and §6.7: legacy unicast answers at most 10 s).
const (
	hostTTL   = 120
	legacyTTL = 10
)

func newHostResponder(host string, addrs []net.IP, ifs []net.Interface, log *slog.Logger) (*hostResponder, error) {
	// A multicast address makes Go bind the wildcard with SO_REUSEADDR, so this socket shares
	// port 5353 with zeroconf's and any system responder.
	c, err := net.ListenUDP("udp4", mdnsGroup4)
	if err != nil {
		return nil, err
	}
	pc := ipv4.NewPacketConn(c)
	r := &hostResponder{host: dns.Fqdn(host), addrs: addrs, ifs: map[int]bool{}, conn: pc, log: log}
	joined := 0
	for i := range ifs {
		if pc.JoinGroup(&ifs[i], &net.UDPAddr{IP: mdnsGroup4.IP}) == nil {
			joined++
			r.ifs[ifs[i].Index] = true
		}
	}
	if joined == 0 {
		c.Close()
		return nil, errors.New("could not join 224.0.0.251 on any interface")
	}
	_ = pc.SetControlMessage(ipv4.FlagInterface, true)
	_ = pc.SetMulticastTTL(255)
	r.done.Add(1)
	go r.serve()
	return r, nil
}

func (r *hostResponder) close() {
	if r == nil {
		return
	}
	r.conn.Close()
	r.done.Wait()
}

func (r *hostResponder) serve() {
	defer r.done.Done()
	buf := make([]byte, 9000)
	for {
		n, cm, src, err := r.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		// A wildcard socket on Linux hears groups joined on every interface: answer only on ours.
		if cm == nil || !r.ifs[cm.IfIndex] {
			continue
		}
		from, ok := src.(*net.UDPAddr)
		if !ok {
			continue
		}
		var q dns.Msg
		if q.Unpack(buf[:n]) != nil {
			continue
		}
		resp, unicast := r.answer(&q, from.Port)
		if resp == nil {
			continue
		}
		b, err := resp.Pack()
		if err != nil {
			continue
		}
		if unicast {
			_, err = r.conn.WriteTo(b, nil, from)
		} else {
			_, err = r.conn.WriteTo(b, &ipv4.ControlMessage{IfIndex: cm.IfIndex}, mdnsGroup4)
		}
		if err != nil {
			r.log.Debug("mdns: answering host query", "host", r.host, "to", from, "err", err)
		}
	}
}

// answer builds the response to q, if q asks about our host name, and whether it goes back by
// unicast: a query from a port other than 5353 is a one-shot (legacy) query that wants its ID
// and question echoed and a unicast reply (RFC 6762 §6.7); a QU question also asks for unicast.
func (r *hostResponder) answer(q *dns.Msg, srcPort int) (*dns.Msg, bool) {
	if q.Response || q.Opcode != dns.OpcodeQuery {
		return nil, false
	}
	legacy := srcPort != 5353
	unicast := legacy
	var answers []dns.RR
	for _, question := range q.Question {
		if !strings.EqualFold(question.Name, r.host) {
			continue
		}
		if question.Qclass&(1<<15) != 0 {
			unicast = true
		}
		answers = append(answers, r.records(question.Qtype, legacy)...)
	}
	if len(answers) == 0 {
		return nil, false
	}
	resp := new(dns.Msg)
	resp.Response = true
	resp.Authoritative = true
	resp.Answer = dedupRR(answers)
	if legacy {
		resp.Id = q.Id
		resp.Question = q.Question
	}
	return resp, unicast
}

func (r *hostResponder) records(qtype uint16, legacy bool) []dns.RR {
	ttl := uint32(hostTTL)
	class := uint16(dns.ClassINET) | 1<<15 // cache-flush: we are the only owner of this name
	if legacy {
		ttl, class = legacyTTL, dns.ClassINET
	}
	var out []dns.RR
	for _, ip := range r.addrs {
		hdr := dns.RR_Header{Name: r.host, Class: class, Ttl: ttl}
		if v4 := ip.To4(); v4 != nil {
			if qtype == dns.TypeA || qtype == dns.TypeANY {
				hdr.Rrtype = dns.TypeA
				out = append(out, &dns.A{Hdr: hdr, A: v4})
			}
		} else if qtype == dns.TypeAAAA || qtype == dns.TypeANY {
			hdr.Rrtype = dns.TypeAAAA
			out = append(out, &dns.AAAA{Hdr: hdr, AAAA: ip})
		}
	}
	return out
}

func dedupRR(rrs []dns.RR) []dns.RR {
	seen := map[string]bool{}
	out := rrs[:0]
	for _, rr := range rrs {
		if k := rr.String(); !seen[k] {
			seen[k] = true
			out = append(out, rr)
		}
	}
	return out
}
