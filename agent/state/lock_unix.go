//go:build unix

package state

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock: the kernel drops it when the process dies,
// so a crashed agent never leaves a stale lock behind.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
