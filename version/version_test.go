package version

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStampedValuesWin(t *testing.T) {
	old := [3]string{Version, Commit, Date}
	t.Cleanup(func() { Version, Commit, Date = old[0], old[1], old[2] })
	Version, Commit, Date = "1.2.3", "0123456789abcdef0123", "2026-12-01T00:00:00Z"
	i := Get()
	assert.Equal(t, "1.2.3", i.Version)
	assert.Equal(t, "0123456789abcdef0123", i.Commit)
	assert.True(t, strings.HasPrefix(i.String(), "1.2.3 (0123456789ab, 2026-12-01T00:00:00Z) go"), i.String())
}

func TestUnstampedIsNeverEmpty(t *testing.T) {
	old := [3]string{Version, Commit, Date}
	t.Cleanup(func() { Version, Commit, Date = old[0], old[1], old[2] })
	Version, Commit, Date = "", "", ""
	i := Get()
	assert.NotEmpty(t, i.Version)
	assert.NotEqual(t, "dev", i.Version)
	assert.NotEmpty(t, i.OS)
}
