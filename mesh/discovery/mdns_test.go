package discovery

import (
	"net"
	"strings"
	"testing"

	"github.com/grandcat/zeroconf"
	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

func TestMDNSHostName(t *testing.T) {
	assert.Equal(t, "alpha.llmkube.local.", MDNSHostName("alpha"))
	assert.Equal(t, "pi-5.llmkube.local.", MDNSHostName("pi-5"))
	// Names that are not a DNS label are made one, with a hash so two never collide.
	a, b := MDNSHostName("Pi_5"), MDNSHostName("pi.5")
	assert.NotEqual(t, a, b)
	assert.Regexp(t, `^pi-5-[0-9a-f]{6}\.llmkube\.local\.$`, a)
	assert.Regexp(t, `^node-[0-9a-f]{6}\.llmkube\.local\.$`, MDNSHostName("日本"))
	long := MDNSHostName(strings.Repeat("x", 100))
	label, _, _ := strings.Cut(long, ".")
	assert.LessOrEqual(t, len(label), 63)
}

func TestNewMDNSValidatesConfig(t *testing.T) {
	ok := MDNSConfig{MeshID: "home", Node: "alpha", GossipPort: 7946, APIPort: 7947}
	_, err := NewMDNS(ok)
	require.NoError(t, err)
	bad := map[string]func(*MDNSConfig){
		"mesh id":     func(c *MDNSConfig) { c.MeshID = "Not Valid" },
		"node name":   func(c *MDNSConfig) { c.Node = "" },
		"gossip port": func(c *MDNSConfig) { c.GossipPort = 0 },
		"api port":    func(c *MDNSConfig) { c.APIPort = 70000 },
		"advertise":   func(c *MDNSConfig) { c.Advertise = []net.IP{net.IPv4zero} },
	}
	for want, mutate := range bad {
		c := ok
		mutate(&c)
		_, err := NewMDNS(c)
		if assert.Error(t, err, want) {
			assert.Contains(t, err.Error(), strings.Split(want, " ")[0])
		}
	}
	// A console only browses: it needs neither ports nor, yet, a name; a bad port is still bad.
	_, err = NewMDNS(MDNSConfig{MeshID: "home", BrowseOnly: true})
	require.NoError(t, err)
	_, err = NewMDNS(MDNSConfig{MeshID: "home", BrowseOnly: true, GossipPort: 70000})
	assert.ErrorContains(t, err, "gossip port")
}

func entry(instance string, txt []string, addrs ...string) *zeroconf.ServiceEntry {
	e := zeroconf.NewServiceEntry(instance, Service, "local.")
	e.Text = txt
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip.To4() != nil {
			e.AddrIPv4 = append(e.AddrIPv4, ip)
		} else {
			e.AddrIPv6 = append(e.AddrIPv6, ip)
		}
	}
	return e
}

func TestParseEntry(t *testing.T) {
	_, lan, _ := net.ParseCIDR("192.168.1.20/24")
	home := api.MeshIDHash("home")
	good := []string{"mesh=" + home, "node=beta", "gossip=7946", "api=7947", "v=1", "future=ignored"}

	p, err := parseEntry(entry("beta", good, "10.9.0.2", "192.168.1.30", "fe80::1"), []*net.IPNet{lan})
	require.NoError(t, err)
	assert.Equal(t, Peer{Node: "beta", MeshHash: home, GossipAddr: "192.168.1.30:7946", APIAddr: "192.168.1.30:7947", Via: ViaMDNS, OnLink: true}, p,
		"the address on our own subnet wins")

	p, err = parseEntry(entry("beta", good, "fe80::1", "2001:db8::7"), nil)
	require.NoError(t, err)
	assert.Equal(t, "[2001:db8::7]:7946", p.GossipAddr, "link-local IPv6 cannot be dialled without a zone")

	noAPI := []string{"mesh=" + home, "gossip=7946", "v=1"}
	p, err = parseEntry(entry("gamma", noAPI, "10.0.0.3"), nil)
	require.NoError(t, err)
	assert.Equal(t, Peer{Node: "gamma", MeshHash: home, GossipAddr: "10.0.0.3:7946", Via: ViaMDNS}, p, "node falls back to the instance")

	bad := map[string]*zeroconf.ServiceEntry{
		"no mesh= record":    entry("x", []string{"gossip=1", "v=1"}, "10.0.0.1"),
		"no v= record":       entry("x", []string{"mesh=" + home, "gossip=1"}, "10.0.0.1"),
		"gossip=":            entry("x", []string{"mesh=" + home, "gossip=0", "v=1"}, "10.0.0.1"),
		"no usable address":  entry("x", good, "fe80::9", "169.254.0.3"),
		"no usable address ": entry("x", good),
	}
	for want, e := range bad {
		_, err := parseEntry(e, nil)
		if assert.Error(t, err, want) {
			assert.Contains(t, err.Error(), strings.TrimSpace(want))
		}
	}
}

