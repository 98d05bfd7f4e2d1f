//go:build unix && !linux

package llamaserver

import "syscall"

// sysProcAttr puts llama-server in its own process group, so a stop reaches anything it
// starts. (Only Linux can tie a child's life to its parent's.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
