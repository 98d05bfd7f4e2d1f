package store

import (
	"context"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/llmkube/mesh/engines/download"
)

// Held is a model file the store holds, named by its content.
type Held struct {
	Path   string
	Size   int64
	SHA256 string
}

// Holdings lists the files the store holds with their SHA-256: the digest recorded beside each
// (a verified download records it), or, for a file with none or a stale one (copied in by
// hand, or downloaded by an older agent), computed now and recorded, so each file is hashed
// once. Half-finished downloads, the records themselves and hidden files are not files the
// store holds. ctx stops the walk between files; what was found so far is returned.
func (s *Store) Holdings(ctx context.Context, log *slog.Logger) []Held {
	var out []Held
	_ = filepath.WalkDir(s.path, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return fs.SkipAll
		}
		if err != nil {
			if d != nil && d.IsDir() && p != s.path {
				return fs.SkipDir
			}
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, ".") && p != s.path {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(name, PartialSuffix) || strings.HasSuffix(name, download.DigestSuffix) {
			return nil
		}
		rec, ok := download.ReadDigest(p)
		if !ok {
			var err error
			if rec, err = download.HashFile(p); err != nil {
				log.Warn("model store: cannot hash a file to serve it to peers", "path", p, "err", err)
				return nil
			}
			log.Info("model store: hashed a file to serve it to peers", "path", p, "sha256", rec.SHA256)
		}
		out = append(out, Held{Path: p, Size: rec.Size, SHA256: rec.SHA256})
		return nil
	})
	return out
}
