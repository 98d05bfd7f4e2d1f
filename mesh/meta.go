package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh/statedoc"
)

// Node metadata is what every member needs about a node at a glance, carried in memberlist's
// alive messages (memberlist.Node.Meta). memberlist panics on metadata over 512 bytes, so the
// encoding is compact and its size is checked here, before memberlist ever sees it.
//
// Layout: one version byte (metaVersion), then fields as tag, uvarint length, value. A decoder
// skips tags it does not know, so a newer member may add fields without breaking older ones;
// metaVersion changes only if the layout itself changes, and a decoder refuses (with an error,
// never a panic) a version it does not know. Strings are truncated to the caps below (at a rune
// boundary) — except the API address, which is refused when too long, since a truncated
// address would be a wrong one. The worst case (every cap reached, every number at its largest)
// is built by a test and fits.
const (
	metaVersion = 1

	maxMetaAPIAddr   = 96 // host:port; "[2001:db8:85a3::8a2e:370:7334]:65535" is 37
	maxMetaOS        = 16
	maxMetaArch      = 16
	maxMetaChip      = 48
	maxMetaVersion   = 16
	maxMetaAccels    = 3 // distinct kind+name+memory groups; identical devices are counted
	maxMetaAccelKind = 12
	maxMetaAccelName = 32
)

// Metadata field tags. Never reuse a number.
const (
	tagRole       = 1  // 1 byte: 0 agent, 1 console
	tagAPIAddr    = 2  // string
	tagOS         = 3  // string
	tagArch       = 4  // string
	tagChip       = 5  // string
	tagCPUs       = 6  // uvarint
	tagMemory     = 7  // 5 uvarints: total, budget, committed, reserved, available
	tagAccel      = 8  // repeated: kind, name (length-prefixed), uvarint memory, uvarint count
	tagRuntimes   = 9  // 2 bytes: bitmask present, bitmask healthy (bit i = api.Runtimes[i])
	tagPlacements = 10 // 2 uvarints: placements, ready placements
	tagGen        = 11 // uvarint: generation of the node's state document
	tagFlags      = 12 // uvarint bit set, see flag*
	tagVersion    = 13 // string: the agent's API version
	tagSeq        = 14 // uvarint: the node's liveness sequence when it started (see liveNotice)
	tagDocHash    = 15 // statedoc.HashSize bytes: names the node's current state document (statedoc.Hash)
	tagSealKey    = 16 // seal.KeyIDSize bytes: the fingerprint of the node's sealed-channel key
)

// flagDocGossiped: the state document of this generation is small enough to travel by gossip,
// so a member that sees the generation before the document waits a moment before fetching it.
const flagDocGossiped = 1 << 0

// errMetaVersion is returned for metadata of a layout this build does not know.
var errMetaVersion = errors.New("node metadata of an unknown version")

// nodeMeta is the decoded metadata of one node.
type nodeMeta struct {
	Role         api.Role
	APIAddr      string
	OS, Arch     string
	Chip         string
	CPUs         int
	Memory       api.Memory
	Accels       []metaAccel
	Present      uint8 // runtime bitmask
	Healthy      uint8
	Placements   int
	Ready        int
	Gen          uint64
	Flags        uint64
	AgentVersion string
	// Seq is where this run of the node started its liveness notices: any notice about it
	// with a lower sequence is from an earlier run (a stale "left").
	Seq uint64
	// DocHash names the node's current state document (statedoc.Hash of its wire form); "" before
	// the node published one.
	DocHash string
	// SealKey is the fingerprint of the key the node's API presents on the sealed channel
	// (seal.KeyID): a peer dialling the node checks the key it meets is this one, so another
	// keyholder cannot answer in its name.
	SealKey []byte
}

type metaAccel struct {
	Kind, Name string
	Memory     int64
	Count      int
}

