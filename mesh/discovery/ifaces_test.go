package discovery

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
)

func info(name string, flags net.Flags, addrs ...string) ifaceInfo {
	i := ifaceInfo{iface: net.Interface{Name: name, Flags: flags}}
	for _, a := range addrs {
		i.addrs = append(i.addrs, net.ParseIP(a))
	}
	return i
}

const upMC = net.FlagUp | net.FlagMulticast | net.FlagBroadcast

func names(is []ifaceInfo) []string {
	var out []string
	for _, i := range is {
		out = append(out, i.iface.Name)
	}
	return out
}

func TestPickInterfaces(t *testing.T) {
	host := []ifaceInfo{
		info("lo", net.FlagUp|net.FlagLoopback, "127.0.0.1", "::1"),
		info("eth0", upMC, "192.168.1.20", "fe80::1"),
		info("wlan0", upMC, "fe80::2", "2001:db8::5"),
		info("docker0", upMC, "172.17.0.1"),
		info("br-5f1c", upMC, "172.18.0.1"),
		info("veth12ab", upMC),
		info("usb0", upMC, "169.254.3.3", "fe80::3"), // DHCP failed: link-local only
		info("eth1", net.FlagBroadcast|net.FlagMulticast, "10.0.0.5"),
		info("wg0", net.FlagUp|net.FlagPointToPoint, "10.8.0.2"),
	}
	got, why := pickInterfaces("", host)
	assert.Equal(t, []string{"eth0", "wlan0"}, names(got))
	assert.Empty(t, why)

	got, why = pickInterfaces("eth0", host)
	assert.Equal(t, []string{"eth0"}, names(got))
	assert.Empty(t, why)

	cases := map[string]string{
		"lo":    "interface lo is loopback, which never carries mDNS",
		"usb0":  "interface usb0 has no routable address (only link-local or none)",
		"eth1":  "interface eth1 is down",
		"wg0":   "interface wg0 is not multicast-capable",
		"wlan9": "interface wlan9 does not exist (have: lo, eth0, wlan0, docker0, br-5f1c, veth12ab, usb0, eth1, wg0)",
	}
	for name, want := range cases {
		got, why := pickInterfaces(name, host)
		assert.Empty(t, got, name)
		assert.Equal(t, want, why, name)
	}

	// An explicit name may pick a bridge: the operator knows best.
	got, _ = pickInterfaces("docker0", host)
	assert.Equal(t, []string{"docker0"}, names(got))

	// Only loopback and a docker bridge: nothing, and the reason names both.
	got, why = pickInterfaces("", host[3:4:4])
	assert.Empty(t, got)
	assert.Equal(t, "no multicast-capable interface: docker0 is a container or VM bridge", why)
	got, why = pickInterfaces("", nil)
	assert.Empty(t, got)
	assert.Equal(t, "no network interfaces at all", why)
}

func TestUsableAddrs(t *testing.T) {
	var ips []net.IP
	for _, a := range []string{"fe80::1", "2001:db8::5", "127.0.0.1", "169.254.1.1", "10.0.0.1", "0.0.0.0"} {
		ips = append(ips, net.ParseIP(a))
	}
	got := usableAddrs(ips)
	assert.Equal(t, "[10.0.0.1 2001:db8::5]", fmtIPs(got))
}

func fmtIPs(ips []net.IP) string {
	s := "["
	for i, ip := range ips {
		if i > 0 {
			s += " "
		}
		s += ip.String()
	}
	return s + "]"
}

func TestChooseLANAddr(t *testing.T) {
	lo := info("lo", net.FlagUp|net.FlagLoopback, "127.0.0.1", "::1")
	eth0 := info("eth0", upMC, "fe80::1", "192.168.1.20")
	wlan0 := info("wlan0", upMC, "10.0.0.9")
	docker := info("docker0", upMC, "172.17.0.1")
	wg := info("wg0", net.FlagUp|net.FlagPointToPoint, "10.8.0.2")
	route := net.ParseIP("10.0.0.9")
	for _, c := range []struct {
		name  string
		iface string
		route net.IP
		all   []ifaceInfo
		want  string
	}{
		{"the default route's source", "", route, []ifaceInfo{lo, docker, eth0, wlan0}, "10.0.0.9"},
		{"the named mDNS interface over the default route", "eth0", route, []ifaceInfo{lo, eth0, wlan0}, "192.168.1.20"},
		{"no default route: the LAN interface, not a bridge", "", nil, []ifaceInfo{lo, docker, eth0}, "192.168.1.20"},
		{"a loopback route source is no answer", "", net.ParseIP("127.0.0.1"), []ifaceInfo{lo, eth0}, "192.168.1.20"},
		{"only a tunnel: better than loopback", "", nil, []ifaceInfo{lo, wg}, "10.8.0.2"},
		{"only a bridge: better than loopback", "", nil, []ifaceInfo{lo, docker}, "172.17.0.1"},
		{"nothing but loopback", "", nil, []ifaceInfo{lo}, "127.0.0.1"},
	} {
		assert.Equal(t, c.want, chooseLANAddr(c.iface, c.route, c.all).String(), c.name)
	}
}
