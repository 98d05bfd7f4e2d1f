package store

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTempFolderRefusedUnlessAllowed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "models")
	_, err := Open(dir, Options{GOOS: "linux", TempDirs: []string{filepath.Dir(dir)}})
	var ue *UnsafeError
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, "temporary folder") || !strings.Contains(err.Error(), "--models-dir") {
		t.Fatalf("store under the temp folder: err=%v", err)
	}
	s, err := Open(dir, Options{GOOS: "linux", AllowTemp: true})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("new store: %v mode %v, want 0700", err, fi.Mode().Perm())
	}
}

func TestDefaultTempDirsIncludeOSTempDir(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "m"), Options{GOOS: "linux"})
	if err == nil {
		t.Fatal("a store under os.TempDir() was accepted by default")
	}
}

func TestWritableByOthersRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "models")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{GOOS: "linux", AllowTemp: true})
	if err == nil || !strings.Contains(err.Error(), "chmod 700 "+dir) {
		t.Fatalf("group-writable store: err=%v", err)
	}
}

func TestWritableParentRefused(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(parent, "models"), Options{GOOS: "darwin", AllowTemp: true})
	if err == nil || !strings.Contains(err.Error(), "chmod go-w "+parent) {
		t.Fatalf("store under a world-writable folder: err=%v", err)
	}
	// The sticky bit (as on /tmp) makes the parent acceptable.
	if err := os.Chmod(parent, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(parent, "models"), Options{GOOS: "darwin", AllowTemp: true}); err != nil {
		t.Fatalf("sticky parent: %v", err)
	}
}

func TestOwnedByAnotherUserRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a folder to another user")
	}
	dir := filepath.Join(t.TempDir(), "models")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{GOOS: "darwin", AllowTemp: true})
	if err == nil || !strings.Contains(err.Error(), "owned by user id 4242") || !strings.Contains(err.Error(), ":staff") {
		t.Fatalf("store owned by another user: err=%v", err)
	}
}

func TestCleanPartials(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "models"), Options{AllowTemp: true})
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(s.Path(), "hf", "owner")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(sub, "m.gguf")
	gone := []string{filepath.Join(sub, "m.gguf"+PartialSuffix), filepath.Join(s.Path(), "x.gguf"+PartialSuffix)}
	resume := filepath.Join(s.Path(), "y.gguf"+PartialSuffix)
	for _, p := range append(gone, keep, resume) {
		if err := os.WriteFile(p, []byte("GGUF"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for _, p := range gone {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	// Keep what is newer than the oldest placement still pulling: it may be that placement's.
	since := time.Now().Add(-time.Minute)
	removed, err := s.CleanPartials(slog.New(slog.NewTextHandler(io.Discard, nil)), func(_ string, mod time.Time) bool { return !mod.Before(since) })
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 {
		t.Fatalf("removed %v, want the two partial files", removed)
	}
	for _, p := range gone {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s still there", p)
		}
	}
	for _, p := range []string{keep, resume} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s was removed: %v", p, err)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/home/pi/models":          "/home/pi/models",
		"/Users/a/Library/App Sup": "'/Users/a/Library/App Sup'",
		"/x/it's":                  `'/x/it'\''s'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// Precheck answers as Open would, and makes nothing.
func TestPrecheckMakesNothing(t *testing.T) {
	base := t.TempDir()
	opt := Options{GOOS: "linux", AllowTemp: true}
	dir := filepath.Join(base, "a", "b", "models")
	if err := Precheck(dir, opt); err != nil {
		t.Fatalf("a safe missing folder: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Precheck made a folder: %v", err)
	}

	// Under a folder others can write to (no sticky bit): refused before anything exists.
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	err := Precheck(filepath.Join(shared, "llmkube", "models"), opt)
	var ue *UnsafeError
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, shared) {
		t.Fatalf("store under a world-writable folder: err=%v", err)
	}
	if _, err := os.Stat(filepath.Join(shared, "llmkube")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Precheck made a folder: %v", err)
	}

	// Under the temporary folder unless allowed, and an existing unsafe folder itself.
	if err := Precheck(filepath.Join(base, "x"), Options{GOOS: "linux", TempDirs: []string{base}}); err == nil {
		t.Fatal("a store under the temporary folder passed the precheck")
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o757); err != nil {
		t.Fatal(err)
	}
	if err := Precheck(open, opt); err == nil {
		t.Fatal("a world-writable store passed the precheck")
	}
}
