//go:build unix && !linux

package llamaserver

import (
	"errors"
	"syscall"

	"github.com/llmkube/mesh/engines"
)

// sysProcAttr puts llama-server in its own process group, so a stop reaches anything it
// starts. (Only Linux can tie a child's life to its parent's.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// resident is not measured outside Linux: the estimate stands.
func resident(int) (engines.Resident, error) {
	return engines.Resident{}, errors.New("resident memory is measured on Linux only")
}

// readBytes is not measured outside Linux: a start's progress is a split's bytes sent alone.
func readBytes(int) int64 { return 0 }
