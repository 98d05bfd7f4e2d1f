// Package simtest is test support for the code that drives the simulators as real programs:
// building one into a folder under the name the product looks for, a TestMain that does so
// once for a package's tests, and a buffer that a
// running program's output can be written to while a test reads it. Only tests import it.
package simtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
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

// Main is the TestMain of a package whose tests run programs: build puts them into a fresh
// temporary folder, the tests run, the folder goes, and the process exits with the tests'
// status (1, saying why, when the folder or a build fails).
func Main(m *testing.M, build func(dir string) error) {
	dir, err := os.MkdirTemp("", "simtest-bin-")
	if err == nil {
		if err = build(dir); err != nil {
			os.RemoveAll(dir)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// LlamaServer builds the llama-server simulator into dir as "llama-server", so the agent and
// its driver launch it exactly as they launch the real program.
func LlamaServer(dir string) (string, error) {
	return Build(dir, "github.com/llmkube/mesh/cmd/llama-server-sim", "llama-server")
}

// RPCServer links the llama-server simulator built by LlamaServer as "ggml-rpc-server" beside
// it: under that name it is a simulated RPC worker of splits. The name is
// engines/llamaserver.RPCBinaryName, not imported: that package's tests import this one.
func RPCServer(llamaServer string) (string, error) {
	link := filepath.Join(filepath.Dir(llamaServer), "ggml-rpc-server")
	return link, os.Symlink(filepath.Base(llamaServer), link)
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
