package simtext

import (
	"bytes"
	"strconv"
	"time"
)

// A stamped token carries the time its simulator began to write it: the token's text, then
// "[t=<Unix nanoseconds>]". It is for measuring what a token's way to a client costs, whatever
// lies between (agents, proxies, dialect adaptations, another process): the client reads the
// stamp out of the content it receives and subtracts it from the time it read it. The time is
// read before the token is encoded, so the engine's own write is in every path alike; after the
// write would be too late (on an idle machine a loopback write wakes the reader, which can have
// the token before the writer's system call returns). The marks are plain in JSON strings (no
// escape in any encoder) and never in the corpus.
const stampOpen, stampClose = "[t=", "]"

// Stamp is tok stamped with the time at.
func Stamp(tok string, at time.Time) string {
	return tok + stampOpen + strconv.FormatInt(at.UnixNano(), 10) + stampClose
}

// StampIn is the time of the last stamp in b (a line of an answer, as its client reads it), if
// it holds one.
func StampIn(b []byte) (time.Time, bool) {
	i := bytes.LastIndex(b, []byte(stampOpen))
	if i < 0 {
		return time.Time{}, false
	}
	digits := b[i+len(stampOpen):]
	end := bytes.IndexByte(digits, stampClose[0])
	if end < 1 {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(string(digits[:end]), 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}
