// Package stream reads engines' streamed answers (NDJSON, server-sent events) for the hot path
// of a chat: line by line without copying, telling whether the next line is already at hand
// (so a driver can set engines.ChatChunk.More), and reading the JSON string of a token from its
// bytes where a whole decode would cost more than everything else the agent does per token.
package stream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Reader reads lines. A line is valid until the next call.
type Reader struct {
	br   *bufio.Reader
	long []byte // a line longer than br's buffer, assembled
	max  int
	// ready is the length of the whole line Ready found at the start of the buffer, its end
	// included; 0 when none is known. The next Line takes it without looking for its end again.
	ready int
}

// buffers are the readers' buffers, reused: one per streamed answer would be most of what an
// answer allocates.
var buffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// NewReader reads body's lines of at most max bytes. Close gives its buffer back.
func NewReader(body io.Reader, max int) *Reader {
	br := buffers.Get().(*bufio.Reader)
	br.Reset(body)
	return &Reader{br: br, max: max}
}

// Close gives the buffer back; the reader and its last line are not to be used after.
func (r *Reader) Close() {
	if r.br != nil {
		r.br.Reset(nil)
		buffers.Put(r.br)
		r.br = nil
	}
}

// Line is the next line without its end ("\n" or "\r\n"); at the end of the stream, what is
// left, with io.EOF. A line over the bound is an error.
func (r *Reader) Line() ([]byte, error) {
	if n := r.ready; n > 0 {
		r.ready = 0
		line, _ := r.br.Peek(n)
		// Within the buffer, Discard moves nothing: line stays valid until the next read, as
		// ReadSlice's does.
		r.br.Discard(n)
		return trimEnd(line), nil
	}
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.long = append(r.long[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = r.br.ReadSlice('\n')
			if len(r.long)+len(line) > r.max {
				return nil, fmt.Errorf("a line over %d bytes", r.max)
			}
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	return trimEnd(line), err
}

// trimEnd is line without its end, "\n" or "\r\n".
func trimEnd(line []byte) []byte {
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r"))
}

// Ready reports whether a whole line is in the buffer: the next Line does not wait. It
// remembers where that line ends, for the next Line (a search of the buffer was a tenth of
// reading an event).
func (r *Reader) Ready() bool {
	b, _ := r.br.Peek(r.br.Buffered())
	i := bytes.IndexByte(b, '\n')
	r.ready = i + 1
	return i >= 0
}

// SkipBlank takes a blank line already in the buffer: the separator after a server-sent event,
// which arrives with it. A driver that calls it after each event goes round its loop once a
// token instead of twice (llama-server's reader: BenchmarkReadEvents, 144-156 against 162-170
// ns a token).
func (r *Reader) SkipBlank() {
	r.ready = 0
	n := r.br.Buffered()
	if n == 0 {
		return
	}
	b, _ := r.br.Peek(min(n, 2))
	switch {
	case b[0] == '\n':
		r.br.Discard(1)
	case len(b) == 2 && b[0] == '\r' && b[1] == '\n':
		r.br.Discard(2)
	}
}

// String reads the JSON string starting at data[start] (a quote) as encoding/json would, and
// returns it with the index just past it. ok is false when it is not a valid string, or not
// plain text (a control character, invalid UTF-8, U+2028 or U+2029): the caller decodes the
// whole document instead.
func String(data []byte, start int) (s string, end int, ok bool) {
	if start >= len(data) || data[start] != '"' {
		return "", -1, false
	}
	escaped, wide := false, false
	for i := start + 1; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			raw := data[start : i+1]
			if wide {
				if in := raw[1 : len(raw)-1]; !utf8.Valid(in) || bytes.Contains(in, []byte("\u2028")) || bytes.Contains(in, []byte("\u2029")) {
					return "", -1, false
				}
			}
			if !escaped {
				return string(raw[1 : len(raw)-1]), i + 1, true
			}
			// A variable of its own: decoding into s would move s to the heap on every call,
			// an allocation per token on the plain path too.
			var unq string
			if json.Unmarshal(raw, &unq) != nil {
				return "", -1, false
			}
			return unq, i + 1, true
		case c == '\\':
			escaped = true
			i++
			if i >= len(data) || strings.IndexByte(`"\/bfnrtu`, data[i]) < 0 {
				return "", -1, false
			}
		case c < 0x20:
			return "", -1, false
		case c >= utf8.RuneSelf:
			wide = true
		}
	}
	return "", -1, false
}

// HasMember reports whether compact JSON may hold a member named by one of keys, matched as
// encoding/json matches names, without regard to case. Only compact ASCII without escapes is
// judged: a space, a tab, an escape or a non-ASCII byte anywhere answers true, so that no name
// hides behind one (a document with a space in a value takes the decoding path).
func HasMember(data []byte, keys ...string) bool {
	for i, c := range data {
		if c == ' ' || c == '\t' || c == '\\' || c >= utf8.RuneSelf {
			return true
		}
		// In compact JSON a name starts right after '{' or ','.
		if c != '"' || i == 0 || (data[i-1] != '{' && data[i-1] != ',') {
			continue
		}
		for _, k := range keys {
			if n := i + 1 + len(k); n < len(data) && data[n] == '"' && bytes.EqualFold(data[i+1:n], []byte(k)) {
				return true
			}
		}
	}
	return false
}

// Members calls fn with the name (unquoted) and raw value of each member of the JSON object data, in
// order, until fn returns false. Only compact ASCII without escapes is walked (a space, a tab,
// an escape or a non-ASCII byte anywhere answers false, as HasMember judges), so that every
// string ends at its next quote; a document that is not an object of that kind answers false
// too. It does not check that values are valid JSON: the caller reads the values it uses.
func Members(data []byte, fn func(name, value []byte) bool) bool {
	for _, c := range data {
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return false
	}
	if len(data) == 2 {
		return true
	}
	for i := 1; i < len(data); {
		if data[i] != '"' {
			return false
		}
		n := bytes.IndexByte(data[i+1:], '"')
		if n < 0 || i+n+2 >= len(data) || data[i+n+2] != ':' {
			return false
		}
		name := data[i+1 : i+1+n]
		start := i + n + 3
		end := skipValue(data, start)
		if end < 0 || end >= len(data) || (data[end] != ',' && data[end] != '}') {
			return false
		}
		if !fn(name, data[start:end]) {
			return true
		}
		if data[end] == '}' {
			return end == len(data)-1
		}
		i = end + 1
	}
	return false
}

// skipValue returns the index just past the value starting at data[i], in the compact,
// escape-free form Members walks, or -1.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		n := bytes.IndexByte(data[i+1:], '"')
		if n < 0 {
			return -1
		}
		return i + n + 2
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				n := bytes.IndexByte(data[j+1:], '"')
				if n < 0 {
					return -1
				}
				j += n + 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(data) && data[j] != ',' && data[j] != '}' && data[j] != ']' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}
