package hwprobe

import (
	"errors"
	"path/filepath"
)

// Dirs are where the agent keeps its state and its models.
type Dirs struct {
	State  string `json:"state"`  // placements, mesh identity, last-known peers
	Models string `json:"models"` // the model store
}

// DefaultDirs returns the default directories for a host of the given GOOS: under
// ~/Library/Application Support/llmkube on macOS, under $XDG_DATA_HOME/llmkube elsewhere
// (~/.local/share/llmkube when it is unset). The XDG spec says a relative $XDG_DATA_HOME is
// invalid and must be ignored, and so it is. home must be absolute (os.UserHomeDir), unless
// $XDG_DATA_HOME alone decides.
func DefaultDirs(goos string, getenv func(string) string, home string) (Dirs, error) {
	var base string
	if goos == "darwin" {
		if !filepath.IsAbs(home) {
			return Dirs{}, errors.New("no absolute home directory to put llmkube's directories in")
		}
		base = filepath.Join(home, "Library", "Application Support", "llmkube")
	} else if x := getenv("XDG_DATA_HOME"); filepath.IsAbs(x) {
		base = filepath.Join(x, "llmkube")
	} else if filepath.IsAbs(home) {
		base = filepath.Join(home, ".local", "share", "llmkube")
	} else {
		return Dirs{}, errors.New("neither an absolute $XDG_DATA_HOME nor an absolute home directory to put llmkube's directories in")
	}
	return Dirs{State: filepath.Join(base, "agent"), Models: filepath.Join(base, "models")}, nil
}
