// Command delayline is the speed tests' stand-in for netem, which this kernel lacks
// (CONFIG_NET_SCH_NETEM is off): it joins two network interfaces of one namespace as a cable
// that carries every frame from one to the other -delay after it arrived, in order, each way.
// A host's end of the LAN goes through it, so everything that host sends or receives crosses a
// link with that latency, the bare baselines' traffic as much as the mesh's.
//
// Each way is one OS thread that waits in ppoll(2) for the next frame or the next frame due,
// whichever comes first: Go's own timers round a wait under a millisecond up to one when the
// process is idle, too coarse for a delay of 0.3 ms. A frame is due delay after the kernel
// received it (its SO_TIMESTAMPNS), so the thread's own wake-up to read it is not added. Packet sockets with virtio-net headers
// carry the veth's segmentation offload through unchanged, so a 64 KB TCP segment is one frame.
// Like netem's default limit, at most -limit frames wait each way; more are dropped.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	a := flag.String("a", "", "one interface")
	b := flag.String("b", "", "the other interface")
	delay := flag.Duration("delay", 300*time.Microsecond, "what each frame waits, each way")
	limit := flag.Int("limit", 1000, "frames waiting each way, beyond which they are dropped")
	flag.Parse()
	if *a == "" || *b == "" || *delay < 0 || *limit < 1 {
		log.Fatal("usage: delayline -a IFACE -b IFACE [-delay 300us] [-limit 1000]")
	}
	ina, outa, err := open(*a)
	if err != nil {
		log.Fatal(err)
	}
	inb, outb, err := open(*b)
	if err != nil {
		log.Fatal(err)
	}
	errc := make(chan error, 2)
	log.Printf("delaying frames between %s and %s by %v each way", *a, *b, *delay)
	go func() { errc <- pass(ina, outb, *delay, *limit) }()
	go func() { errc <- pass(inb, outa, *delay, *limit) }()
	log.Fatal(<-errc)
}

// open makes the two packet sockets of one interface: in receives every frame that arrives on
// it (none it sends), out sends and receives nothing (protocol 0).
func open(name string) (in, out int, err error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, 0, err
	}
	for _, s := range []struct {
		fd    *int
		proto uint16
		flags int
	}{{&in, unix.ETH_P_ALL, unix.SOCK_NONBLOCK}, {&out, 0, 0}} {
		proto := int(htons(s.proto))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|s.flags, proto)
		if err != nil {
			return 0, 0, fmt.Errorf("a packet socket on %s: %w", name, err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return 0, 0, fmt.Errorf("virtio-net headers on %s: %w", name, err)
		}
		if s.proto != 0 {
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
				return 0, 0, fmt.Errorf("ignoring what is sent on %s: %w", name, err)
			}
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
				return 0, 0, fmt.Errorf("receive times on %s: %w", name, err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(s.proto), Ifindex: ifi.Index}); err != nil {
			return 0, 0, fmt.Errorf("binding to %s: %w", name, err)
		}
		*s.fd = fd
	}
	return in, out, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

type frame struct {
	due time.Time
	b   []byte
}

// pass moves frames from in to out, each delay after the kernel received it.
func pass(in, out int, delay time.Duration, limit int) error {
	runtime.LockOSThread() // ppoll's timeout and the timer slack belong to this thread
	// Linux lets a sleeping thread's timer fire up to 50 µs late by default.
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("timer slack: %w", err)
	}
	buf, oob := make([]byte, 1<<18), make([]byte, 128)
	var q []frame
	fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
	for {
		var timeout *unix.Timespec
		if len(q) > 0 {
			ts := unix.NsecToTimespec(max(0, time.Until(q[0].due).Nanoseconds()))
			timeout = &ts
		}
		if _, err := unix.Ppoll(fds, timeout, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("ppoll: %w", err)
		}
		for {
			n, oobn, _, _, err := unix.Recvmsg(in, buf, oob, 0)
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if err != nil {
				return fmt.Errorf("reading: %w", err)
			}
			if len(q) < limit {
				q = append(q, frame{due: received(oob[:oobn]).Add(delay), b: append([]byte(nil), buf[:n]...)})
			}
		}
		now := time.Now()
		for len(q) > 0 && !q[0].due.After(now) {
			// A frame the peer's queue has no room for is lost, as on a congested link.
			if _, err := unix.Write(out, q[0].b); err != nil && !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.EAGAIN) {
				return fmt.Errorf("writing: %w", err)
			}
			q[0].b = nil
			q = q[1:]
		}
	}
}

// received is the kernel's receive time of a frame, from its control message; now if it has none.
func received(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
				return time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:])))
			}
		}
	}
	return time.Now()
}
