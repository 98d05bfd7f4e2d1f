// Package atomicfile replaces files so that a crash or a power cut leaves the old content or
// the new one, never a mix or an empty file: the agent's state, the member name, the last-known
// peers, a finished download and the console's history are all written this way, by this code.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile replaces path with data and mode perm: a temporary file in the same folder (a
// rename is atomic only within one filesystem), written and fsynced, then renamed over path.
// On an error path is untouched and no temporary file is left behind.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	err = fill(tmp, data, perm)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return Rename(tmp.Name(), path)
}

// fill sets the mode first, so the content is never readable under a wider one.
func fill(f *os.File, data []byte, perm os.FileMode) error {
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}

// Rename moves from, a file already fsynced, over to, and fsyncs the folder: the rename is
// durable only once the folder's entry is on disk. The folder's fsync is best effort, since
// some filesystems cannot sync a folder and the file is in place by then either way.
func Rename(from, to string) error {
	if err := os.Rename(from, to); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(to)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
