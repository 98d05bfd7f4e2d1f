// Package assets holds the files the programs embed: the simulated hosts of the demo mesh
// (hwprobe roots recorded in the kernel's and sysctl's own formats).
package assets

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed all:demo
var demo embed.FS

// DemoHosts names the simulated hosts of the demo mesh, each an hwprobe root.
var DemoHosts = []string{"pi5-hailo", "mac-mini", "gpu-server"}

// ExtractDemoHost writes the hwprobe root of a demo host under dir and returns its path.
func ExtractDemoHost(name, dir string) (string, error) {
	src, err := fs.Sub(demo, "demo/hosts/"+name)
	if err != nil {
		return "", err
	}
	if _, err := fs.Stat(src, "."); err != nil {
		return "", fmt.Errorf("no demo host %q", name)
	}
	root := filepath.Join(dir, name)
	err = fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(root, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return "", fmt.Errorf("extracting demo host %s: %w", name, err)
	}
	return root, nil
}
