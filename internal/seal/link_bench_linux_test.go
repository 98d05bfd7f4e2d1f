package seal

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/llmkube/mesh/internal/netnslab"
)

// BenchmarkCopyOverALink is the cost target for bulk copies: a model file copied between
// two hosts over the sealed channel keeps ≥ 0.9× of what raw TCP gets on a 1 Gbit/s link. The
// hosts are two network namespaces whose cables are shaped to 1 Gbit/s by a token bucket (tbf:
// netem is a module many kernels and containers lack); raw and sealed copies alternate within one run, so both see the same machine load.
// It reports each side's MB/s and sealed/raw.
func BenchmarkCopyOverALink(b *testing.B) {
	lab := netnslab.New(b, 2)
	for i := 1; i <= 2; i++ {
		lab.Shape(i, "tbf", "rate", "1gbit", "burst", "256kb", "latency", "10ms")
	}
	ca, err := NewCA("bench", secretA)
	if err != nil {
		b.Fatal(err)
	}
	server, client := benchIdentity(b, ca, "alpha"), benchIdentity(b, ca, "beta")

	const size = 256 << 20
	// Host 1 serves: a raw copy on one port, a sealed one on another.
	serve := func(sealed bool) string {
		var inner net.Listener
		if err := lab.In(1, func() (err error) {
			inner, err = net.Listen("tcp", net.JoinHostPort(lab.Addr(1), "0"))
			return err
		}); err != nil {
			b.Fatal(err)
		}
		ln := inner
		if sealed {
			ln = Listen(inner, ListenConfig{TLS: server.ServerConfig()})
		}
		b.Cleanup(func() { ln.Close() })
		go serveCopies(ln, size)
		return inner.Addr().String()
	}
	rawAddr, sealedAddr := serve(false), serve(true)

	// Host 2 fetches; the connection is made in its namespace, the copy runs from here.
	fetch := func(sealed bool) time.Duration {
		var c net.Conn
		if err := lab.In(2, func() (err error) {
			if sealed {
				c, err = tls.Dial("tcp", sealedAddr, client.ClientConfig(Peer{Name: "alpha", KeyID: server.KeyID()}))
			} else {
				c, err = net.Dial("tcp", rawAddr)
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		n, err := io.Copy(io.Discard, c)
		if err != nil || n != size {
			b.Fatalf("copied %d of %d: %v", n, size, err)
		}
		return time.Since(start)
	}

	var raw, sealed time.Duration
	b.SetBytes(2 * size)
	b.ResetTimer()
	for range b.N {
		raw += fetch(false)
		sealed += fetch(true)
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * size / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(raw), "raw-MB/s")
	b.ReportMetric(mbps(sealed), "sealed-MB/s")
	b.ReportMetric(mbps(sealed)/mbps(raw), "sealed/raw")
}
