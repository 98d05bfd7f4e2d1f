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
	"github.com/llmkube/mesh/mesh/doctor"
)

// diagnostics is memberlist's logger (log.Logger writes each line here) and the memory of
// what went wrong that the doctor reports. Each line goes on to slog at its level. A few lines
// also say something memberlist v0.7.0 says nowhere else — no delegate, metric or error carries
// it — and readLine turns those into a typed mlLine, the one place that knows memberlist's
// wording (the tests fail if an upgrade changes it):
//
//   - what arrived and was dropped before it could be read, with the sender's address: another
//     mesh's label or none, a packet that failed to decrypt, malformed messages (junkReason);
//   - that our failure detector's probe of a named member was answered over TCP only (UDP
//     blocked).
//
// Everything else memberlist tells (probes, suspicions and their refutations, bytes, acks and
// their round trip, name conflicts) comes from its metrics and delegates: see metrics.go.
type diagnostics struct {
	m *Mesh

	mu        sync.Mutex
	src       discovery.Source
	decrypt   map[string]*doctor.Sighting // by sender host (its IP: a stream comes from any port)
	label     map[string]*doctor.Sighting // by sender host; detail: "labelled" when it carried a label
	udp       map[string]*doctor.Sighting // by node name
	conflicts map[string]*doctor.Sighting // by name; detail: the two addresses
	dropped   map[string]uint64           // by drop reason
	junkLog   map[string]*junkLog         // by drop reason
}

// maxSightings bounds each table of sightings: a sender can spoof any number of source
// addresses, and beyond this many they are counted under one key.
const maxSightings = 64

