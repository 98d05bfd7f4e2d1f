// Command barenode is the footprint program's baseline: a bare memberlist node with the mesh's
// LAN timings (memberlist's LAN defaults, probing every 500 ms with a 400 ms timeout), bound to
// loopback, doing nothing else, until SIGTERM: alone, or joined to -join; its gossip encrypted
// with $BARENODE_KEY when set, as agents encrypt theirs. Its RSS and CPU are what any gossip
// member costs; the agent's are compared with them.
//
// Built with -tags httpapi it also serves a JSON status on loopback and asks itself for it once,
// so net/http's server and client are linked and run: the least any mesh member with an HTTP
// API holds, which tells how much of the agent's footprint is its own code. (A tag, not a flag:
// linked in, net/http's pages would count in the bare node's RSS even unused.)
package main

import (
	"flag"
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
	join := flag.String("join", "", "gossip address of a node to join")
	flag.Parse()
	c := memberlist.DefaultLANConfig()
	c.Name = fmt.Sprintf("bare-%d", os.Getpid()) // two on one machine
	c.BindAddr, c.BindPort, c.AdvertisePort = "127.0.0.1", 0, 0
	c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult = 500*time.Millisecond, 400*time.Millisecond, 3
	c.Logger = log.New(io.Discard, "", 0)
	if k := os.Getenv("BARENODE_KEY"); k != "" {
		c.SecretKey = []byte(k)
	}
	m, err := memberlist.Create(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "barenode:", err)
		os.Exit(1)
	}
	if *join != "" {
		if _, err := m.Join([]string{*join}); err != nil {
			fmt.Fprintln(os.Stderr, "barenode:", err)
			os.Exit(1)
		}
	}
	if err := serveStatus(m); err != nil {
		fmt.Fprintln(os.Stderr, "barenode:", err)
		os.Exit(1)
	}
	fmt.Println("gossip on", m.LocalNode().Address())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	m.Shutdown()
}
