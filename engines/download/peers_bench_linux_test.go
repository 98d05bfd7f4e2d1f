package download

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmkube/mesh/internal/netnslab"
	"github.com/llmkube/mesh/internal/seal"
)

// BenchmarkPeerCopyOverALink is the speed target for models from peers: a model copied
// from one peer over the sealed channel, hashed as it arrives, keeps ≥ 0.9× of what raw TCP gets
// on a 1 Gbit/s link, and from two peers at once ≥ 1.6× one where the links allow it. Hosts 1 and
// 2 hold the file; their uploads are shaped to 1 Gbit/s by a token bucket (tbf). Host 3 fetches
// with an unshaped link, so two peers' uploads can add up (a receiver on the same 1 Gbit/s link
// gets no more from two than from one). Raw copies, one-peer and two-peer copies alternate within
// one run, so all see the same machine load. It reports each one's MB/s and the ratios.
func BenchmarkPeerCopyOverALink(b *testing.B) {
	lab := netnslab.New(b, 3)
	for i := 1; i <= 2; i++ {
		lab.Shape(i, "tbf", "rate", "1gbit", "burst", "256kb", "latency", "10ms")
	}
	ca, err := seal.NewCA("bench", bytes.Repeat([]byte{7}, 32))
	if err != nil {
		b.Fatal(err)
	}
	ident := func(name string) *seal.Identity {
		k, err := seal.NewKey()
		if err != nil {
			b.Fatal(err)
		}
		id, err := ca.Identity(name, seal.RoleAgent, k)
		if err != nil {
			b.Fatal(err)
		}
		return id
	}
	const size = 256 << 20
	content, sum := blob(size)
	receiver := ident("gamma")

	var rawAddr string
	var peers []Peer
	for i, name := range []string{"alpha", "beta"} {
		host := i + 1
		if host == 1 {
			raw := lab.Listen(host)
			b.Cleanup(func() { raw.Close() })
			go serveRaw(raw, content)
			rawAddr = raw.Addr().String()
		}
		id := ident(name)
		inner := lab.Listen(host)
		ln := seal.Listen(inner, seal.ListenConfig{TLS: id.ServerConfig()})
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content))
		})}
		go srv.Serve(ln)
		b.Cleanup(func() { srv.Close() })
		tr := &http.Transport{DialContext: lab.Dial(3), TLSClientConfig: receiver.ClientConfig(seal.Peer{Name: name, KeyID: id.KeyID()})}
		b.Cleanup(tr.CloseIdleConnections)
		peers = append(peers, Peer{Name: name, URL: "https://" + inner.Addr().String() + "/f", Client: &http.Client{Transport: tr}})
	}

	dir := b.TempDir()
	raw := func() time.Duration {
		c, err := lab.Dial(3)(context.Background(), "tcp", rawAddr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		if n, err := io.Copy(io.Discard, c); err != nil || n != size {
			b.Fatalf("raw copy: %d of %d: %v", n, size, err)
		}
		return time.Since(start)
	}
	copyFrom := func(ps ...Peer) time.Duration {
		opts := Options{Peers: &Peers{}, MinFree: 1}
		opts.Peers.Use(func(string) []Peer { return ps })
		dest := filepath.Join(dir, "m.gguf")
		start := time.Now()
		// No origin: the copy comes from the peers or fails.
		if err := FetchWith(context.Background(), "http://192.0.2.1/m.gguf", dest, Want{SHA256: sum}, opts, nil); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		os.Remove(dest)
		os.Remove(dest + DigestSuffix)
		return d
	}

	var tRaw, tOne, tTwo time.Duration
	b.SetBytes(3 * size)
	b.ResetTimer()
	for range b.N {
		tRaw += raw()
		tOne += copyFrom(peers[0])
		tTwo += copyFrom(peers...)
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * size / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(tRaw), "raw-MB/s")
	b.ReportMetric(mbps(tOne), "one-peer-MB/s")
	b.ReportMetric(mbps(tTwo), "two-peers-MB/s")
	b.ReportMetric(mbps(tOne)/mbps(tRaw), "one/raw")
	b.ReportMetric(mbps(tTwo)/mbps(tOne), "two/one")
}

// serveRaw writes content to every connection: the link's raw TCP throughput, for comparison.
func serveRaw(ln net.Listener, content []byte) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.Write(content)
		}()
	}
}
