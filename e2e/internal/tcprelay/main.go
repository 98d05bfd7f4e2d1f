// Command tcprelay is the speed tests' reference relay: it listens on -listen and pipes each
// connection to -to, both ways, with io.Copy and nothing else — no HTTP, no counting. Two of
// them in a path (one on each host) are what any pair of user-space relays costs on the
// machine, measured beside the agents' sealed channel (BENCHMARKS.md). With -tls, the pair
// speaks TLS between them as two agents do, with the sealed channel's own configurations and
// identities of one mesh (-tls accept on the far one, -tls dial on the near one): what the
// encryption and its records add to two relays, without anything else of the agents.
package main

import (
	"crypto/tls"
	"flag"
	"io"
	"log"
	"net"

	"github.com/llmkube/mesh/internal/seal"
)

// secret is the reference mesh's: both relays derive its CA from it.
var secret = []byte("tcprelay's reference mesh, not a user's")

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
		ln = tls.NewListener(ln, identity("far").ServerConfig())
	case "dial":
		cfg := identity("near").ClientConfig(seal.PeerNamed("far", ""))
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

// identity is an agent's of the reference mesh, named name, with a key made now.
func identity(name string) *seal.Identity {
	ca, err := seal.NewCA("tcprelay", secret)
	if err != nil {
		log.Fatal(err)
	}
	key, err := seal.NewKey()
	if err != nil {
		log.Fatal(err)
	}
	id, err := ca.Identity(name, seal.RoleAgent, key)
	if err != nil {
		log.Fatal(err)
	}
	return id
}
