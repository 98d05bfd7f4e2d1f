package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
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

// quickOARequest reads a chat request of the shape clients send — a model, messages of a role
// and a string content, whether to stream and with which options, the sampling numbers, a
// token limit, and members the agent does not read (a user, penalties) of a plain value — from
// its bytes, and reports false for anything else, which encoding/json then decodes as before:
// tools, a stop, a response format, content parts, a duplicate, a key spelled other than its
// tag or with anything but ASCII, a role or model with an escape or invalid UTF-8, an integer
// with a fraction or exponent, a value of another type, trailing data. What it accepts it reads
// exactly as json.Unmarshal would (FuzzQuickOARequest): keys spelled exactly as the fields' tags
// (encoding/json's case-insensitive match is then the same field), a content string kept as it
// stands (json.RawMessage). encoding/json took 12-16 µs of a chat's CPU at 64 streams by the
// profile (reflection, and the handler's stack grown for its recursion, again after each
// collection shrank it), more than the rest of the agent's work before the engine request
// together; the official SDKs send a token limit or sampling numbers with most requests.
func quickOARequest(body []byte, req *oaRequest) bool {
	s := quickScan{b: body}
	var seen uint16
	ok := s.object(func(key []byte) bool {
		k := slices.Index(quickKeys[:], string(key))
		if k < 0 {
			return s.ignored(key)
		}
		if seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		switch quickKeys[k] {
		case "model":
			v, ok := s.str()
			req.Model = string(v)
			return ok
		case "messages":
			return s.messages(req)
		case "stream":
			req.Stream = s.lit("true")
			return req.Stream || s.lit("false")
		case "stream_options":
			return s.streamOptions(req)
		case "temperature":
			return s.float(&req.Temperature)
		case "top_p":
			return s.float(&req.TopP)
		case "top_k":
			return s.integer(&req.TopK)
		case "seed":
			return s.integer(&req.Seed)
		case "max_tokens":
			return s.integer(&req.MaxTokens)
		case "max_completion_tokens":
			return s.integer(&req.MaxCompletionTokens)
		case "n":
			return s.integer(&req.N)
		}
		return false
	})
	s.ws()
	return ok && s.i == len(s.b)
}

// quickKeys are the members of a chat request quickOARequest reads (at most 16: a bit each).
var quickKeys = [...]string{"model", "messages", "stream", "stream_options", "temperature", "top_p", "top_k", "seed", "max_tokens", "max_completion_tokens", "n"}

// oaKeys are all of oaRequest's members, as encoding/json names them.
var oaKeys = jsonKeys(reflect.TypeFor[oaRequest]())

// jsonKeys are the names encoding/json gives a struct's fields.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		keys = append(keys, name)
	}
	return keys
}

// ignored consumes the value of a member oaRequest has no field for, which encoding/json skips:
// a plain value (a string, a number, true, false, null), under a key of ASCII that is no field's
// name in any case (encoding/json would fill that field; it folds some letters beyond ASCII onto
// ASCII ones, so any other key is left to it too).
func (s *quickScan) ignored(key []byte) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	for _, k := range oaKeys {
		if bytes.EqualFold(key, []byte(k)) {
			return false
		}
	}
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '"' {
		return s.rawStr()
	}
	if s.lit("true") || s.lit("false") || s.lit("null") {
		return true
	}
	_, ok := s.number()
	return ok
}

// streamOptions reads stream_options: null, or an object of include_usage at most.
func (s *quickScan) streamOptions(req *oaRequest) bool {
	if s.lit("null") {
		return true
	}
	req.StreamOptions = &struct {
		IncludeUsage bool `json:"include_usage"`
	}{}
	var usage bool
	return s.object(func(key []byte) bool {
		if string(key) != "include_usage" || usage {
			return false
		}
		usage = true
		req.StreamOptions.IncludeUsage = s.lit("true")
		return req.StreamOptions.IncludeUsage || s.lit("false")
	})
}

// integer reads null (dst stays nil) or an integer without fraction or exponent that fits an
// int, as encoding/json takes into an *int.
func (s *quickScan) integer(dst **int) bool {
	if s.lit("null") {
		return true
	}
	num, ok := s.number()
	if !ok || bytes.ContainsAny(num, ".eE") || len(num) > 18 {
		return false
	}
	n, err := strconv.Atoi(string(num))
	if err != nil {
		return false
	}
	*dst = &n
	return true
}

// float reads null (dst stays nil) or a number, as encoding/json takes into a *float64: its
// value is strconv.ParseFloat's, and a number beyond float64 is left to encoding/json's error.
func (s *quickScan) float(dst **float64) bool {
	if s.lit("null") {
		return true
	}
	num, ok := s.number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil {
		return false
	}
	*dst = &f
	return true
}

// number consumes a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *quickScan) number() ([]byte, bool) {
	s.ws()
	start := s.i
	b := s.b
	i := s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - j
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	s.i = i
	return b[start:i], true
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
				s.ws()
				start := s.i
				ok := s.rawStr()
				// The quoted string as it stands, as json.RawMessage keeps it.
				m.Content = json.RawMessage(s.b[start:s.i])
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

// rawStr consumes a string that is valid JSON — its escapes well formed, no control character —
// whatever it holds: as json.RawMessage keeps it, invalid UTF-8 and all (decoding it to a
// string replaces that, as encoding/json does).
func (s *quickScan) rawStr() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			j++
			if j >= len(s.b) {
				return false
			}
			switch s.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(s.b) {
					return false
				}
				for _, h := range s.b[j+1 : j+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				j += 4
			default:
				return false
			}
		}
	}
	return false
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