// metaFromHost builds the metadata of an agent from its host and placements.
func metaFromHost(h *api.Host, placements []api.Placement, gen uint64, gossiped bool) nodeMeta {
	m := nodeMeta{
		Role: api.RoleAgent, APIAddr: h.APIAddr, OS: h.OS, Arch: h.Arch, Chip: h.Chip,
		CPUs: h.CPUs, Memory: h.Memory, Placements: len(placements), Gen: gen,
		AgentVersion: h.Version,
	}
	for _, p := range placements {
		if p.State == api.StateReady {
			m.Ready++
		}
	}
	for _, a := range h.Accelerators {
		kind, name := truncate(a.Kind, maxMetaAccelKind), truncate(a.Name, maxMetaAccelName)
		found := false
		for i := range m.Accels {
			g := &m.Accels[i]
			if g.Kind == kind && g.Name == name && g.Memory == a.Memory {
				g.Count++
				found = true
				break
			}
		}
		if !found && len(m.Accels) < maxMetaAccels {
			m.Accels = append(m.Accels, metaAccel{Kind: kind, Name: name, Memory: a.Memory, Count: 1})
		}
	}
	for _, e := range h.Engines {
		for i, r := range api.Runtimes {
			if e.Runtime != r {
				continue
			}
			if e.Present {
				m.Present |= 1 << i
			}
			if e.Healthy {
				m.Healthy |= 1 << i
			}
		}
	}
	if gossiped {
		m.Flags |= flagDocGossiped
	}
	return m
}

// host turns metadata into the partial host a member shows before the node's state document
// arrives.
func (m nodeMeta) host(name string) *api.Host {
	h := &api.Host{
		Name: name, OS: m.OS, Arch: m.Arch, Chip: m.Chip, CPUs: m.CPUs, Memory: m.Memory,
		Placements: m.Placements, APIAddr: m.APIAddr, Version: m.AgentVersion,
	}
	for _, a := range m.Accels {
		for range max(a.Count, 1) {
			h.Accelerators = append(h.Accelerators, api.Accelerator{Kind: a.Kind, Name: a.Name, Memory: a.Memory})
		}
	}
	for i, r := range api.Runtimes {
		if m.Present&(1<<i) != 0 {
			h.Engines = append(h.Engines, api.Engine{Runtime: r, Present: true, Healthy: m.Healthy&(1<<i) != 0})
		}
	}
	return h
}

// encodeMeta encodes m, or explains why it cannot be carried.
func encodeMeta(m nodeMeta) ([]byte, error) {
	if len(m.APIAddr) > maxMetaAPIAddr {
		return nil, fmt.Errorf("API address %q is %d bytes, at most %d fit in node metadata: advertise an IP address", m.APIAddr, len(m.APIAddr), maxMetaAPIAddr)
	}
	b := make([]byte, 0, 256)
	b = append(b, metaVersion)
	role := byte(0)
	if m.Role == api.RoleConsole {
		role = 1
	}
	b = appendField(b, tagRole, []byte{role})
	if m.Seq != 0 {
		b = appendField(b, tagSeq, binary.AppendUvarint(nil, m.Seq))
	}
	if m.Role == api.RoleConsole {
		// A console is not a placement target: its role is all others need.
		return checkMetaSize(b)
	}
	b = appendString(b, tagAPIAddr, m.APIAddr, maxMetaAPIAddr)
	b = appendString(b, tagOS, m.OS, maxMetaOS)
	b = appendString(b, tagArch, m.Arch, maxMetaArch)
	b = appendString(b, tagChip, m.Chip, maxMetaChip)
	b = appendField(b, tagCPUs, binary.AppendUvarint(nil, uint64(max(m.CPUs, 0))))
	var mem []byte
	for _, v := range []int64{m.Memory.Total, m.Memory.Budget, m.Memory.Committed, m.Memory.Reserved, m.Memory.Available} {
		mem = binary.AppendUvarint(mem, uint64(max(v, 0)))
	}
	b = appendField(b, tagMemory, mem)
	for i, a := range m.Accels {
		if i == maxMetaAccels {
			break
		}
		var v []byte
		v = appendLenString(v, truncate(a.Kind, maxMetaAccelKind))
		v = appendLenString(v, truncate(a.Name, maxMetaAccelName))
		v = binary.AppendUvarint(v, uint64(max(a.Memory, 0)))
		v = binary.AppendUvarint(v, uint64(max(a.Count, 1)))
		b = appendField(b, tagAccel, v)
	}
	b = appendField(b, tagRuntimes, []byte{m.Present, m.Healthy})
	b = appendField(b, tagPlacements, binary.AppendUvarint(binary.AppendUvarint(nil, uint64(max(m.Placements, 0))), uint64(max(m.Ready, 0))))
	b = appendField(b, tagGen, binary.AppendUvarint(nil, m.Gen))
	if m.Flags != 0 {
		b = appendField(b, tagFlags, binary.AppendUvarint(nil, m.Flags))
	}
	b = appendString(b, tagVersion, m.AgentVersion, maxMetaVersion)
	if m.DocHash != "" {
		b = appendField(b, tagDocHash, []byte(m.DocHash))
	}
	if len(m.SealKey) > 0 {
		b = appendField(b, tagSealKey, m.SealKey)
	}
	return checkMetaSize(b)
}

