//go:build !unix

package state

import (
	"errors"
	"os"
)

// lockFile: the agent runs only on Linux and macOS; elsewhere it refuses to start before this.
func lockFile(*os.File) error { return errors.New("state dir locking needs a Unix system") }
