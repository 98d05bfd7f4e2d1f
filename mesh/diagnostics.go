package mesh

import (
	"cmp"
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/mesh/discovery"
)

// diagnostics is memberlist's logger (log.Logger writes each line here) and the memory of
// what went wrong that the doctor reports. Each line goes on to slog at its level; some also
// say something only the logs say: a packet that failed to decrypt (another mesh secret), a
// label mismatch (another mesh id or secret), UDP blocked where TCP works, and the failure detector's
// suspicions and refutations (see liveNotice). The strings matched are memberlist v0.7.0's;
// the tests fail if an upgrade changes them.
type diagnostics struct {
	m *Mesh

	mu        sync.Mutex
	src       discovery.Source
	decrypt   map[string]*sighting // by sender address
	label     map[string]*sighting // by sender address
	udp       map[string]*sighting // by node name
	conflicts map[string]*sighting // by name; detail: the two addresses
}

type sighting struct {
	count       int
	first, last time.Time
	detail      string
}

func newDiagnostics(m *Mesh) *diagnostics {
	return &diagnostics{
		m: m, decrypt: map[string]*sighting{}, label: map[string]*sighting{},
		udp: map[string]*sighting{}, conflicts: map[string]*sighting{},
	}
}

func (d *diagnostics) setSource(s discovery.Source) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.src = s
}

// Write takes one memberlist log line.
func (d *diagnostics) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		d.line(line)
	}
	return len(p), nil
}

func (d *diagnostics) line(line string) {
	level := slog.LevelInfo
	msg := line
	if strings.HasPrefix(line, "[") {
		if tag, rest, ok := strings.Cut(line[1:], "] "); ok {
			msg = rest
			switch tag {
			case "DEBUG":
				level = slog.LevelDebug
			case "WARN":
				level = slog.LevelWarn
			case "ERR", "ERROR":
				level = slog.LevelError
			}
		}
	} else if strings.HasPrefix(line, "Err:") {
		level = slog.LevelError
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	d.m.log.Log(context.Background(), level, msg, "component", "memberlist")

	lower := strings.ToLower(msg)
	from := fromAddr(msg)
	switch {
	case strings.HasPrefix(msg, "Suspect ") && strings.HasSuffix(msg, " has failed, no acks received"):
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "Suspect "), " has failed, no acks received")
		d.m.suspected(name)
	case strings.HasPrefix(msg, "Refuting a suspect message"):
		d.m.refute()
	case strings.Contains(lower, "unacceptable label"):
		// The label is derived from the secret: it tells nothing a person could act on.
		d.saw(d.label, cmp.Or(from, "an unknown address"), "")
	case strings.Contains(lower, "decrypt"), strings.Contains(lower, "not encrypted"):
		// Only what arrived from somewhere: our own failed joins say "decrypt" too, and
		// the joiner reports those per seed.
		if from != "" {
			d.saw(d.decrypt, from, "")
		}
	case strings.Contains(msg, "over TCP but UDP probes failed"):
		if _, rest, ok := strings.Cut(msg, "Was able to connect to "); ok {
			name, _, _ := strings.Cut(rest, " over TCP")
			d.saw(d.udp, name, "")
		}
	}
}

// fromAddr finds memberlist's "from=<addr>" in a log message.
func fromAddr(msg string) string {
	_, rest, ok := strings.Cut(msg, "from=")
	if !ok || strings.HasPrefix(rest, "<unknown") {
		return ""
	}
	addr, _, _ := strings.Cut(rest, " ")
	return addr
}

func (d *diagnostics) saw(in map[string]*sighting, key, detail string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	s := in[key]
	isNew := s == nil
	if isNew {
		s = &sighting{first: now}
		in[key] = s
	}
	s.count++
	s.last = now
	if detail != "" {
		s.detail = detail
	}
	return isNew
}

// conflict records two nodes claiming one name; true the first time.
func (d *diagnostics) conflict(name, existing, other string) bool {
	return d.saw(d.conflicts, name, existing+" and "+other)
}

// conflictOf describes a current name conflict of name, or "".
func (d *diagnostics) conflictOf(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.conflicts[name]; s != nil {
		return "name also claimed by another node: " + s.detail
	}
	return ""
}

// expire forgets what has not been seen for conflictKeep.
func (d *diagnostics) expire(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, in := range []map[string]*sighting{d.decrypt, d.label, d.udp, d.conflicts} {
		for k, s := range in {
			if now.Sub(s.last) > d.m.t.conflictKeep {
				delete(in, k)
			}
		}
	}
}
