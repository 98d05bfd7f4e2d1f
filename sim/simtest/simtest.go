// Package simtest is test support for the code that drives the simulators as real programs:
// building one into a folder under the name the product looks for, and a buffer that a
// running program's output can be written to while a test reads it. Only tests import it.
package simtest

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// Build compiles the Go package pkg (an import path, or a path relative to the caller's
// package) into dir/name and returns its path. It uses the go command of the toolchain running
// the tests, so it works whatever PATH holds.
func Build(dir, pkg, name string) (string, error) {
	bin := filepath.Join(dir, name)
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// LlamaServer builds the llama-server simulator into dir as "llama-server", so the agent and
// its driver launch it exactly as they launch the real program.
func LlamaServer(dir string) (string, error) {
	return Build(dir, "github.com/llmkube/mesh/cmd/llama-server-sim", "llama-server")
}

// Buffer collects output written by other goroutines (a program's logs) while a test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
