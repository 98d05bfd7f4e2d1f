// Package enginetest finds the real engines — llama.cpp's llama-server, Ollama — and a small
// GGUF model for conformance tests. Each is looked up in an environment variable first (so anyone
// can point the tests at their own build), then in ../shared/engines/ beside the project root
// (where CI keeps a read-only copy); a test that needs one skips, saying why, when neither has it.
// Only tests import it.
package enginetest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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

// RPCServer is the real ggml-rpc-server's path (llama.cpp's RPC worker), found beside the
// llama-server LlamaServer finds, or skips t.
func RPCServer(t testing.TB) string {
	t.Helper()
	p := filepath.Join(filepath.Dir(LlamaServer(t)), "ggml-rpc-server")
	if err := check(p, true); err != nil {
		t.Skipf("no real ggml-rpc-server beside llama-server: %v", err)
	}
	return p
}

// Ollama is a runnable copy of the real ollama, or skips t. Ollama runs the engines it finds in
// lib/ollama/ next to its own executable; a copy of shared/ may have turned those links into
// files holding their targets, so the binary is copied into a temporary folder with a lib/ollama/
// of real links.
func Ollama(t testing.TB) string {
	t.Helper()
	src := find(t, EnvOllama, "ollama", true)
	dir := t.TempDir()
	bin := filepath.Join(dir, "ollama")
	if err := copyFile(src, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(filepath.Dir(src), "lib", "ollama")
	entries, err := os.ReadDir(lib)
	if err != nil {
		t.Skipf("no real ollama: %s has no lib/ollama beside it: %v", src, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "lib", "ollama"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		target, err := linkTarget(filepath.Join(lib, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "lib", "ollama", e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// linkTarget is where p points: a symbolic link's target, or the path a small file holds in
// its place (a copy that lost its links), made absolute; anything else is p itself.
func linkTarget(p string) (string, error) {
	target, err := os.Readlink(p)
	if err != nil {
		fi, serr := os.Stat(p)
		if serr != nil {
			return "", serr
		}
		if fi.Size() > 4096 || fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			return "", rerr
		}
		target = strings.TrimSpace(string(b))
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(p), target)
	}
	if _, err := os.Stat(target); err != nil {
		return "", fmt.Errorf("%s points to %s: %w", p, target, err)
	}
	return target, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// OllamaDaemon is a real Ollama serving on a loopback port for one test, its models in a
// temporary folder. Its environment points every proxy at a closed loopback port, so the
// registry and update checks Ollama tries fail at once and nothing leaves the machine.
type OllamaDaemon struct {
	URL    string   // "http://127.0.0.1:<port>"
	Models string   // its models folder (OLLAMA_MODELS)
	bin    string   // the runnable copy
	env    []string // the daemon's environment, which its CLI shares
}

// noNetwork are proxy settings that send any outbound request to a closed loopback port.
var noNetwork = []string{"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost"}

// StartOllama starts the real Ollama (Ollama), or skips t; t's cleanup stops it and whatever it
// started.
func StartOllama(t testing.TB) *OllamaDaemon {
	t.Helper()
	bin := Ollama(t)
	dir := t.TempDir()
	env := append([]string{"HOME=" + dir, "PATH=/usr/bin:/bin", "OLLAMA_MODELS=" + filepath.Join(dir, "models"), "OLLAMA_HOST=127.0.0.1:0"}, noNetwork...)
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the daemon and the runners it started
		cmd.Wait()
	})
	// It logs `Listening on 127.0.0.1:<port> (version …)` once it listens.
	listening := regexp.MustCompile(`Listening on (127\.0\.0\.1:\d+)`)
	addr := make(chan string, 1)
	var log bytes.Buffer
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default: // only the first counts
				}
			}
			if log.Len() < 64<<10 {
				log.WriteString(sc.Text() + "\n")
			}
		}
		close(addr)
		io.Copy(io.Discard, out) // keep draining, whatever a line's length
	}()
	a, ok := <-addr
	if !ok {
		t.Fatalf("ollama serve ended without listening:\n%s", log.String())
	}
	d := &OllamaDaemon{URL: "http://" + a, Models: filepath.Join(dir, "models"), bin: bin, env: append(env[:len(env):len(env)], "OLLAMA_HOST="+a)}
	return d
}

// Create makes model name from a GGUF file with `ollama create` (a Modelfile of one FROM line).
func (d *OllamaDaemon) Create(t testing.TB, name, gguf string) {
	t.Helper()
	mf := filepath.Join(t.TempDir(), "Modelfile")
	if err := os.WriteFile(mf, []byte("FROM "+gguf+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(d.bin, "create", name, "-f", mf)
	cmd.Env = d.env
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ollama create %s: %v\n%s", name, err, b)
	}
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

// TinyMMProj writes a tiny multimodal projector with random weights for a text model of
// embedding length textDim (TinyGGUF's: 64) into a temporary folder and returns its path, or
// skips t: it is made by make_mmproj.py beside this file, which needs /usr/bin/python3 with
// numpy and gguf-py from the shared engines folder.
func TinyMMProj(t testing.TB, textDim int) string {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy").Run(); err != nil {
		t.Skipf("making a projector needs /usr/bin/python3 with numpy (python3-numpy): %v", err)
	}
	root, err := projectRoot()
	if err != nil {
		t.Skipf("no gguf-py to make a projector with: %v", err)
	}
	ggufPy := filepath.Join(root, SharedDir, "gguf-py")
	if _, err := os.Stat(ggufPy); err != nil {
		t.Skipf("no gguf-py to make a projector with: %v", err)
	}
	out := filepath.Join(t.TempDir(), "mmproj.gguf")
	cmd := exec.Command("/usr/bin/python3", filepath.Join(root, "engines", "enginetest", "make_mmproj.py"),
		"--gguf-py", ggufPy, "--out", out, "--text-dim", fmt.Sprint(textDim))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make_mmproj.py: %v\n%s", err, b)
	}
	return out
}
