package mesh

import (
	"cmp"
	"context"
	"log/slog"
	"net"
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
	decrypt   map[string]*sighting // by sender host (its IP: a stream comes from any port)
	label     map[string]*sighting // by sender host; detail: "labelled" when it carried a label
	udp       map[string]*sighting // by node name
	conflicts map[string]*sighting // by name; detail: the two addresses
	dropped   map[string]uint64    // by drop reason
	junkLog   map[string]*junkLog  // by drop reason
}

// maxSightings bounds each table of sightings: a sender can spoof any number of source
// addresses, and beyond this many they are counted under one key.
const maxSightings = 64

type sighting struct {
	count       int
	first, last time.Time
	detail      string
}

func newDiagnostics(m *Mesh) *diagnostics {
	return &diagnostics{
		m: m, decrypt: map[string]*sighting{}, label: map[string]*sighting{},
		udp: map[string]*sighting{}, conflicts: map[string]*sighting{},
		dropped: map[string]uint64{}, junkLog: map[string]*junkLog{},
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
	lower := strings.ToLower(msg)
	reason := junkReason(lower)
	if reason == dropDecrypt && fromAddr(msg) == "" {
		reason = "" // our own failed join says "decrypt" too; the joiner reports it
	}
	if reason != "" {
		if n, ok := d.junk(reason); ok {
			args := []any{"component", "memberlist", "reason", reason}
			if n > 0 {
				args = append(args, "suppressed", n)
			}
			d.m.log.Log(context.Background(), level, msg, args...)
		}
	} else {
		d.m.log.Log(context.Background(), level, msg, "component", "memberlist")
	}

	from := senderHost(fromAddr(msg))
	switch {
	case strings.HasPrefix(msg, "Suspect ") && strings.HasSuffix(msg, " has failed, no acks received"):
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "Suspect "), " has failed, no acks received")
		d.m.suspected(name)
	case strings.HasPrefix(msg, "Refuting a suspect message"):
		d.m.refute()
	case strings.Contains(lower, "unacceptable label"):
		// The label is derived from the secret: it tells nothing a person could act on, but
		// that there is one says another llmkube mesh sent it (detail), not a stray program.
		labelled := ""
		if !strings.Contains(msg, `label "":`) {
			labelled = "labelled"
		}
		d.saw(d.label, cmp.Or(from, "an unknown address"), labelled)
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

// Reasons for dropping what arrived on the gossip port, as counted by Dropped.
const (
	dropLabel     = "label"     // another mesh's label, or none
	dropDecrypt   = "decrypt"   // labelled for us but not sealed with our key
	dropStream    = "stream"    // refused by the stream guard (streamguard.go)
	dropMalformed = "malformed" // not memberlist's protocol, or a member we refuse
)

var dropReasons = []string{dropLabel, dropDecrypt, dropStream, dropMalformed}

// junkLogEvery: of each reason of drop, one log line per interval. Anyone on the LAN can send
// junk to the gossip port, each datagram costing a line (~126 bytes at ERROR); the count goes
// to Dropped (a metric) instead, and the line that is logged says how many were not.
const junkLogEvery = 10 * time.Second

// junkReason classifies a memberlist log line about something that arrived, or "" for the
// others. The strings are memberlist v0.7.0's.
func junkReason(lower string) string {
	switch {
	case strings.Contains(lower, "unacceptable label"), strings.Contains(lower, "label header"):
		return dropLabel
	case strings.Contains(lower, "decrypt"), strings.Contains(lower, "not encrypted"), strings.Contains(lower, "encryption is configured"):
		return dropDecrypt
	case strings.HasPrefix(lower, "dropping a gossip stream"):
		return dropStream
	case strings.HasPrefix(lower, "failed to receive"), strings.HasPrefix(lower, "missing message type"),
		strings.Contains(lower, "not supported"), strings.HasPrefix(lower, "failed to decode"),
		strings.HasPrefix(lower, "received invalid msgtype"), strings.Contains(lower, "invalid checksum"),
		strings.Contains(lower, "truncated messages"), strings.HasPrefix(lower, "failed to decompress"),
		strings.HasPrefix(lower, "ignoring alive message"), strings.HasPrefix(lower, "failed to read remote state"):
		return dropMalformed
	}
	return ""
}

// junk counts one drop; ok says whether to log it, with n lines suppressed since the last.
func (d *diagnostics) junk(reason string) (n int, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropped[reason]++
	j := d.junkLog[reason]
	if j == nil {
		j = &junkLog{}
		d.junkLog[reason] = j
	}
	now := time.Now()
	if !j.last.IsZero() && now.Sub(j.last) < junkLogEvery {
		j.suppressed++
		return 0, false
	}
	n, j.suppressed, j.last = j.suppressed, 0, now
	return n, true
}

type junkLog struct {
	last       time.Time
	suppressed int
}

// Dropped counts, by reason, what arrived on the gossip port and was dropped before it could
// be read: every reason is present, zeros included.
func (m *Mesh) Dropped() map[string]uint64 {
	d := m.diag
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]uint64, len(dropReasons))
	for _, r := range dropReasons {
		out[r] = d.dropped[r]
	}
	return out
}

// senderHost is the host part of a sender's address: a foreign member's gossip packets come
// from its gossip port, its streams from a new port each time, and a person needs to know
// the host, once.
func senderHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
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
	if s == nil && len(in) >= maxSightings {
		key = "more addresses"
		s = in[key]
	}
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
