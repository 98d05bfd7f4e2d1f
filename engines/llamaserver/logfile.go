package llamaserver

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
)

// DefaultMaxLog is the size at which an engine log is rotated.
const DefaultMaxLog = 16 << 20

// logFile is an engine's stdout and stderr on disk, for the console. A restart moves the last
// run's log to "<path>.1" (so a crash's log survives the restart that follows it), and a log
// that outgrows max is rotated the same way, so the file never grows without bound and its
// tail is always the newest output.
type logFile struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File
	size int64
}

func openLog(path string, max int64) (*logFile, error) {
	if err := rotate(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, err
	}
	return &logFile{path: path, max: max, f: f}, nil
}

// rotate moves path to path.1, replacing an older one; a missing path is fine.
func rotate(path string) error {
	err := os.Rename(path, path+".1")
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, os.ErrClosed
	}
	if l.size > 0 && l.size+int64(len(p)) > l.max {
		l.f.Close()
		if err := rotate(l.path); err != nil {
			l.f = nil
			return 0, err
		}
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
		if err != nil {
			l.f = nil
			return 0, err
		}
		l.f, l.size = f, 0
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// tailLines returns the last n lines of the file at path (reading at most its last 8 KiB), for
// error messages; "" when it cannot be read.
func tailLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 8 << 10
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-window, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(bytes.ToValidUTF8(b, []byte("?"))), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first line is cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
