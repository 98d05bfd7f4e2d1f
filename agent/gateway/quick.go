package gateway

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// quickModel reads the model a chat request names (see modelName) from its bytes, after
// json.Valid, and reports decided false for anything it does not take, which encoding/json then
// decodes: a document that is not an object, a name with an escape, one that is "model" but for
// case, a model's value that is neither a plain string nor null. What it takes it reads as
// json.Unmarshal into a struct with that one field would (FuzzQuickModel): the last of
// duplicates, null leaving the name as it was. encoding/json took 4.4 µs of the forwarder's
// time before the request left it (a relayed one-token chat, by a timing probe), json.Valid
// and this walk a fraction of that: Unmarshal checks validity first and then walks it again,
// by reflection.
func quickModel(body []byte) (model string, decided bool) {
	if !json.Valid(body) {
		return "", false
	}
	s := quickScan{b: body}
	var v []byte
	ok := s.object(func(key []byte) bool {
		if string(key) == "model" {
			if s.lit("null") {
				return true
			}
			m, ok := s.str()
			v = m
			return ok
		}
		return !bytes.EqualFold(key, modelKey) && s.skip()
	})
	if !ok {
		return "", false
	}
	return string(v), true
}

var modelKey = []byte("model")

// quickOARequest reads a chat request of the plain shape most clients send — a model, messages
// of a role and a string content, whether to stream — from its bytes, and reports false for
// anything else, which encoding/json then decodes as before: any other member, a duplicate, a
// string with an escape, a control character or invalid UTF-8, a value of another type, trailing
// data. What it accepts it reads exactly as json.Unmarshal would (FuzzQuickOARequest): keys
// spelled exactly as the fields' tags (encoding/json's case-insensitive match is then the same
// field), strings with nothing to unescape or replace. encoding/json took 12-16 µs of a chat's
// CPU at 64 streams by the profile (reflection, and the handler's stack grown for its
// recursion, again after each collection shrank it), more than the rest of the agent's work
// before the engine request together.
func quickOARequest(body []byte, req *oaRequest) bool {
	s := quickScan{b: body}
	var seen uint8
	const (
		model = 1 << iota
		messages
		stream
	)
	ok := s.object(func(key []byte) bool {
		switch string(key) {
		case "model":
			if seen&model != 0 {
				return false
			}
			seen |= model
			v, ok := s.str()
			req.Model = string(v)
			return ok
		case "messages":
			if seen&messages != 0 {
				return false
			}
			seen |= messages
			return s.messages(req)
		case "stream":
			if seen&stream != 0 {
				return false
			}
			seen |= stream
			req.Stream = s.lit("true")
			return req.Stream || s.lit("false")
		}
		return false
	})
	s.ws()
	return ok && s.i == len(s.b)
}

// messages reads a non-empty array of messages, each of a role and a string content.
func (s *quickScan) messages(req *oaRequest) bool {
	if !s.next('[') {
		return false
	}
	for {
		var m oaMessage
		var role, content bool
		ok := s.object(func(key []byte) bool {
			switch string(key) {
			case "role":
				if role {
					return false
				}
				role = true
				v, ok := s.str()
				m.Role = knownRole(v)
				return ok
			case "content":
				if content {
					return false
				}
				content = true
				start := s.i
				_, ok := s.str()
				// The quoted string as it stands, as json.RawMessage keeps it (past the
				// whitespace before it, which RawMessage does not keep).
				m.Content = json.RawMessage(trimLeftWS(s.b[start:s.i]))
				return ok
			}
			return false
		})
		if !ok {
			return false
		}
		req.Messages = append(req.Messages, m)
		if s.next(',') {
			continue
		}
		return s.next(']')
	}
}

// knownRole is a role as a string, without an allocation for the roles there are.
func knownRole(v []byte) string {
	for _, r := range [...]string{"user", "assistant", "system", "tool", "developer"} {
		if string(v) == r {
			return r
		}
	}
	return string(v)
}

// quickScan walks a JSON document's bytes.
type quickScan struct {
	b []byte
	i int
}

// ws skips JSON whitespace.
func (s *quickScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c, after whitespace, if it is next.
func (s *quickScan) next(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// lit consumes the literal word (true, false) if it is next.
func (s *quickScan) lit(word string) bool {
	s.ws()
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// str consumes a string with nothing to unescape or replace and returns its bytes: false for
// one with a backslash, a control character (which JSON does not allow raw) or invalid UTF-8.
func (s *quickScan) str() ([]byte, bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[start:j]
			if !utf8.Valid(v) {
				return nil, false
			}
			s.i = j + 1
			return v, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// skip consumes one value of a document json.Valid accepted.
func (s *quickScan) skip() bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	}
	// A number or a literal: up to the next delimiter.
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case ',', ']', '}', ' ', '\t', '\n', '\r':
			return s.i > start
		}
	}
	return s.i > start
}

// skipString consumes the string at s.i (a quote), escapes and all.
func (s *quickScan) skipString() bool {
	for j := s.i + 1; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			j++
		case '"':
			s.i = j + 1
			return true
		}
	}
	return false
}

// object consumes an object, handing each member's value to member after its key and colon;
// false as soon as member does, or the object is not well formed.
func (s *quickScan) object(member func(key []byte) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		key, ok := s.str()
		if !ok || !s.next(':') || !member(key) {
			return false
		}
		if s.next(',') {
			continue
		}
		return s.next('}')
	}
}

func trimLeftWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// plainString is the value of a JSON string that has nothing to unescape or replace, given
// with its quotes (as a json.RawMessage holds it); false for any other.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	v := raw[1 : len(raw)-1]
	for _, c := range v {
		if c == '"' || c == '\\' || c < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(v) {
		return "", false
	}
	return string(v), true
}