func newDiagnostics(m *Mesh) *diagnostics {
	return &diagnostics{
		m: m, decrypt: map[string]*doctor.Sighting{}, label: map[string]*doctor.Sighting{},
		udp: map[string]*doctor.Sighting{}, conflicts: map[string]*doctor.Sighting{},
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

// mlLine is what one memberlist log line says that memberlist says nowhere else (see
// diagnostics); the zero value is a line that says nothing of the kind.
type mlLine struct {
	level slog.Level
	msg   string // without the level tag and the "memberlist: " prefix

	drop string // a reason of dropReasons: something that arrived was dropped
	from string // the sender's host, when the line names one
	// foreign: the drop was for another label than ours; labelled says the sender sent one
	// (another llmkube mesh) rather than none (some other program).
	foreign, labelled bool

	tcpOnly string // the member that answered our probe over TCP only
}

// readLine parses one of memberlist v0.7.0's log lines.
func readLine(line string) mlLine {
	l := mlLine{level: slog.LevelInfo, msg: line}
	if strings.HasPrefix(line, "[") {
		if tag, rest, ok := strings.Cut(line[1:], "] "); ok {
			l.msg = rest
			switch tag {
			case "DEBUG":
				l.level = slog.LevelDebug
			case "WARN":
				l.level = slog.LevelWarn
			case "ERR", "ERROR":
				l.level = slog.LevelError
			}
		}
	} else if strings.HasPrefix(line, "Err:") {
		l.level = slog.LevelError
	}
	l.msg = strings.TrimPrefix(l.msg, "memberlist: ")
	msg, lower := l.msg, strings.ToLower(l.msg)
	addr := fromAddr(msg)
	l.from = senderHost(addr)
	l.drop = junkReason(lower)
	if l.drop == dropDecrypt && addr == "" {
		l.drop = "" // our own failed join says "decrypt" too; the joiner reports it, per seed
	}
	if strings.Contains(lower, "unacceptable label") {
		// The label is derived from the secret: it tells nothing a person could act on, but
		// that there is one says another llmkube mesh sent it, not a stray program.
		l.foreign, l.labelled = true, !strings.Contains(msg, `label "":`)
	}
	if strings.Contains(msg, "over TCP but UDP probes failed") {
		if _, rest, ok := strings.Cut(msg, "Was able to connect to "); ok {
			l.tcpOnly, _, _ = strings.Cut(rest, " over TCP")
		}
	}
	return l
}

func (d *diagnostics) line(line string) {
	l := readLine(line)
	if l.drop != "" {
		d.countDrop(l.level, l.drop, l.msg)
	} else {
		d.m.log.Log(context.Background(), l.level, l.msg, "component", "memberlist")
	}
	switch {
	case l.tcpOnly != "":
		d.m.stats.probesTCPOnly.Add(1)
		d.saw(d.udp, l.tcpOnly, "")
	case l.foreign:
		labelled := ""
		if l.labelled {
			labelled = "labelled"
		}
		d.saw(d.label, cmp.Or(l.from, "an unknown address"), labelled)
	case l.drop == dropDecrypt:
		d.saw(d.decrypt, l.from, "")
	}
}

// streamDropped is the stream guard's report of a stream it refused (package streamguard).
func (d *diagnostics) streamDropped(from net.Addr, why string) {
	d.countDrop(slog.LevelWarn, dropStream, "dropping a gossip stream: "+why+" from="+from.String())
}

// countDrop counts one drop, and logs it unless this reason was logged within junkLogEvery.
func (d *diagnostics) countDrop(level slog.Level, reason, msg string) {
	if n, ok := d.junk(reason); ok {
		args := []any{"component", "memberlist", "reason", reason}
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		d.m.log.Log(context.Background(), level, msg, args...)
	}
}

// Reasons for dropping what arrived on the gossip port, as counted by Dropped.
const (
	dropLabel     = "label"     // another mesh's label, or none
	dropDecrypt   = "decrypt"   // labelled for us but not sealed with our key
	dropStream    = "stream"    // refused by the stream guard (package streamguard)
	dropMalformed = "malformed" // not memberlist's protocol, or a member we refuse
)

var dropReasons = []string{dropLabel, dropDecrypt, dropStream, dropMalformed}

// junkLogEvery: of each reason of drop, one log line per interval. Anyone on the LAN can send
// junk to the gossip port, each datagram costing a line (~126 bytes at ERROR); the count goes
// to Dropped (a metric) instead, and the line that is logged says how many were not.
const junkLogEvery = 10 * time.Second

// junkReason classifies a memberlist log line about something that arrived, or "" for the
// others. The strings are memberlist v0.7.0's. (dropStream is the stream guard's: it reports
// its drops itself, see streamDropped.)
func junkReason(lower string) string {
	switch {
	case strings.Contains(lower, "unacceptable label"), strings.Contains(lower, "label header"):
		return dropLabel
	case strings.Contains(lower, "decrypt"), strings.Contains(lower, "not encrypted"), strings.Contains(lower, "encryption is configured"):
		return dropDecrypt
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

// droppedCounts counts, by reason, what arrived on the gossip port and was dropped before it
// could be read: every reason is present, zeros included.
func (d *diagnostics) droppedCounts() map[string]uint64 {
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

func (d *diagnostics) saw(in map[string]*doctor.Sighting, key, detail string) bool {
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
		s = &doctor.Sighting{First: now}
		in[key] = s
	}
	s.Count++
	s.Last = now
	if detail != "" {
		s.Detail = detail
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
		return "name also claimed by another node: " + s.Detail
	}
	return ""
}

// foreignQuiet is how long after the last of another mesh's messages from a host an acked probe
// of a member at that host ends the finding (see acked), in probe intervals.
const foreignQuiet = 10

// acked records that a member at host answered our probe, sealed with our key: that host
// speaks this mesh now. A finding that gossip from it belongs to another mesh, or could not be
// decrypted, ends once none of that has come for foreignQuiet probe intervals (a host that
// restarted with another secret, then rejoined with ours): its cause is over, not ten minutes
// later. Another mesh's traffic that keeps coming from the host (a second mesh's process on
// it) brings the finding back with its next message.
func (d *diagnostics) acked(host string, now time.Time) {
	quiet := foreignQuiet * d.m.mlc.ProbeInterval
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, in := range []map[string]*doctor.Sighting{d.decrypt, d.label} {
		if s := in[host]; s != nil && now.Sub(s.Last) > quiet {
			delete(in, host)
		}
	}
}

// expire forgets what has not been seen for conflictKeep.
func (d *diagnostics) expire(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, in := range []map[string]*doctor.Sighting{d.decrypt, d.label, d.udp, d.conflicts} {
		for k, s := range in {
			if now.Sub(s.Last) > d.m.t.conflictKeep {
				delete(in, k)
			}
		}
	}
}
