// Command barenode is the footprint program's baseline: a bare memberlist node with the mesh's
// LAN timings (memberlist's LAN defaults, probing every 500 ms with a 400 ms timeout), bound to
// loopback, alone, doing nothing else, until SIGTERM. Its RSS and CPU are what any gossip member
// costs; the agent's are compared with them.
package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

func main() {
	c := memberlist.DefaultLANConfig()
	c.Name = "bare"
	c.BindAddr, c.BindPort, c.AdvertisePort = "127.0.0.1", 0, 0
	c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult = 500*time.Millisecond, 400*time.Millisecond, 3
	c.Logger = log.New(io.Discard, "", 0)
	m, err := memberlist.Create(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "barenode:", err)
		os.Exit(1)
	}
	fmt.Println("gossip on", m.LocalNode().Address())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	m.Shutdown()
}
