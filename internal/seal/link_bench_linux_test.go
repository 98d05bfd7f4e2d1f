package seal

import (
	"context"
	"crypto/tls"
	"io"
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
		inner := lab.Listen(1)
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
		addr := rawAddr
		if sealed {
			addr = sealedAddr
		}
		c, err := lab.Dial(2)(context.Background(), "tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if sealed {
			tc := tls.Client(c, client.ClientConfig(Peer{Name: "alpha", KeyID: server.KeyID()}))
			if err := tc.Handshake(); err != nil {
				b.Fatal(err)
			}
			c = tc
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
