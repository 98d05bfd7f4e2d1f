// Command tcprelay is the speed tests' reference relay: it listens on -listen and pipes each
// connection to -to, both ways, with io.Copy and nothing else — no encryption, no HTTP, no
// counting. Two of them in a path (one on each host) are what any pair of user-space relays
// costs on the machine, measured beside the agents' sealed channel (BENCHMARKS.md).
package main

import (
	"flag"
	"io"
	"log"
	"net"
)

func main() {
	listen := flag.String("listen", "", "the address to listen on")
	to := flag.String("to", "", "the address to relay each connection to")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go relay(c, *to)
	}
}

func relay(c net.Conn, to string) {
	defer c.Close()
	u, err := net.Dial("tcp", to)
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
