package ollama

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// progress is one line of /api/pull's stream (Ollama's api.ProgressResponse).
type progress struct {
	Status    string `json:"status"`
	Digest    string `json:"digest,omitempty"`
	Total     int64  `json:"total,omitempty"`
	Completed int64  `json:"completed,omitempty"`
}

// pullTick is how often a slow simulated download reports progress.
const pullTick = 50 * time.Millisecond

// errManifestUnknown is what Ollama reports when the registry has no such model.
var errManifestUnknown = errors.New("pull model manifest: file does not exist")

func (s *Server) handlePull(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string `json:"model"`
		Name   string `json:"name"`
		Stream *bool  `json:"stream"`
	}
	if !decode(w, r, &req) {
		return
	}
	name := canonical(nameOf(req.Model, req.Name))
	if name == "" {
		writeError(w, http.StatusBadRequest, "invalid model name")
		return
	}
	stream := req.Stream == nil || *req.Stream

	var latest progress
	flusher, _ := w.(http.Flusher)
	emit := func(p progress) error {
		if !stream {
			latest = p
			return nil
		}
		b, _ := json.Marshal(p)
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	if stream {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	}

	err := s.pull(r.Context(), name, emit)
	switch {
	case err == nil && stream:
	case err == nil:
		writeJSON(w, http.StatusOK, latest)
	case r.Context().Err() != nil:
		s.mu.Lock()
		s.stats.PullsCancelled++
		s.mu.Unlock()
	case stream:
		// The stream has started: the error is one more line, and the status stays 200.
		b, _ := json.Marshal(map[string]string{"error": err.Error()})
		w.Write(append(b, '\n'))
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// pull runs Ollama's pull sequence: the manifest, each blob with its progress, verification,
// the manifest written, success. Bytes are counted at cfg.PullBytesPerSec, never transferred.
func (s *Server) pull(ctx context.Context, name string, emit func(progress) error) error {
	if err := emit(progress{Status: "pulling manifest"}); err != nil {
		return err
	}
	spec := lookup(name)
	if spec == nil {
		return errManifestUnknown
	}
	for _, b := range spec.blobs() {
		if err := s.fetch(ctx, b, emit); err != nil {
			return err
		}
	}
	for _, st := range []string{"verifying sha256 digest", "writing manifest"} {
		if err := emit(progress{Status: st}); err != nil {
			return err
		}
	}
	if err := s.writeBlob(spec); err != nil {
		return err
	}
	s.mu.Lock()
	s.pulled[name] = &pulledModel{name: name, spec: spec, modified: time.Now()}
	s.stats.Pulls++
	s.mu.Unlock()
	return emit(progress{Status: "success"})
}

// fetch reports one blob's simulated download.
func (s *Server) fetch(ctx context.Context, b layer, emit func(progress) error) error {
	status := fmt.Sprintf("pulling %s", b.Digest[len("sha256:"):len("sha256:")+12])
	p := progress{Status: status, Digest: b.Digest, Total: b.Size}
	if err := emit(p); err != nil {
		return err
	}
	rate := s.cfg.PullBytesPerSec
	last := time.Now()
	for p.Completed < b.Size {
		if rate > 0 {
			wait := min(pullTick, time.Duration(float64(b.Size-p.Completed)/float64(rate)*float64(time.Second)))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			now := time.Now()
			p.Completed = min(b.Size, p.Completed+max(1, int64(now.Sub(last).Seconds()*float64(rate))))
			last = now
		} else {
			p.Completed = b.Size
		}
		if err := emit(p); err != nil {
			return err
		}
	}
	return ctx.Err()
}
