package seal

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
)

// BenchmarkCopy is a bulk copy (a model file from a peer) over the sealed channel beside raw
// TCP, on loopback: the cost of the encryption alone, in MB/s. The figure (≥ 0.9× of a
// 1 Gbit/s link) is BenchmarkCopyOverALink, between namespaces; on loopback the CPU is the limit.
func BenchmarkCopy(b *testing.B) {
	ca, err := NewCA("bench", secretA)
	if err != nil {
		b.Fatal(err)
	}
	server, client := benchIdentity(b, ca, "alpha"), benchIdentity(b, ca, "beta")
	const size = 64 << 20
	for _, sealed := range []bool{false, true} {
		name := "raw"
		if sealed {
			name = "sealed"
		}
		b.Run(name, func(b *testing.B) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			var ln net.Listener = inner
			if sealed {
				ln = Listen(inner, ListenConfig{TLS: server.ServerConfig()})
			}
			defer ln.Close()
			go serveCopies(ln, size)
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				var c net.Conn
				if sealed {
					c, err = tls.Dial("tcp", inner.Addr().String(), client.ClientConfig(Peer{Name: "alpha", KeyID: server.KeyID()}))
				} else {
					c, err = net.Dial("tcp", inner.Addr().String())
				}
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, c)
				c.Close()
				if err != nil || n != size {
					b.Fatalf("copied %d of %d: %v", n, size, err)
				}
			}
		})
	}
}

// serveCopies sends size bytes down each connection ln accepts, until ln is closed: the far
// side of a bulk copy.
func serveCopies(ln net.Listener, size int) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 256<<10)
			for n := 0; n < size; {
				m, err := c.Write(buf[:min(len(buf), size-n)])
				if err != nil {
					return
				}
				n += m
			}
		}()
	}
}

// benchIdentity is a fresh agent identity of ca named name.
func benchIdentity(b *testing.B, ca *CA, name string) *Identity {
	k, err := NewKey()
	if err != nil {
		b.Fatal(err)
	}
	id, err := ca.Identity(name, RoleAgent, k)
	if err != nil {
		b.Fatal(err)
	}
	return id
}
