package download

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
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

// PrivateHint says how an operator lets downloads reach private addresses: the agent's flag
// that sets Options.AllowPrivate (the only way to set it).
const PrivateHint = "the agent reaches loopback, private and link-local addresses when started with --allow-private-downloads"

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
					return fmt.Errorf("%w: %s resolves to %s, a %s address (%s)", ErrRefused, host, ap.Addr(), what, PrivateHint)
				}
				return nil
			},
		}
		return d.DialContext(ctx, network, addr)
	}
}

// NewClient is the one HTTP client for everything fetched for a model source — sizing probes,
// header reads, HEADs, manifests, downloads — so each request and each redirect passes the
// same guard: the scheme and the allowlist before any connection, the address ranges at dial
// time, at most MaxRedirects hops, and no credentials or cookies carried to another host.
// opts.HTTP's timeout and TLS settings are kept; its Transport must be nil or an
// *http.Transport (a clone gets the guard and no proxy, since a proxy would hide the real
// destination from the guard).
func NewClient(opts Options) (*http.Client, error) {
	base := opts.HTTP
	if base == nil {
		base = &http.Client{}
	}
	var tr *http.Transport
	switch t := base.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = t.Clone()
	default:
		return nil, fmt.Errorf("download: Options.HTTP.Transport is a %T; it must be an *http.Transport so the address guard can be applied", t)
	}
	tr.Proxy = nil
	tr.DialContext = dialer(opts)
	tr.DialTLSContext = nil // TLS then runs over DialContext, so the guard sees every connection
	limit := opts.MaxRedirects
	if limit <= 0 {
		limit = DefaultMaxRedirects
	}
	c := *base
	c.Transport = guarded{opts: opts, next: tr}
	c.Jar = nil // cookies are credentials too
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > limit {
			return fmt.Errorf("%w: more than %d", ErrTooManyRedirects, limit)
		}
		if err := checkTarget(req.URL, opts); err != nil {
			return err
		}
		// Credentials go to the host they were given for and nowhere else: a signed CDN
		// URL needs none, and a hostile redirect must not collect them. Stricter than
		// net/http, which keeps them for subdomains.
		if !strings.EqualFold(req.URL.Host, via[0].URL.Host) {
			for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie"} {
				req.Header.Del(h)
			}
		}
		return nil
	}
	return &c, nil
}

// guarded checks every request's URL (the first and each redirect) before the transport
// connects: the dial-time address check cannot see a scheme or a host name off the allowlist.
type guarded struct {
	opts Options
	next http.RoundTripper
}

func (g guarded) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := checkTarget(req.URL, g.opts); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return g.next.RoundTrip(req)
}

// Redact turns a request's failure into words of the agent's own. Transport errors can
// carry the remote's bytes ("malformed HTTP response \"SSH-2.0-OpenSSH…\"", a certificate's
// names), and a failure goes back to whoever asked for the source: echoing them would make the
// agent a banner grabber, and telling "refused" from "timed out" from "not HTTP" would make it a
// port scanner. So every failure to get an HTTP answer reads the same; the caller logs the
// original for the operator. The guard's refusals and redirect limits are kept as they are
// (they are ours, and callers test for them with errors.Is), and so is a name that does not
// resolve (it says nothing about ports). A cancelled request reads the same as any other
// failure too — an HTTP client's timeout is a port's silence — so a caller that cancelled
// checks its own context first.
func Redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var dnsErr *net.DNSError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrRefused), errors.Is(err, ErrTooManyRedirects):
		return err
	case errors.As(err, &dnsErr):
		return fmt.Errorf("cannot resolve host %s", dnsErr.Name)
	}
	return ErrNoAnswer
}

// ErrNoAnswer is what Redact makes of every failure to get an HTTP answer.
var ErrNoAnswer = errors.New("no HTTP answer (the connection was refused, timed out or broke, or the server does not speak HTTP or TLS)")
