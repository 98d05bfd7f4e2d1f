package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

func sample() State {
	return State{
		Identity: Identity{NodeID: "0123456789abcdef", NodeName: "pi-1", CreatedAt: time.Unix(1700000000, 0).UTC()},
		Placements: []api.Placement{{
			ID: "p1", Model: "qwen2:1.5b", Source: "hailo://qwen2:1.5b", Runtime: api.RuntimeHailoOllama,
			Namespace: "default", Context: 2048, Priority: api.PriorityNormal, State: api.StateReady,
			Memory: api.SizeEstimate{Bytes: 1 << 30, Method: api.SizeHead, Device: api.DeviceHailo},
		}},
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, ok, err := d.Load(); err != nil || ok {
		t.Fatalf("fresh dir: ok=%v err=%v", ok, err)
	}
	want := sample()
	if err := d.Save(want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := d.Load()
	if err != nil || !ok {
		t.Fatalf("load: ok=%v err=%v", ok, err)
	}
	if got.Identity != want.Identity || len(got.Placements) != 1 || got.Placements[0].Memory != want.Placements[0].Memory || got.Placements[0].State != api.StateReady {
		t.Fatalf("round trip changed the state: %+v", got)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temp file left behind: %s", e.Name())
		}
	}
}

func TestOpenIsExclusive(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: err=%v, want in use", err)
	}
	d.Close()
	d2, err := Open(dir)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	d2.Close()
}

func TestDamagedStateIsRefusedAndKept(t *testing.T) {
	for name, doc := range map[string]string{
		"not json":    `{"version":1,"placements":[`,
		"newer":       `{"version":99,"placements":[]}`,
		"no version":  `{"placements":[]}`,
		"duplicate":   `{"version":1,"placements":[{"id":"a","source":"/m.gguf","runtime":"llama-server"},{"id":"a","source":"/m.gguf","runtime":"llama-server"}]}`,
		"bad runtime": `{"version":1,"placements":[{"id":"a","source":"/m.gguf","runtime":"vllm"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, FileName)
			if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			d, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if _, _, err := d.Load(); err == nil || !strings.Contains(err.Error(), file) {
				t.Fatalf("Load: err=%v, want an error naming %s", err, file)
			}
			b, _ := os.ReadFile(file)
			if string(b) != doc {
				t.Fatal("a damaged state file was changed")
			}
		})
	}
}

func TestJoinFile(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, ok, err := d.LoadJoin(); ok || err != nil {
		t.Fatalf("no join yet: ok=%v err=%v", ok, err)
	}
	secret, err := api.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	j := api.Join{MeshID: "home", Secret: secret, Seeds: []string{"10.0.0.2:7946"}}
	if err := d.SaveJoin(j); err != nil {
		t.Fatal(err)
	}
	got, ok, err := d.LoadJoin()
	if err != nil || !ok || got.String() != j.String() {
		t.Fatalf("LoadJoin: %v %v %v", got, ok, err)
	}
	// A bare join string in a file given by --join-file works too.
	bare := filepath.Join(dir, "join.txt")
	if err := os.WriteFile(bare, []byte(j.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := LoadJoinFile(bare); err != nil || !ok || got.MeshID != "home" {
		t.Fatalf("bare join file: %v %v %v", got, ok, err)
	}
	if err := os.Chmod(bare, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadJoinFile(bare); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable join file: err=%v", err)
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(sample())
	f.Add(b)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"placements":[{"id":"x"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			return
		}
		// Whatever decodes must survive a round trip unchanged in its essentials.
		out, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Decode(out)
		if err != nil {
			t.Fatalf("re-decoding an encoded state: %v", err)
		}
		if len(s2.Placements) != len(s.Placements) || s2.Identity.NodeID != s.Identity.NodeID {
			t.Fatal("round trip lost data")
		}
	})
}

// A document Load would refuse is never written: the file on disk stays the last one that loads.
func TestSaveRefusesWhatWouldNotLoad(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Save(sample()); err != nil {
		t.Fatal(err)
	}
	big := sample()
	big.Placements[0].Reason = strings.Repeat("x", MaxSize)
	if err := d.Save(big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("saving %d bytes of reason: %v, want ErrTooLarge", MaxSize, err)
	}
	got, ok, err := d.Load()
	if err != nil || !ok || got.Placements[0].Reason != "" {
		t.Fatalf("after a refused save: ok=%v err=%v", ok, err)
	}
}