func checkMetaSize(b []byte) ([]byte, error) {
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("node metadata is %d bytes, memberlist allows %d", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

func appendField(b []byte, tag byte, v []byte) []byte {
	b = append(b, tag)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, tag byte, s string, limit int) []byte {
	if s == "" {
		return b
	}
	return appendField(b, tag, []byte(truncate(s, limit)))
}

func appendLenString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// truncate cuts s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// decodeMeta decodes metadata made by encodeMeta, by this or a newer build.
func decodeMeta(b []byte) (nodeMeta, error) {
	var m nodeMeta
	if len(b) == 0 {
		return m, errors.New("node metadata is empty: not an llmkube member")
	}
	if b[0] != metaVersion {
		return m, fmt.Errorf("%w: version %d, this build reads %d", errMetaVersion, b[0], metaVersion)
	}
	rest := b[1:]
	sawRole := false
	for len(rest) > 0 {
		tag := rest[0]
		n, k := binary.Uvarint(rest[1:])
		if k <= 0 || n > uint64(len(rest)-1-k) {
			return nodeMeta{}, fmt.Errorf("node metadata: field %d is truncated", tag)
		}
		v := rest[1+k : 1+k+int(n)]
		rest = rest[1+k+int(n):]
		r := reader{b: v}
		switch tag {
		case tagRole:
			switch r.byte() {
			case 0:
				m.Role = api.RoleAgent
			case 1:
				m.Role = api.RoleConsole
			default:
				return nodeMeta{}, errors.New("node metadata: unknown role")
			}
			sawRole = true
		case tagAPIAddr:
			m.APIAddr = api.Printable(string(v))
		case tagOS:
			m.OS = api.Printable(string(v))
		case tagArch:
			m.Arch = api.Printable(string(v))
		case tagChip:
			m.Chip = api.Printable(string(v))
		case tagCPUs:
			m.CPUs = int(min(r.int(), statedoc.MaxCount))
		case tagMemory:
			m.Memory.Total, m.Memory.Budget, m.Memory.Committed = r.bytes(), r.bytes(), r.bytes()
			m.Memory.Reserved, m.Memory.Available = r.bytes(), r.bytes()
		case tagAccel:
			a := metaAccel{Kind: api.Printable(r.str()), Name: api.Printable(r.str()), Memory: r.bytes(), Count: int(r.int())}
			if a.Count < 1 || a.Count > 64 {
				return nodeMeta{}, errors.New("node metadata: bad accelerator count")
			}
			if len(m.Accels) < maxMetaAccels {
				m.Accels = append(m.Accels, a)
			}
		case tagRuntimes:
			m.Present, m.Healthy = r.byte(), r.byte()
		case tagPlacements:
			m.Placements, m.Ready = int(min(r.int(), statedoc.MaxCount)), int(min(r.int(), statedoc.MaxCount))
		case tagGen:
			m.Gen = r.uint()
		case tagFlags:
			m.Flags = r.uint()
		case tagVersion:
			m.AgentVersion = api.Printable(string(v))
		case tagSeq:
			m.Seq = r.uint()
		case tagDocHash:
			if len(v) != statedoc.HashSize {
				return nodeMeta{}, errors.New("node metadata: bad document hash")
			}
			m.DocHash = string(v)
		case tagSealKey:
			if len(v) != seal.KeyIDSize {
				return nodeMeta{}, errors.New("node metadata: bad sealed-channel key fingerprint")
			}
			m.SealKey = bytes.Clone(v)
		default:
			continue // a newer member's field
		}
		if r.err != nil {
			return nodeMeta{}, fmt.Errorf("node metadata: field %d: %w", tag, r.err)
		}
	}
	if !sawRole {
		return nodeMeta{}, errors.New("node metadata: no role")
	}
	return m, nil
}

// reader reads the values inside one field; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = errors.New(what)
	}
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.fail("bad number")
		return 0
	}
	r.b = r.b[k:]
	return v
}

// bytes reads a memory figure, clamped to statedoc.MaxBytes.
func (r *reader) bytes() int64 { return min(r.int(), statedoc.MaxBytes) }

// int reads a count or a size: a non-negative int64.
func (r *reader) int() int64 {
	v := r.uint()
	if v > math.MaxInt64 {
		r.fail("number out of range")
		return 0
	}
	return int64(v)
}

func (r *reader) str() string {
	n := r.uint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.fail("truncated string")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
