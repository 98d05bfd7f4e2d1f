// Command tcprelay is the speed tests' reference relay: it listens on -listen and pipes each
// connection to -to, both ways, with io.Copy and nothing else — no HTTP, no counting. Two of
// them in a path (one on each host) are what any pair of user-space relays costs on the
// machine, measured beside the agents' sealed channel (BENCHMARKS.md). With -tls, the pair
// speaks TLS 1.3 between them (-tls accept on the far one, -tls dial on the near one): what
// the encryption and its records add to two relays, without anything else of the agents.
package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"io"
	"log"
	"math/big"
	"net"
	"time"
)

func main() {
	listen := flag.String("listen", "", "the address to listen on")
	to := flag.String("to", "", "the address to relay each connection to")
	mode := flag.String("tls", "", `"accept": connections come in TLS; "dial": relay to -to in TLS; "": neither`)
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	dial := func() (net.Conn, error) { return net.Dial("tcp", *to) }
	switch *mode {
	case "accept":
		ln = tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{selfSigned()}})
	case "dial":
		// The reference measures TLS's records, not trust: the far relay's certificate is its
		// own, made at start, and the path is the test's.
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
		dial = func() (net.Conn, error) { return tls.Dial("tcp", *to, cfg) }
	case "":
	default:
		log.Fatalf("-tls %q: want accept, dial or nothing", *mode)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go relay(c, dial)
	}
}

func relay(c net.Conn, dial func() (net.Conn, error)) {
	defer c.Close()
	u, err := dial()
	if err != nil {
		log.Print(err)
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); done <- struct{}{} }()
	go func() { io.Copy(c, u); done <- struct{}{} }()
	<-done
}

// selfSigned is a certificate of a key made now, valid for a day.
func selfSigned() tls.Certificate {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		log.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
