package simtext

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"math"
	"math/rand/v2"
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

// Vector is a deterministic unit vector of n dimensions for text: what a simulator answers
// for an embedding. The same text always gives the same vector.
func Vector(text string, n int) []float32 {
	h := fnv.New64a()
	h.Write([]byte(text))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(n)))
	v := make([]float32, n)
	var norm float64
	for i := range v {
		x := rng.Float64()*2 - 1
		v[i] = float32(x)
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] = float32(float64(v[i]) / norm)
	}
	return v
}

// Base64Floats is v as OpenAI's encoding_format "base64": little-endian float32s.
func Base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
