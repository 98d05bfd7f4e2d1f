package mesh

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNodeNameIsUniqueAndStable(t *testing.T) {
	dir := t.TempDir()
	n1, err := resolveNodeName("", dir, "raspberrypi")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^raspberrypi-[0-9a-f]{6}$`), n1)
	n2, err := resolveNodeName("", dir, "raspberrypi")
	require.NoError(t, err)
	require.Equal(t, n1, n2, "kept in the state dir")

	other, err := resolveNodeName("", t.TempDir(), "raspberrypi")
	require.NoError(t, err)
	require.NotEqual(t, n1, other, "two Pis flashed from one image get different names")

	info, err := os.Stat(filepath.Join(dir, nodeNameFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	named, err := resolveNodeName("kitchen-pi", dir, "whatever")
	require.NoError(t, err)
	require.Equal(t, "kitchen-pi", named)

	console, err := resolveNodeName("", "", "MacBook-Pro.local")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^macbook-pro-[0-9a-f]{6}$`), console)
}

func TestBadSavedNodeNameIsAClearError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, nodeNameFile), []byte("Not A Name!\n"), 0o600))
	_, err := resolveNodeName("", dir, "h")
	require.ErrorContains(t, err, "fix or delete the file")
	b, _ := os.ReadFile(filepath.Join(dir, nodeNameFile))
	require.Equal(t, "Not A Name!\n", string(b), "the file is left as it was")
}

func TestSanitizeHostname(t *testing.T) {
	for in, want := range map[string]string{
		"raspberrypi":         "raspberrypi",
		"My_Host.example.com": "my-host",
		"--":                  "host",
		"":                    "host",
		"élan":                "lan",
		"a23456789012345678901234567890123456789012345678901234567890": "a23456789012345678901234567890123456789012345678",
	} {
		require.Equal(t, want, sanitizeHostname(in), in)
	}
}
