package hwprobe

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// maxFileSize bounds every read: files under /proc, /sys and /dev can be anything, and a probe
// must not be talked into reading gigabytes. /proc/cpuinfo on a 256-core host is about 500 KiB.
const maxFileSize = 4 << 20

// errTooLarge reports a file longer than maxFileSize.
var errTooLarge = errors.New("file too large")

// rootFS reads a host's files under a root directory: "/" for this host, a fixture tree in tests.
// Paths are written as on the host ("/proc/meminfo") and errors name them that way, so a note
// reads the same whether it came from a fixture or from the machine.
type rootFS struct {
	fsys fs.FS
}

func newRootFS(root string) rootFS {
	return rootFS{fsys: os.DirFS(root)}
}

// rel turns a host path into a path inside the root. Cleaning it as an absolute path first
// drops any "..", so the result never leaves the root.
func rel(hostPath string) string {
	p := strings.TrimPrefix(path.Clean("/"+hostPath), "/")
	if p == "" {
		return "."
	}
	return p
}

// hostErr rewrites an fs error so it names the host path rather than the path inside the root.
// The common causes are reduced to fs's portable errors, so notes read the same on every OS.
func hostErr(op, hostPath string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = fs.ErrNotExist
	case errors.Is(err, fs.ErrPermission):
		err = fs.ErrPermission
	}
	return &fs.PathError{Op: op, Path: hostPath, Err: err}
}

// readFile reads a whole file of at most maxFileSize bytes.
func (r rootFS) readFile(hostPath string) ([]byte, error) {
	b, err := r.readPrefix(hostPath, maxFileSize+1)
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileSize {
		return nil, hostErr("read", hostPath, errTooLarge)
	}
	return b, nil
}

// readPrefix reads at most n bytes from the start of a file.
func (r rootFS) readPrefix(hostPath string, n int64) ([]byte, error) {
	f, err := r.fsys.Open(rel(hostPath))
	if err != nil {
		return nil, hostErr("open", hostPath, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return nil, hostErr("read", hostPath, err)
	}
	return b, nil
}

// readString reads a small sysfs- or procfs-style file and trims the surrounding white space.
func (r rootFS) readString(hostPath string) (string, error) {
	b, err := r.readFile(hostPath)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// glob returns the host paths matching a pattern written as a host path.
func (r rootFS) glob(hostPattern string) ([]string, error) {
	matches, err := fs.Glob(r.fsys, rel(hostPattern))
	if err != nil {
		return nil, fmt.Errorf("glob %s: %w", hostPattern, err)
	}
	out := make([]string, len(matches))
	for i, m := range matches {
		out[i] = "/" + m
	}
	return out, nil
}
