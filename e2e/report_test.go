package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// reportEnv names the file the run's report is written to (default: in the temporary folder).
const reportEnv = "LLMKUBE_E2E_REPORT"

// report is the run's account: each step with its outcome and duration, and the figures the
// step measured. It is written at the end of the run, whatever happened, and printed.
type report struct {
	mu    sync.Mutex
	start time.Time
	lines []string
}

func newReport() *report { return &report{start: time.Now()} }

func (r *report) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

// step runs one check as a subtest, timing it. f notes figures with note (a step that skips
// notes why first); a failed one is marked FAIL.
func (r *report) step(t *testing.T, name string, f func(t *testing.T, note func(format string, args ...any))) bool {
	t.Helper()
	var notes []string
	var mu sync.Mutex
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		notes = append(notes, fmt.Sprintf(format, args...))
	}
	start := time.Now()
	var skipped bool
	ok := t.Run(name, func(t *testing.T) {
		defer func() {
			if t.Skipped() {
				skipped = true
			}
		}()
		f(t, func(format string, args ...any) {
			t.Logf(format, args...)
			note(format, args...)
		})
	})
	status := "ok  "
	switch {
	case skipped:
		status = "SKIP"
	case !ok:
		status = "FAIL"
	}
	r.add("%s %-28s %7.1fs", status, name, time.Since(start).Seconds())
	mu.Lock()
	for _, n := range notes {
		r.add("       %s", n)
	}
	mu.Unlock()
	return ok && !skipped
}

// write saves the report and prints it on stdout.
func (r *report) write(t *testing.T) {
	r.mu.Lock()
	body := "llmkube mesh end-to-end run on a LAN of network namespaces, " + time.Now().UTC().Format(time.RFC3339) + "\n" +
		strings.Join(r.lines, "\n") + fmt.Sprintf("\ntotal %.1fs\n", time.Since(r.start).Seconds())
	r.mu.Unlock()
	path := os.Getenv(reportEnv)
	if path == "" {
		path = filepath.Join(os.TempDir(), "llmkube-e2e-report.txt")
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Errorf("writing the report: %v", err)
	}
	fmt.Print(body)
	fmt.Println("report written to", path)
}
