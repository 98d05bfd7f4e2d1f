// Package memnet is an in-process network for memberlist: many members in one process, no
// sockets. It plays the part of memberlist.MockNetwork with the differences mesh tests need:
//
//   - members may be added while others run (MockNetwork's maps are unsynchronised);
//   - a packet to a stopped member is dropped, as UDP would drop it, instead of blocking the
//     sender forever on an unbuffered channel, and a stream to it is refused — so a hard stop
//     looks like a crashed host;
//   - packets are routed by address, never by node name, so two members may claim one name
//     (the duplicate-name case);
//   - packets to chosen members can be dropped while streams still work (a firewall that
//     blocks the UDP gossip port), and every byte sent is counted;
//   - a member's link can be cut and restored, as a cable is pulled and plugged back.
package memnet

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// packetQueue is how many packets a member may have waiting; beyond it packets are dropped,
// as a full socket buffer drops datagrams.
const packetQueue = 4096

// Network connects Transports. The zero value is ready to use.
type Network struct {
	mu     sync.RWMutex
	byAddr map[string]*Transport
	port   int
	sent   atomic.Uint64
	stream atomic.Uint64 // the part of sent written on streams
}

// NewTransport adds a member's transport at a fresh address 127.0.0.1:<port>.
func (n *Network) NewTransport() *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byAddr == nil {
		n.byAddr = map[string]*Transport{}
	}
	n.port++
	return n.attachLocked(n.port)
}

// attachLocked makes the transport at 127.0.0.1:port, the one packets and streams to it reach.
func (n *Network) attachLocked(port int) *Transport {
	t := &Transport{
		net:      n,
		ip:       net.IPv4(127, 0, 0, 1),
		port:     port,
		packetCh: make(chan *memberlist.Packet, packetQueue),
		streamCh: make(chan net.Conn),
		stopped:  make(chan struct{}),
	}
	t.addr = addr(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	n.byAddr[string(t.addr)] = t
	return t
}

// Restart gives a stopped member's address to a fresh transport: the same host started again
// after a crash (kill -9), as a restarted process binds its old gossip port.
func (n *Network) Restart(old *Transport) (*Transport, error) {
	if !old.down() {
		return nil, fmt.Errorf("memnet: %s is still running", old.addr)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attachLocked(old.port), nil
}

// BytesSent is every byte sent on the network so far: packets and stream writes.
func (n *Network) BytesSent() uint64 { return n.sent.Load() }

// StreamBytesSent is the part of BytesSent written on streams (memberlist's TCP).
func (n *Network) StreamBytesSent() uint64 { return n.stream.Load() }

func (n *Network) lookup(a string) *Transport {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.byAddr[a]
}

// Transport is one member's end of a Network. It implements memberlist.NodeAwareTransport.
type Transport struct {
	net      *Network
	ip       net.IP
	port     int
	addr     addr
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	stopped  chan struct{}
	stopOnce sync.Once
	sent     atomic.Uint64
	dropIn   atomic.Bool
	cut      atomic.Bool
	gate     atomic.Pointer[func()]
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Addr is the transport's address, host:port.
func (t *Transport) Addr() string { return string(t.addr) }

// BytesSent is every byte this member sent: packets and its side of streams.
func (t *Transport) BytesSent() uint64 { return t.sent.Load() }

// DropPackets makes the member deaf to packets (streams still connect): a firewall that
// blocks the UDP gossip port but not TCP.
func (t *Transport) DropPackets(drop bool) { t.dropIn.Store(drop) }

// Cut pulls the member's cable (true) or plugs it back (false): meanwhile nothing it sends
// arrives, nothing sent to it arrives, its new streams fail at once (no route) and new streams
// to it time out. Unlike Shutdown the member keeps running, and carries on once the link is back.
func (t *Transport) Cut(cut bool) { t.cut.Store(cut) }

// GateDials makes each new stream from the member call gate first, which may block: a slow
// network under a join in flight. nil removes it.
func (t *Transport) GateDials(gate func()) {
	if gate == nil {
		t.gate.Store(nil)
		return
	}
	t.gate.Store(&gate)
}

func (t *Transport) down() bool {
	select {
	case <-t.stopped:
		return true
	default:
		return false
	}
}

func (t *Transport) count(n int) {
	t.sent.Add(uint64(n))
	t.net.sent.Add(uint64(n))
}

// FinalAdvertiseAddr returns the transport's own address: it has exactly one.
func (t *Transport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.ip, t.port, nil
}

// WriteTo sends a packet; like UDP it never reports a lost one.
func (t *Transport) WriteTo(b []byte, a string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: a})
}

// WriteToAddress sends a packet to a.Addr (the name is ignored: routing is by address).
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	if t.down() {
		return now, errors.New("memnet: transport is shut down")
	}
	t.count(len(b))
	dest := t.net.lookup(a.Addr)
	if dest == nil || dest.down() || dest.dropIn.Load() || t.cut.Load() || dest.cut.Load() {
		return now, nil
	}
	// The sender may reuse its buffer once we return; the receiver reads later.
	buf := append([]byte(nil), b...)
	select {
	case dest.packetCh <- &memberlist.Packet{Buf: buf, From: t.addr, Timestamp: now}:
	default: // receiver's queue is full: dropped, as a datagram would be
	}
	return now, nil
}

// PacketCh delivers incoming packets.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout opens a stream to a.
func (t *Transport) DialTimeout(a string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: a}, timeout)
}

// DialAddressTimeout opens a stream to a.Addr; a missing or stopped member refuses it.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if g := t.gate.Load(); g != nil {
		(*g)()
	}
	if t.down() {
		return nil, errors.New("memnet: transport is shut down")
	}
	dest := t.net.lookup(a.Addr)
	if t.cut.Load() {
		// Our own cable is out: the kernel has no way to reach the peer.
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: addr(a.Addr), Err: errors.New("connect: no route to host")}
	}
	if dest != nil && dest.cut.Load() {
		// Nothing answers a SYN across the peer's pulled cable: the dial waits out its timeout.
		select {
		case <-time.After(timeout):
		case <-t.stopped:
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: addr(a.Addr), Err: fmt.Errorf("i/o timeout")}
	}
	if dest == nil || dest.down() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: addr(a.Addr), Err: errors.New("connect: connection refused")}
	}
	local, remote := net.Pipe()
	ours := &conn{Conn: local, local: t.addr, remote: dest.addr, owner: t}
	theirs := &conn{Conn: remote, local: dest.addr, remote: t.addr, owner: dest}
	var timer <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		timer = tm.C
	}
	select {
	case dest.streamCh <- theirs:
		return ours, nil
	case <-dest.stopped:
	case <-t.stopped:
	case <-timer:
		local.Close()
		remote.Close()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: addr(a.Addr), Err: fmt.Errorf("i/o timeout")}
	}
	local.Close()
	remote.Close()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: addr(a.Addr), Err: errors.New("connect: connection refused")}
}

// StreamCh delivers incoming streams.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown stops the member: from now on packets to it are dropped and streams refused.
func (t *Transport) Shutdown() error {
	t.stopOnce.Do(func() { close(t.stopped) })
	return nil
}

type addr string

func (a addr) Network() string { return "memnet" }
func (a addr) String() string  { return string(a) }

// conn is one end of a stream, with real-looking addresses (memberlist logs "from=<addr>") and
// its writes counted against its owner.
type conn struct {
	net.Conn
	local, remote addr
	owner         *Transport
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.owner.count(n)
	c.owner.net.stream.Add(uint64(n))
	return n, err
}
