package assets

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/hwprobe"
)

// Each demo host is a root the probe reads as the machine it stands for.
func TestDemoHostsProbe(t *testing.T) {
	dir := t.TempDir()
	want := map[string]struct{ os, arch, accel string }{
		"pi5-hailo":  {"linux", "arm64", "Hailo-10H"},
		"mac-mini":   {"darwin", "arm64", "Apple M2"},
		"gpu-server": {"linux", "amd64", ""},
	}
	for _, name := range DemoHosts {
		root, err := ExtractDemoHost(name, dir)
		require.NoError(t, err)
		w := want[name]
		info := hwprobe.Probe(context.Background(), hwprobe.Options{Root: root, OS: w.os, Arch: w.arch})
		assert.Positive(t, info.Memory.Total, name)
		assert.Positive(t, info.CPUs, name)
		if w.accel != "" {
			require.NotEmpty(t, info.Accelerators, name)
			assert.Contains(t, info.Accelerators[0].Name, w.accel, name)
		}
	}
	_, err := ExtractDemoHost("nope", dir)
	assert.Error(t, err)
}
