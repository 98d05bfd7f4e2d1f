package discovery

import (
	"fmt"
	"net"
	"slices"
	"strings"
)

// containerPrefixes name interfaces of container and VM bridges: announcing there advertises an
// address no LAN peer can reach (lessons.md: skip docker bridges, LLMKube #526).
var containerPrefixes = []string{"docker", "br-", "veth", "virbr", "cni", "podman", "flannel", "cali", "vxlan"}

// ifaceInfo is an interface and its addresses, gathered once so the choice is a pure function.
type ifaceInfo struct {
	iface net.Interface
	addrs []net.IP
}

// systemInterfaces lists the host's interfaces with their addresses.
func systemInterfaces() ([]ifaceInfo, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	out := make([]ifaceInfo, 0, len(ifs))
	for _, ifi := range ifs {
		info := ifaceInfo{iface: ifi}
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				info.addrs = append(info.addrs, n.IP)
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// usableAddrs are the addresses worth advertising: IPv4 that is not loopback or link-local
// (169.254/16 means DHCP failed), and global IPv6 (link-local IPv6 needs a zone a peer lacks).
func usableAddrs(addrs []net.IP) []net.IP {
	var v4, v6 []net.IP
	for _, ip := range addrs {
		switch {
		case ip.IsLoopback(), ip.IsLinkLocalUnicast(), ip.IsUnspecified(), ip.IsMulticast():
		case ip.To4() != nil:
			v4 = append(v4, ip.To4())
		default:
			v6 = append(v6, ip)
		}
	}
	return append(v4, v6...)
}

// pickInterfaces chooses the interfaces mDNS runs on. With a name, that interface (and a reason
// when it cannot carry mDNS). Without, every interface that is up, multicast-capable, not
// loopback (Linux's lo has no multicast flag anyway), not a container bridge, and has an address a
// peer can reach. When none qualifies, the reason says why each candidate was passed over.
func pickInterfaces(name string, all []ifaceInfo) ([]ifaceInfo, string) {
	if name != "" {
		for _, c := range all {
			if c.iface.Name != name {
				continue
			}
			if why := unfit(c); why != "" {
				return nil, fmt.Sprintf("interface %s %s", name, why)
			}
			return []ifaceInfo{c}, ""
		}
		names := make([]string, 0, len(all))
		for _, c := range all {
			names = append(names, c.iface.Name)
		}
		return nil, fmt.Sprintf("interface %s does not exist (have: %s)", name, strings.Join(names, ", "))
	}
	var out []ifaceInfo
	var skipped []string
	for _, c := range all {
		why := unfit(c)
		if why == "" && slices.ContainsFunc(containerPrefixes, func(p string) bool { return strings.HasPrefix(c.iface.Name, p) }) {
			why = "is a container or VM bridge"
		}
		if why != "" {
			skipped = append(skipped, c.iface.Name+" "+why)
			continue
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		if len(skipped) == 0 {
			return nil, "no network interfaces at all"
		}
		return nil, "no multicast-capable interface: " + strings.Join(skipped, "; ")
	}
	return out, ""
}

func unfit(c ifaceInfo) string {
	switch {
	case c.iface.Flags&net.FlagLoopback != 0:
		return "is loopback, which never carries mDNS"
	case c.iface.Flags&net.FlagUp == 0:
		return "is down"
	case c.iface.Flags&net.FlagMulticast == 0:
		return "is not multicast-capable"
	case len(usableAddrs(c.addrs)) == 0:
		return "has no routable address (only link-local or none)"
	}
	return ""
}

func netIfaces(cs []ifaceInfo) []net.Interface {
	out := make([]net.Interface, len(cs))
	for i, c := range cs {
		out[i] = c.iface
	}
	return out
}

// LANAddr is the address this host's peers reach it at: what an agent advertises for its API
// and its gossip when it listens on every interface. In order: bind, when it names an address;
// the first usable address of iface (--mdns-interface: the user named the LAN); the source
// address of the default route, when it is usable (the interface users actually route on, not a
// docker bridge); the first usable address of an interface mDNS would use — a host without a
// default route (an offline lab, a Pi cluster with static addresses) is still on a LAN; then of
// any other interface that is up; and loopback only when the host has nothing else, for then
// the mesh is this machine.
func LANAddr(bind, iface string) net.IP {
	if ip := net.ParseIP(bind); ip != nil && !ip.IsUnspecified() {
		return ip
	}
	all, _ := systemInterfaces()
	return chooseLANAddr(iface, defaultRouteSource(), all)
}

// defaultRouteSource asks the kernel which source address the default route would use. A UDP
// "connection" sends nothing. nil without a default route.
func defaultRouteSource() net.IP {
	c, err := net.Dial("udp4", "192.0.2.1:9") // TEST-NET-1: never a real host
	if err != nil {
		return nil
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP
}

func chooseLANAddr(iface string, route net.IP, all []ifaceInfo) net.IP {
	first := func(cs []ifaceInfo) net.IP {
		for _, c := range cs {
			if a := usableAddrs(c.addrs); len(a) > 0 {
				return a[0]
			}
		}
		return nil
	}
	if iface != "" {
		if picked, _ := pickInterfaces(iface, all); len(picked) > 0 {
			return first(picked)
		}
	}
	if route != nil && len(usableAddrs([]net.IP{route})) > 0 {
		return route
	}
	if picked, _ := pickInterfaces("", all); len(picked) > 0 {
		return first(picked)
	}
	var up []ifaceInfo
	for _, c := range all {
		if c.iface.Flags&net.FlagUp != 0 && c.iface.Flags&net.FlagLoopback == 0 {
			up = append(up, c)
		}
	}
	if ip := first(up); ip != nil {
		return ip
	}
	return net.IPv4(127, 0, 0, 1)
}
