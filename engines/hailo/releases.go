package hailo

import (
	"strconv"
	"strings"
)

// What the driver knows of hailo-ollama's releases; docs/raspberry-pi-hailo.md ("What changed
// between hailo-ollama releases") is the account of the public record behind it, including
// where that record is silent.

// release is what the driver makes of the version a daemon reports at /api/version.
type release struct {
	reported string // /api/version as the daemon answers it
	// major, minor are the hailo-ollama release, when the daemon reports one. 5.1.1 answers
	// the Ollama-like "0.5.1" whatever it is (its source says so); that answer, or any other
	// that is not a 5.x release number, leaves them zero: a 5.1-era daemon, or one the driver
	// cannot place, is treated as 5.1.
	major, minor int
}

func releaseOf(reported string) release {
	r := release{reported: reported}
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

func (r release) atLeast(major, minor int) bool {
	return r.major > major || (r.major == major && r.minor >= minor)
}

// toolsByTemplate: from 5.3 hailo-ollama reads "tools" and parses the calls from the output
// with the chat template's wrapper, refusing (400, "does not support tools") a model whose
// template has no tools branch. 5.1.1 drops tools silently and answers in free text, so the
// driver refuses them there. 5.2's handling is not in the record: it is refused too.
func (r release) toolsByTemplate() bool { return r.atLeast(5, 3) }

// swapDefect: on 5.3.0 HailoRT does not release the device between sequential loads, and
// answers after a model swap are measurably worse until the daemon restarts
// (hailo-rpi5-examples #197, open). Nothing in the record says 5.4 fixed it, so 5.4 and later
// count as affected until a release says otherwise.
func (r release) swapDefect() bool { return r.atLeast(5, 3) }

// name says the release for messages: "5.3.0", or "0.5.1 (5.1-era, or not a release number)".
func (r release) name() string {
	if r.major == 0 {
		return strconv.Quote(r.reported) + " (5.1-era: hailo-ollama 5.1.1 reports 0.5.1)"
	}
	return r.reported
}
