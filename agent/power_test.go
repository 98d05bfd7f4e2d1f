package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmkube/mesh/hwprobe"
)

// An agent reads its power source again at each detection round, as it does its free memory:
// a laptop unplugged says so in its host state, and plugged in again says so too.
func TestHostOnBatteryRefreshed(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if err := os.CopyFS(root, os.DirFS(filepath.Join("..", "hwprobe", "testdata", "x86-nvidia"))); err != nil {
		t.Fatal(err)
	}
	setPower := func(status, online string) {
		for file, v := range map[string]string{"BAT0/type": "Battery", "BAT0/status": status, "AC/type": "Mains", "AC/online": online} {
			p := filepath.Join(root, "sys", "class", "power_supply", filepath.FromSlash(file))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			// Renamed into place: sysfs never shows a half-written value.
			if err := os.WriteFile(p+".new", []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(p+".new", p); err != nil {
				t.Fatal(err)
			}
		}
	}
	setPower("Charging", "1")
	opts := hwprobe.Options{Root: root, OS: "linux", Arch: "amd64"}
	a := newBareAgent(t, "x86-nvidia", func(c *Config) {
		c.Host = hwprobe.Probe(context.Background(), opts)
		c.Reprobe = func(ctx context.Context) hwprobe.Info { return hwprobe.ProbeLive(ctx, opts) }
		c.DetectInterval = 20 * time.Millisecond
	})
	serve(t, a, nil)
	if a.Host().OnBattery {
		t.Fatal("plugged in, yet on battery")
	}
	setPower("Discharging", "0")
	waitFor(t, func() bool { return a.Host().OnBattery }, "the host on battery once unplugged")
	setPower("Full", "1")
	waitFor(t, func() bool { return !a.Host().OnBattery }, "the host off battery once plugged in")
}
