package gguf

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTrainedContext(t *testing.T) {
	for _, want := range []int{2048, 32768} {
		spec, _ := Preset("sim-tiny")
		spec.ContextLength = want
		p := filepath.Join(t.TempDir(), "m.gguf")
		if err := Write(p, spec); err != nil {
			t.Fatal(err)
		}
		got, err := TrainedContext(p)
		if err != nil || got != want {
			t.Fatalf("TrainedContext = %d, %v; want %d", got, err, want)
		}
	}
	bad := filepath.Join(t.TempDir(), "x.gguf")
	os.WriteFile(bad, []byte("not a model"), 0o600)
	if _, err := TrainedContext(bad); err == nil {
		t.Fatal("a file that is not GGUF was read")
	}
	os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00"), 0o600)
	if _, err := TrainedContext(bad); err == nil {
		t.Fatal("a truncated header was read")
	}
}

func FuzzTrainedContext(f *testing.F) {
	spec, _ := Preset("sim-tiny")
	p := filepath.Join(f.TempDir(), "m.gguf")
	if err := Write(p, spec); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	f.Add(b[:min(len(b), 4096)])
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.gguf")
		os.WriteFile(p, data, 0o600)
		TrainedContext(p) // must not panic or hang
	})
}