func TestConsiderCountsOtherMeshesAndImpostors(t *testing.T) {
	s, err := NewMDNS(MDNSConfig{MeshID: "home", Node: "alpha", GossipPort: 7946, APIPort: 7947})
	require.NoError(t, err)
	m := s.(*mdnsSource)
	m.addrs = []net.IP{net.ParseIP("10.0.0.1").To4()}
	home, work := api.MeshIDHash("home"), api.MeshIDHash("work")
	txt := func(hash, node string) []string {
		return []string{"mesh=" + hash, "node=" + node, "gossip=7946", "api=7947", "v=1"}
	}

	p, ok := m.consider(entry("beta", txt(home, "beta"), "10.0.0.2"), nil)
	assert.True(t, ok)
	assert.Equal(t, "beta", p.Node)

	_, ok = m.consider(entry("alpha", txt(home, "alpha"), "10.0.0.1"), nil)
	assert.False(t, ok, "our own announcement")
	assert.Empty(t, m.Findings())

	for _, n := range []string{"w1", "w2", "w1"} {
		_, ok = m.consider(entry(n, txt(work, n), "10.0.0.5"), nil)
		assert.False(t, ok, "another mesh is never joined")
	}
	fs := m.Findings()
	require.Len(t, fs, 1)
	assert.Equal(t, SeverityWarning, fs[0].Severity)
	assert.Equal(t, "mDNS answers from 2 host(s) of another mesh: w1, w2", fs[0].Problem)
	assert.Contains(t, fs[0].Fix, "check the join string")

	_, ok = m.consider(entry("alpha", txt(home, "alpha"), "10.0.0.66"), nil)
	assert.False(t, ok)
	fs = m.Findings()
	require.Len(t, fs, 2)
	assert.Equal(t, SeverityError, fs[0].Severity)
	assert.Contains(t, fs[0].Problem, `announces this node's name "alpha"`)
}

func TestResponderAnswersOnlyItsName(t *testing.T) {
	r := &hostResponder{host: "alpha.llmkube.local.", addrs: []net.IP{net.ParseIP("10.0.0.1").To4(), net.ParseIP("2001:db8::1")}}

	q := new(dns.Msg)
	q.Id = 4242
	q.Question = []dns.Question{
		{Name: "ALPHA.llmkube.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET},
		{Name: "alpha.llmkube.local.", Qtype: dns.TypeAAAA, Qclass: dns.ClassINET},
	}
	// A one-shot query from an ephemeral port: unicast, ID and question echoed, short TTL.
	resp, unicast := r.answer(q, 40000)
	require.NotNil(t, resp)
	assert.True(t, unicast)
	assert.Equal(t, uint16(4242), resp.Id)
	assert.Len(t, resp.Question, 2)
	b, err := resp.Pack()
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1", "2001:db8::1"}, answerAddrs(b, 4242, "alpha.llmkube.local."))
	assert.Nil(t, answerAddrs(b, 1, "alpha.llmkube.local."), "another query's answer")
	assert.Nil(t, answerAddrs(b, 4242, "beta.llmkube.local."))
	for _, rr := range resp.Answer {
		assert.Equal(t, uint32(legacyTTL), rr.Header().Ttl)
	}

	// A full mDNS querier on 5353: multicast, cache-flush, no question, ID 0.
	resp, unicast = r.answer(q, 5353)
	require.NotNil(t, resp)
	assert.False(t, unicast)
	assert.Zero(t, resp.Id)
	assert.Empty(t, resp.Question)
	b, err = resp.Pack()
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1", "2001:db8::1"}, answerAddrs(b, 777, "alpha.llmkube.local."), "ID 0 answers any query")

	// QU bit asks for unicast even from 5353.
	qu := q.Copy()
	qu.Question[0].Qclass |= 1 << 15
	_, unicast = r.answer(qu, 5353)
	assert.True(t, unicast)

	other := new(dns.Msg)
	other.SetQuestion("beta.llmkube.local.", dns.TypeA)
	resp, _ = r.answer(other, 40000)
	assert.Nil(t, resp)
	resp, _ = r.answer(&dns.Msg{MsgHdr: dns.MsgHdr{Response: true}, Question: q.Question}, 40000)
	assert.Nil(t, resp, "responses are not questions")
}

// FuzzDNSPackets feeds arbitrary datagrams, as anyone on the LAN can send, to both readers of
// port-5353 traffic we own: the responder's query handling and the resolver's answer parsing.
func FuzzDNSPackets(f *testing.F) {
	r := &hostResponder{host: "alpha.llmkube.local.", addrs: []net.IP{net.ParseIP("10.0.0.1").To4(), net.ParseIP("2001:db8::1")}}
	q := new(dns.Msg)
	q.SetQuestion("alpha.llmkube.local.", dns.TypeANY)
	qb, _ := q.Pack()
	f.Add(qb)
	resp, _ := r.answer(q, 40000)
	rb, _ := resp.Pack()
	f.Add(rb)
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = answerAddrs(b, q.Id, "alpha.llmkube.local.")
		var m dns.Msg
		if m.Unpack(b) != nil {
			return
		}
		if resp, _ := r.answer(&m, 40000); resp != nil {
			if _, err := resp.Pack(); err != nil {
				t.Fatalf("answer to %v does not pack: %v", m.Question, err)
			}
		}
	})
}
