package simtext

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// FromSchema returns a JSON value that satisfies the common subset of JSON Schema models are
// asked for (objects with properties, arrays, strings with or without an enum, numbers,
// booleans): what a real engine's grammar would force, minus the model's choices. Properties
// come in name order; a string without enum is "sim"; an empty or unreadable schema gives an
// object with one string member, "answer".
func FromSchema(schema json.RawMessage) string {
	var s map[string]any
	if json.Unmarshal(schema, &s) != nil || len(s) == 0 {
		return `{"answer":"sim"}`
	}
	var b strings.Builder
	value(&b, s, 0)
	return b.String()
}

func value(b *strings.Builder, s map[string]any, depth int) {
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		v, _ := json.Marshal(e[0])
		b.Write(v)
		return
	}
	if c, ok := s["const"]; ok {
		v, _ := json.Marshal(c)
		b.Write(v)
		return
	}
	typ, _ := s["type"].(string)
	if ts, ok := s["type"].([]any); ok && len(ts) > 0 {
		typ, _ = ts[0].(string)
	}
	if typ == "" && s["properties"] != nil {
		typ = "object"
	}
	switch {
	case depth > 8:
		b.WriteString("null")
	case typ == "object":
		props, _ := s["properties"].(map[string]any)
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		slices.Sort(names)
		b.WriteByte('{')
		for i, k := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			p, _ := props[k].(map[string]any)
			value(b, p, depth+1)
		}
		b.WriteByte('}')
	case typ == "array":
		items, _ := s["items"].(map[string]any)
		b.WriteByte('[')
		value(b, items, depth+1)
		b.WriteByte(']')
	case typ == "integer" || typ == "number":
		b.WriteString(strconv.Itoa(1))
	case typ == "boolean":
		b.WriteString("true")
	case typ == "null":
		b.WriteString("null")
	default:
		b.WriteString(`"sim"`)
	}
}

// Pieces cuts s into pieces of about BytesPerToken bytes, the "tokens" a simulator streams a
// shaped answer (a tool call's arguments, a JSON document) in.
func Pieces(s string) []string {
	var out []string
	for len(s) > 0 {
		n := min(BytesPerToken, len(s))
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
