package download

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrRefused is wrapped by every refusal of a download's destination: a host not on the
// allowlist, a non-HTTP scheme, or an address in a loopback, private or link-local range.
var ErrRefused = errors.New("download destination refused")

// blocked are the ranges a download may not reach unless allowed: anything that is not the
// public internet. A model URL is user input, and without this guard it is a way to make the
// agent fetch from the host itself or its LAN (the SSRF advisory LLMKube fixed).
var blocked = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (tailnet)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// classify names the blocked range addr falls in, or "" for a public address.
func classify(addr netip.Addr) string {
	addr = addr.Unmap() // ::ffff:127.0.0.1 is loopback too
	for _, b := range blocked {
		if b.prefix.Contains(addr) {
			return b.what
		}
	}
	return ""
}

// hostAllowed reports whether host matches the allowlist: an exact name or address, or a
// ".example.com" entry for example.com's subdomains. An empty allowlist allows every host.
func hostAllowed(host string, allow []string) bool {
	if len(allow) == 0 {
		return true
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, a := range allow {
		a = strings.ToLower(strings.TrimSuffix(a, "."))
		if a == host || (strings.HasPrefix(a, ".") && strings.HasSuffix(host, a)) {
			return true
		}
	}
	return false
}

// explicitlyAllowed reports whether the operator named host on the allowlist, which is
// consent for it to resolve to a private address (a NAS on the LAN).
func explicitlyAllowed(host string, allow []string) bool {
	return len(allow) > 0 && hostAllowed(host, allow)
}

// dialer returns a DialContext that checks every address it connects to, after name
// resolution: checking only the URL's host would let a name that resolves to 127.0.0.1 (or
// re-resolves to it between the check and the dial — DNS rebinding) through.
func dialer(opts Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		trusted := opts.AllowPrivate || explicitlyAllowed(host, opts.AllowHosts)
		d := &net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
			Control: func(_, address string, _ syscall.RawConn) error {
				if trusted {
					return nil
				}
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return fmt.Errorf("%w: cannot parse address %q", ErrRefused, address)
				}
				if what := classify(ap.Addr()); what != "" {
					return fmt.Errorf("%w: %s resolves to %s, a %s address (allow private addresses or add the host to the download allowlist)",
						ErrRefused, host, ap.Addr(), what)
				}
				return nil
			},
		}
		return d.DialContext(ctx, network, addr)
	}
}
