// Package store checks and opens the agent's model store: the folder downloaded models live in.
// The store is a security boundary — a model file is code-adjacent input to an engine, so a
// folder others can write to lets them swap the model under a running placement. It is refused
// under the temporary folder, when group- or world-writable (or under such a folder without the
// sticky bit), and when owned by another user; each refusal says how to fix it on this OS.
package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// PartialSuffix marks a download in progress; it becomes a model only after it is verified.
const PartialSuffix = ".partial"

// Options tune the checks.
type Options struct {
	// GOOS selects the wording of fix steps ("linux", "darwin").
	GOOS string
	// AllowTemp accepts a store under the temporary folder. Tests (t.TempDir) and demos need it;
	// a real host never should: anyone can pre-create paths there.
	AllowTemp bool
	// TempDirs are the temporary folders to refuse; os.TempDir(), /tmp and /var/tmp when empty.
	TempDirs []string
	// Label and Flag name the folder in messages: "model store" and "--models-dir" when empty.
	// The state dir (it holds the mesh secret) is checked by the same rules.
	Label, Flag string
}

func (o Options) label() string {
	if o.Label == "" {
		return "model store"
	}
	return o.Label
}

func (o Options) flag() string {
	if o.Flag == "" {
		return "--models-dir"
	}
	return o.Flag
}

// Store is an opened, checked model store.
type Store struct {
	path string
}

// UnsafeError is a refusal with the steps that fix it.
type UnsafeError struct {
	Label  string // "model store"
	Path   string
	Reason string
	Fix    []string
}

func (e *UnsafeError) Error() string {
	s := e.Label + " " + e.Path + " is unsafe: " + e.Reason
	if len(e.Fix) > 0 {
		s += "; to fix: " + strings.Join(e.Fix, "; ")
	}
	return s
}

// Open creates dir (0700) if it does not exist and checks that it is safe to keep models in.
func Open(dir string, opt Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New(opt.label() + ": no folder given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", opt.label(), err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opt.label(), err)
	}
	if err := Check(real, opt); err != nil {
		return nil, err
	}
	return &Store{path: real}, nil
}

// Precheck says whether Open would accept dir, without making anything: the folder itself when
// it exists, else the nearest folder above it that does (whatever Open makes below it is 0700
// and the user's own). `llmkube-agent join` runs it before it writes a byte.
func Precheck(dir string, opt Options) error {
	if dir == "" {
		return errors.New(opt.label() + ": no folder given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := abs; ; p = filepath.Dir(p) {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			if p == abs {
				return Check(real, opt)
			}
			// The folder will be made below real: check real's place, and the temp rule for
			// the folder itself.
			return check(filepath.Join(real, mustRel(p, abs)), opt, true)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", opt.label(), err)
		}
		if p == filepath.Dir(p) {
			return fmt.Errorf("%s %s: no folder above it exists", opt.label(), abs)
		}
	}
}

func mustRel(base, target string) string {
	rel, err := filepath.Rel(base, target)
	if err != nil {
		return "."
	}
	return rel
}

// Path is the store's absolute, symlink-free path.
func (s *Store) Path() string { return s.path }

// Check applies the safety rules to an existing folder (symlinks already resolved).
func Check(dir string, opt Options) error { return check(dir, opt, false) }

// check is Check; with missing, dir does not exist yet and only the rules that need no folder
// (the temporary folder, the folders above) apply.
func check(dir string, opt Options, missing bool) error {
	unsafe := func(reason string, fix ...string) error {
		return &UnsafeError{Label: opt.label(), Path: dir, Reason: reason, Fix: fix}
	}
	if !opt.AllowTemp {
		for _, t := range tempDirs(opt) {
			if within(dir, t) {
				return unsafe("it is under the temporary folder "+t+", where any user can create paths first",
					"choose a folder of your own with "+opt.flag()+", e.g. "+defaultHint(opt.GOOS, opt.label()))
			}
		}
	}
	if missing {
		return checkAbove(dir, opt, unsafe)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", opt.label(), err)
	}
	if !fi.IsDir() {
		return unsafe("it is not a folder", "point "+opt.flag()+" at a folder")
	}
	if uid, ok := owner(fi); ok && uid != os.Getuid() {
		return unsafe(fmt.Sprintf("it is owned by user id %d, not by the agent's user (id %d)", uid, os.Getuid()),
			chownHint(opt.GOOS, dir), "or choose another folder with "+opt.flag())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return unsafe(fmt.Sprintf("it is writable by group or others (mode %v)", fi.Mode().Perm()),
			"chmod 700 "+shellQuote(dir))
	}
	return checkAbove(dir, opt, unsafe)
}

// checkAbove refuses a folder above dir that others can write to (without the sticky bit): they
// could rename the store away and put their own in its place.
func checkAbove(dir string, opt Options, unsafe func(string, ...string) error) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		pi, err := os.Stat(p)
		if err == nil && pi.Mode().Perm()&0o022 != 0 && pi.Mode()&fs.ModeSticky == 0 {
			return unsafe(fmt.Sprintf("the folder above it, %s, is writable by group or others (mode %v) without the sticky bit", p, pi.Mode().Perm()),
				"chmod go-w "+shellQuote(p), "or choose another folder with "+opt.flag())
		}
		if p == filepath.Dir(p) {
			break
		}
	}
	return nil
}

// CleanPartials removes half-finished downloads left by an earlier run, except those keep
// wants to resume (keep may be nil). It must run before any pull starts — the state dir lock
// guarantees no other agent pulls into this store — so no file it sees is being written.
// It returns the paths removed.
func (s *Store) CleanPartials(log *slog.Logger, keep func(path string, modTime time.Time) bool) ([]string, error) {
	var removed []string
	err := filepath.WalkDir(s.path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == s.path {
				return err
			}
			log.Warn("model store: cannot read a folder; skipped", "path", p, "err", err)
			return fs.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), PartialSuffix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		if keep != nil && keep(p, info.ModTime()) {
			log.Info("model store: keeping a half-finished download to resume", "path", p)
			return nil
		}
		if err := os.Remove(p); err != nil {
			log.Warn("model store: cannot remove a half-finished download", "path", p, "err", err)
			return nil
		}
		log.Info("model store: removed a half-finished download", "path", p, "age", time.Since(info.ModTime()).Round(time.Second))
		removed = append(removed, p)
		return nil
	})
	return removed, err
}

func tempDirs(opt Options) []string {
	list := opt.TempDirs
	if len(list) == 0 {
		list = []string{os.TempDir(), "/tmp", "/var/tmp"}
		if opt.GOOS == "darwin" {
			list = append(list, "/private/tmp", "/private/var/tmp", "/private/var/folders")
		}
	}
	var out []string
	for _, t := range list {
		if r, err := filepath.EvalSymlinks(t); err == nil {
			t = r
		}
		out = append(out, filepath.Clean(t))
	}
	return out
}

func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func defaultHint(goos, label string) string {
	leaf := "models"
	if label != "model store" {
		leaf = "agent"
	}
	if goos == "darwin" {
		return "'~/Library/Application Support/llmkube/" + leaf + "'"
	}
	return "~/.local/share/llmkube/" + leaf
}

func chownHint(goos, dir string) string {
	if goos == "darwin" {
		return "sudo chown -R \"$(id -un)\":staff " + shellQuote(dir)
	}
	return "sudo chown -R \"$(id -un)\":\"$(id -gn)\" " + shellQuote(dir)
}

// shellQuote quotes a path for a fix step the user can paste.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
