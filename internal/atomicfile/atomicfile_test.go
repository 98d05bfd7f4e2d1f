package atomicfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")

	require.NoError(t, WriteFile(path, []byte("first\n"), 0o600))
	require.NoError(t, WriteFile(path, []byte("second\n"), 0o644))

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "second\n", string(b))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "the mode given, not the temporary file's 0600")
	assertOnly(t, dir, "state.json")
}

func TestWriteFileFailureLeavesTheOldFileAndNoTemporary(t *testing.T) {
	dir := t.TempDir()
	// A folder where the file should go: the rename fails after the temporary file was written.
	path := filepath.Join(dir, "taken")
	require.NoError(t, os.MkdirAll(filepath.Join(path, "inside"), 0o700))

	require.Error(t, WriteFile(path, []byte("data"), 0o600))

	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "what stood at path is still there")
	assertOnly(t, dir, "taken")
}

func TestWriteFileInAMissingFolder(t *testing.T) {
	err := WriteFile(filepath.Join(t.TempDir(), "absent", "f"), []byte("x"), 0o600)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestRenameMovesTheFile(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "f.partial"), filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(from, []byte("body"), 0o600))
	require.NoError(t, os.WriteFile(to, []byte("stale"), 0o600))

	require.NoError(t, Rename(from, to))

	b, err := os.ReadFile(to)
	require.NoError(t, err)
	assert.Equal(t, "body", string(b))
	assertOnly(t, dir, "f")
	assert.ErrorIs(t, Rename(from, to), os.ErrNotExist, "nothing left to move")
}

// assertOnly checks that dir holds exactly the named entries: no temporary file left over.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	assert.ElementsMatch(t, names, got)
}
