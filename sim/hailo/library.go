package hailo

import (
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/llmkube/mesh/sim/internal/simserver"
)

// serveLibrary plays Hailo's model library (dev-public.hailo.ai) for the zoo's fake HEFs:
//   - 5.1.1 form: /blob/sha256_<digest>; HEAD answers the Content-Length, GET the bytes, a
//     Range GET (bytes=0-0) a 206.
//   - 5.4 form: /v<version>/blob/<File>.hef and its companion /v<version>/blob/<File>.sha256
//     ("<hex>  <File>.hef\n"), the same methods.
//
// Anything else, an unknown digest included, is a 404.
func (s *Server) serveLibrary(w http.ResponseWriter, r *http.Request) {
	s.libRequests.Add(simserver.Key(r))
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	cw := &countingWriter{ResponseWriter: w}
	defer func() { s.count(func(st *Stats) { st.LibraryBytes += cw.n }) }()

	path := r.URL.Path
	if digest, ok := strings.CutPrefix(path, "/blob/sha256_"); ok {
		if _, known := s.store.library[digest]; known {
			s.serveBlob(cw, r, digest)
			return
		}
		http.NotFound(w, r)
		return
	}
	prefix := "/v" + s.cfg.LibraryVersion + "/blob/"
	file, ok := strings.CutPrefix(path, prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if z, ok := zooByFile(s.cfg.Version, file); ok {
		s.serveBlob(cw, r, s.digestOf(z.name))
		return
	}
	if stem, ok := strings.CutSuffix(file, ".sha256"); ok {
		if z, ok := zooByFile(s.cfg.Version, stem+".hef"); ok {
			body := s.digestOf(z.name) + "  " + z.hefFile + "\n"
			w.Header().Set("Content-Type", "text/plain")
			http.ServeContent(cw, r, file, time.Time{}, strings.NewReader(body))
			return
		}
	}
	http.NotFound(w, r)
}

func (s *Server) digestOf(model string) string {
	for d, m := range s.store.library {
		if m == model {
			return d
		}
	}
	return ""
}

func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, digest string) {
	f, err := os.Open(s.store.libraryPath(digest))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if size := s.store.reportedSize(s.store.library[digest], fi.Size()); size != fi.Size() && (r.Method == http.MethodHead || r.Header.Get("Range") != "") {
		// What a sizer asks: the real HEF's length, its bytes past the fake ones zeros.
		http.ServeContent(w, r, "", fi.ModTime(), io.NewSectionReader(padded{f, fi.Size()}, 0, size))
		return
	}
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// padded reads a file of n bytes followed by zeros.
type padded struct {
	f *os.File
	n int64
}

func (p padded) ReadAt(b []byte, off int64) (int, error) {
	var read int
	if off < p.n {
		var err error
		read, err = p.f.ReadAt(b[:min(int64(len(b)), p.n-off)], off)
		if err != nil && err != io.EOF {
			return read, err
		}
	}
	clear(b[read:])
	return len(b), nil
}
