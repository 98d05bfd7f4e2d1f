package llamaserver

import "syscall"

// sysProcAttr puts llama-server in its own process group (so a stop reaches anything it
// starts) and has the kernel send it SIGTERM if the agent dies: an orphaned engine would hold
// memory and a port that a restarted agent knows nothing about.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
