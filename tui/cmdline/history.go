package cmdline

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/llmkube/mesh/internal/atomicfile"
)

// DefaultPath is where the history lives: the user's state folder ($XDG_STATE_HOME, else
// ~/.local/state) on Linux and the BSDs, the user's config folder elsewhere (macOS's
// Application Support, Windows' AppData).
func DefaultPath() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "llmkube", "console-history"), nil
	}
	if runtime.GOOS != "darwin" && runtime.GOOS != "windows" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(home, ".local", "state", "llmkube", "console-history"), nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "llmkube", "console-history"), nil
}

// File is the history file. Saves may run from concurrent commands: they are serialized and a
// save older than the one written is skipped, so the file never goes back in time.
type File struct {
	Path string

	mu      sync.Mutex
	written int
}

// Load reads the lines, oldest first; a missing file is an empty history. Lines that are not
// printable text (a damaged file) are dropped rather than shown on the terminal.
func (f *File) Load() ([]string, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && printable(line) {
			out = append(out, line)
		}
	}
	if over := len(out) - MaxHistory; over > 0 {
		out = out[over:]
	}
	return out, nil
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// Save writes the lines as version seq (higher is newer) atomically, so a crash leaves the old
// history or the new one.
func (f *File) Save(seq int, lines []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq <= f.written {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(f.Path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	f.written = seq
	return nil
}
