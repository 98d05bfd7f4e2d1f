// Package enginetest finds the real engines — llama.cpp's llama-server, Ollama — and a small
// GGUF model for conformance tests. Each is looked up in an environment variable first (so anyone
// can point the tests at their own build), then in ../shared/engines/ beside the project root
// (where CI keeps a read-only copy); a test that needs one skips, saying why, when neither has it.
// Only tests import it.
package enginetest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Environment variables naming the real engines and the test model.
const (
	EnvLlamaServer = "LLMKUBE_LLAMA_SERVER" // path to a llama-server binary
	EnvOllama      = "LLMKUBE_OLLAMA"       // path to an ollama binary
	EnvGGUF        = "LLMKUBE_TEST_GGUF"    // path to a small GGUF model that llama-server can load
)

// SharedDir is where the engines are looked for when no variable names them, relative to the
// project root (the folder holding go.mod).
const SharedDir = "../shared/engines"

// LlamaServer is the real llama-server's path, or skips t.
func LlamaServer(t testing.TB) string {
	t.Helper()
	return find(t, EnvLlamaServer, "llama-server", true)
}

// Ollama is the real ollama's path, or skips t. It runs llama-server found through the lib/ollama
// folder next to it, so it must be run where it lies.
func Ollama(t testing.TB) string {
	t.Helper()
	return find(t, EnvOllama, "ollama", true)
}

// TinyGGUF is a small real GGUF model (random weights, a real tokenizer), or skips t. It may be
// read-only: a test that writes next to it must copy it first.
func TinyGGUF(t testing.TB) string {
	t.Helper()
	return find(t, EnvGGUF, filepath.Join("models", "tiny.gguf"), false)
}

func find(t testing.TB, env, rel string, executable bool) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if err := check(p, executable); err != nil {
			t.Fatalf("%s=%s: %v", env, p, err) // asked for explicitly: a wrong path is an error, not a skip
		}
		return p
	}
	root, err := projectRoot()
	if err != nil {
		t.Skipf("no real %s: %s is unset and %v", rel, env, err)
	}
	p := filepath.Join(root, SharedDir, rel)
	if err := check(p, executable); err != nil {
		t.Skipf("no real %s: %s is unset and %v", rel, env, err)
	}
	return p
}

func check(p string, executable bool) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", p)
	case executable && fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// projectRoot is the nearest folder above the working directory (a test's package folder) that
// holds go.mod.
func projectRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
