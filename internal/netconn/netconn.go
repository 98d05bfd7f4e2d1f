// Package netconn holds what the agent's clients check on a kept connection.
package netconn

import (
	"net"
	"syscall"
)

// Quiet reports whether the peer has neither closed c nor written on it: a look at the socket
// that never waits (one system call). A connection kept for a request that is not sent yet is
// checked so before use, as a request cannot be sent again once written: one the peer closed
// (it stopped, or restarted) is replaced instead of failing the request.
func Quiet(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read: open and quiet. Anything else (an end, a reset, bytes before any
		// request) is a connection not to send a request on.
		quiet = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && quiet
}
