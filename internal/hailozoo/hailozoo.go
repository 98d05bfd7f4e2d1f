// Package hailozoo knows what differs between hailo-ollama releases: the model names (the renames
// between releases, and whether a daemon's own list, /hailo/v1/list, offers a model) and what
// a reported version implies (tools, the swap defect, the bind setting). It has no
// dependencies, so the ranker (mesh/rank) and the doctor ask it as the driver does. The public record behind
// it is told in docs/raspberry-pi-hailo.md ("What changed between hailo-ollama releases").
package hailozoo

import (
	"slices"
	"strconv"
	"strings"
)

// renames are the zoo models later releases list under another name (the same HEF file):
// 5.1.1's name first, 5.3.0's second. llama3.2:1b (from 5.2.0) and qwen3:1.7b (from 5.3.0) are
// new models, not renames, and 5.1.1's llama3.2:3b has no later name.
var renames = [][2]string{
	{"qwen2.5-instruct:1.5b", "qwen2.5:1.5b"},
	{"deepseek_r1_distill_qwen:1.5b", "deepseek_r1:1.5b"},
}

// ServedName is the name the daemon, listing zoo, knows ref by: ref itself when listed, else
// its other name across a known rename when that one is listed, else ref (the daemon decides).
func ServedName(ref string, zoo []string) string {
	listed := func(n string) bool { return slices.Contains(zoo, n) }
	if listed(ref) {
		return ref
	}
	for _, r := range renames {
		for i, n := range r {
			if n == ref && listed(r[1-i]) {
				return r[1-i]
			}
		}
	}
	return ref
}

// Offers reports whether a hailo-ollama listing zoo can run ref, under its own name or across a
// known rename, and the name it would be run by. Ranking uses it against each host's own list.
func Offers(zoo []string, ref string) (string, bool) {
	name := ServedName(ref, zoo)
	if slices.Contains(zoo, name) {
		return name, true
	}
	return "", false
}

// Release is what a client can make of the version a daemon reports at /api/version.
type Release struct {
	reported string // /api/version as the daemon answers it
	// major, minor are the hailo-ollama release, when the daemon reports one. 5.1.1 answers
	// the Ollama-like "0.5.1" whatever it is (its source says so); that answer, or any other
	// that is not a 5.x release number, leaves them zero: a 5.1-era daemon, or one the driver
	// cannot place, is treated as 5.1.
	major, minor int
}

// ReleaseOf reads the version a daemon reports.
func ReleaseOf(reported string) Release {
	r := Release{reported: reported}
	parts := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(reported), "v"), ".", 3)
	if len(parts) < 2 {
		return r
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || major < 5 {
		return r
	}
	r.major, r.minor = major, minor
	return r
}

func (r Release) atLeast(major, minor int) bool {
	return r.major > major || (r.major == major && r.minor >= minor)
}

// ToolsByTemplate: from 5.3 hailo-ollama reads "tools" and parses the calls from the output
// with the chat template's wrapper, refusing (400, "does not support tools") a model whose
// template has no tools branch. 5.1.1 drops tools silently and answers in free text, so the
// driver refuses them there. 5.2's handling is not in the record: it is refused too.
func (r Release) ToolsByTemplate() bool { return r.atLeast(5, 3) }

// SwapDefect: on 5.3.0 HailoRT does not release the device between sequential loads, and
// answers after a model swap are measurably worse until the daemon restarts
// (hailo-rpi5-examples #197, open). Nothing in the record says 5.4 fixed it, so 5.4 and later
// count as affected until a release says otherwise.
func (r Release) SwapDefect() bool { return r.atLeast(5, 3) }

// Name says the release for messages: "5.3.0", or, for a version that is not a 5.x release
// number, it quoted with "(5.1-era: hailo-ollama 5.1.1 reports 0.5.1)".
func (r Release) Name() string {
	if r.major == 0 {
		return strconv.Quote(r.reported) + " (5.1-era: hailo-ollama 5.1.1 reports 0.5.1)"
	}
	return r.reported
}

// BindsByEnv: 5.3 and later bind by OLLAMA_HOST (their static_config.hpp names it); 5.1.1 reads
// the "server" object of hailo-ollama.json. A daemon reporting "0.5.1" may be either as far as
// the version tells.
func (r Release) BindsByEnv() bool { return r.atLeast(5, 3) }
