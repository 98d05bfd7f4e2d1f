package dialect

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// validUTF8 replaces each invalid byte with U+FFFD, as encoding/json does.
func validUTF8(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "hello", `say "hi"\n`, "tab\there", "\x00\x1f\x7f", "naïve ☃ 🦙", "\u2028\u2029", "bad \xff\xfe utf8", "<a&b>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendJSONString([]byte("x"), s)
		if b[0] != 'x' {
			t.Fatal("overwrote the prefix")
		}
		var got string
		if err := json.Unmarshal(b[1:], &got); err != nil {
			t.Fatalf("%q encoded as invalid JSON %s: %v", s, b[1:], err)
		}
		if want := validUTF8(s); got != want {
			t.Fatalf("round trip of %q gave %q, want %q", s, got, want)
		}
		if strings.ContainsAny(string(b[1:]), "\n\r\u2028\u2029") {
			t.Fatalf("line breaks left raw in %q: an SSE or NDJSON line would split", b)
		}
	})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"a"}]},{"role":"user","content":"b"}],"max_tokens":5,"stop":["x"]}`,
		`{"model":"m","messages":[],"options":{"num_predict":-1,"stop":"y"}}`,
		`{"model":"m","prompt":"p","system":"s","stream":false}`,
		`{"model":"m"}`,
		`{"model":`,
		`[]`,
		`null`,
	} {
		for d := range 3 {
			f.Add(d, []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, d int, body []byte) {
		if d < 0 || d > 2 {
			return
		}
		c, fail := Parse(Dialect(d), body)
		if (c == nil) == (fail == nil) {
			t.Fatalf("parse gave %v and %v", c, fail)
		}
		if fail != nil {
			if fail.Status != 400 || fail.Msg == "" {
				t.Fatalf("refusal %+v", fail)
			}
			return
		}
		if c.Model == "" {
			t.Fatal("accepted without a model")
		}
		if !c.Load && len(c.Req.Messages) == 0 {
			t.Fatal("accepted a chat without messages")
		}
		if c.PromptTokens < 0 || c.Req.MaxTokens < 0 {
			t.Fatalf("negative counts: %+v", c)
		}
	})
}
